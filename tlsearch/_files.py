"""The one way tlsearch writes files under its home, cache and data directories.

A whole file is written to a temporary file in the same folder (created with `O_CREAT | O_EXCL | O_NOFOLLOW`),
synced, then renamed over the target (`write_file`, `write_file_with` for libraries that write by path), so a
reader sees the old file or the new one, never half of one. A symbolic link at the target is refused
(`SymlinkRefusedError`), never followed; appends and in-place opens refuse one too (`open_no_follow`). A full disk
or quota (ENOSPC, EDQUOT, EFBIG) is `DiskFullError`: one line naming the path and the space needed, and no
partial file left behind.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from tlsearch.errors import DiskFullError, SymlinkRefusedError

_FULL = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def write_file(path: str | os.PathLike, data: bytes | str, mode: int = 0o644) -> Path:
    """Write `data` (text as UTF-8) to `path` whole: a temporary file in the same folder, fsync, rename."""
    content = data.encode("utf-8") if isinstance(data, str) else data

    def write(tmp: Path) -> None:
        fd = open_no_follow(tmp, os.O_WRONLY)
        try:
            write_to(fd, content, tmp)
        finally:
            os.close(fd)

    return write_file_with(path, write, mode=mode, size=len(content))


def write_file_with(
    path: str | os.PathLike, write: Callable[[Path], None], *, mode: int = 0o644, size: int | None = None
) -> Path:
    """Let `write(tmp)` write the file at a fresh temporary path beside `path` (same suffix), then sync it and
    rename it over `path`. The previous file at `path` stays until the new one is whole; on any error the
    temporary file is removed and `path` is untouched. `size`, when known, is named in a full-disk error."""
    path = Path(path)
    refuse_symlink(path)
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:12]}.tmp{path.suffix}")
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode))
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY | _NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        refuse_symlink(path)
        os.replace(tmp, path)
    except BaseException as error:
        written = _size(tmp)
        _remove(tmp)
        if isinstance(error, OSError) and error.errno in _FULL:
            raise disk_full(path, error, size if size is not None else written) from None
        raise
    _sync_folder(path.parent)
    return path


def open_no_follow(path: str | os.PathLike, flags: int, mode: int = 0o644) -> int:
    """`os.open(path, flags | O_NOFOLLOW, mode)`: SymlinkRefusedError, one line naming the path, at a link."""
    try:
        return os.open(path, flags | _NOFOLLOW, mode)
    except OSError as error:
        if error.errno == errno.ELOOP or os.path.islink(path):
            raise _refused(Path(path)) from None
        raise


def write_to(fd: int, data: bytes, path: str | os.PathLike, offset: int | None = None) -> None:
    """Write all of `data` to the open file `fd` (at `offset`, else where it stands) and sync it; a full disk is
    DiskFullError naming `path`."""
    try:
        if offset is None:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        else:
            os.pwrite(fd, data, offset)
        os.fsync(fd)
    except OSError as error:
        if error.errno in _FULL:
            raise disk_full(Path(path), error, len(data)) from None
        raise


def refuse_symlink(path: Path) -> None:
    if path.is_symlink():
        raise _refused(path)


def disk_full(path: Path, error: OSError, needed: int) -> DiskFullError:
    """The one-line error of a write to `path` that ran out of space: what was needed, what is free."""
    try:
        free = f"{shutil.disk_usage(path.parent).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    reason = "the file-size limit (ulimit -f)" if error.errno == errno.EFBIG else "no space left on the device"
    return DiskFullError(
        error.errno,
        f"cannot write {path}: {reason} ({needed:,} bytes needed, {free}); free some space or choose another folder",
    )


def _refused(path: Path) -> SymlinkRefusedError:
    return SymlinkRefusedError(
        errno.ELOOP,
        f"refusing to write {path}: it is a symbolic link (tlsearch never writes through one); remove it or "
        "choose another path",
    )


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sync_folder(folder: Path) -> None:
    """Make the rename itself survive a crash (POSIX: fsync the folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
