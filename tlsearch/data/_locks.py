"""A shared/exclusive lock on a file with flock(2): held while a cached dataset is open, so eviction can
tell which datasets are in use. The kernel releases it when the holder closes it or dies."""

from __future__ import annotations

import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no lock, and eviction treats every dataset as in use
    fcntl = None


class UseLock:
    """`acquire_shared()` while using a dataset; `try_exclusive()` succeeds only when no one holds it shared."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        return self._fd

    def acquire_shared(self) -> None:
        fd = self._open()
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_SH)
        os.utime(fd)  # the lock file's mtime is the dataset's last use, for LRU eviction

    def try_exclusive(self) -> bool:
        if fcntl is None:
            return False
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            self.release()
            return False

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the flock

    def __del__(self) -> None:
        self.release()
