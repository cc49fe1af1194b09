"""This machine's record of which study file created each study, so `resume NAME` and `refit NAME` can find it.

The record lives in the user's data directory (one small JSON file per store and study name, holding the
study file's absolute path and sha256), never in the store: whoever can write to the store must not choose
which file is imported. The path the store keeps is only a hint in error messages.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import warnings
from pathlib import Path

import platformdirs

from tlsearch._files import write_file
from tlsearch.errors import TLSearchError


class StudyFileChangedWarning(UserWarning):
    """The study file differs from the one the study was run with on this machine."""


def record_dir() -> Path:
    """Where this machine keeps its records (`<user data dir>/tlsearch/study_files`)."""
    return Path(platformdirs.user_data_dir("tlsearch")) / "study_files"


def remember(stores, name: str, study_file: str | os.PathLike) -> None:
    """Record that study `name` of `stores` runs `study_file` (its absolute path and current sha256)."""
    path = Path(study_file).resolve()
    entry = {"store": stores.describe(), "study": name, "path": str(path), "sha256": _sha256(path)}
    target = _entry_path(stores, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_file(target, json.dumps(entry), mode=0o600)


def copy_record(source, target, name: str, to_name: str) -> None:
    """After copying study `name` of `source` to `to_name` of `target`: the copy runs the same study file."""
    entry = _read_entry(source, name)
    if entry is not None and Path(entry["path"]).is_file():
        remember(target, to_name, entry["path"])


def resolve(stores, name: str, given: str | os.PathLike | None, stored_hint: str | None = None) -> Path:
    """The study file to run for study `name`: `given` (the user named it), else this machine's record.

    Raises TLSearchError when there is no record or the recorded file is gone; warns
    (`StudyFileChangedWarning`) when the recorded file changed since. `stored_hint`, the path the store
    names, only appears in the error message.
    """
    if given is not None:
        return Path(given)
    entry = _read_entry(stores, name)
    hint = f" (the store says it was run from {stored_hint}; check that file, then pass it)" if stored_hint else ""
    if entry is None:
        raise TLSearchError(f"this machine has no record of the study file of {name!r}{hint}: pass --study PATH")
    path = Path(entry["path"])
    if not path.is_file():
        raise TLSearchError(f"the study file {path} that ran {name!r} on this machine is gone: pass --study PATH")
    if _sha256(path) != entry["sha256"]:
        warnings.warn(
            f"study file {path} changed since study {name!r} was run with it (sha256 "
            f"{entry['sha256'][:12]} then, {_sha256(path)[:12]} now); running it anyway",
            StudyFileChangedWarning,
            stacklevel=2,
        )
    return path


class UntrustedRecordWarning(UserWarning):
    """A study-file record that another user could have written: ignored."""


def _read_entry(stores, name: str) -> dict | None:
    path = _entry_path(stores, name)
    try:
        if not _trusted(path):
            return None
        entry = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise TLSearchError(f"cannot read this machine's study-file record of {name!r}: {error}") from None
    if entry.get("store") != stores.describe() or entry.get("study") != name:
        return None  # a hash collision of the key; never seen, but never run the wrong file
    return entry


def _trusted(path: Path) -> bool:
    """Whether the record at `path` is a plain file of this user that no one else may write; warns when not."""
    info = os.lstat(path)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a plain file"
    elif hasattr(os, "getuid") and info.st_uid != os.getuid():
        problem = f"belongs to user id {info.st_uid}, not to you"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    if problem:
        warnings.warn(
            f"ignoring this machine's study-file record {path}: it {problem}; remove it, then pass --study PATH",
            UntrustedRecordWarning,
            stacklevel=3,
        )
    return problem is None


def _entry_path(stores, name: str) -> Path:
    key = hashlib.sha256(f"{stores.describe()}\n{name}".encode()).hexdigest()
    return record_dir() / f"{key}.json"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
