"""Trial slots: how any number of drivers on one study finish exactly its `n_trials` trials.

A driver takes a slot before it asks for a trial and gives it back when that trial fails; the count of
slots taken lives in the store, changed atomically: a conditional `$inc` on the study document in MongoDB
(`MongoStorage.claim_trial_slot`), a counter file under an exclusive `flock` beside the journal file.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import optuna

from tlsearch._optuna_compat import journal_file_path

try:
    import fcntl
except ImportError:  # Windows: no counter; the driver falls back to counting finished trials
    fcntl = None  # type: ignore[assignment]


class TrialSlots:
    """The slot counter of one study; `claimed()` gives its start value (finished + running trials)."""

    def __init__(self, storage: optuna.storages.BaseStorage, study_id: int) -> None:
        self.storage, self.study_id = storage, study_id

    def claim(self, limit: int, claimed: Callable[[], int]) -> bool:
        """Take a slot if fewer than `limit` are taken."""
        if hasattr(self.storage, "claim_trial_slot"):
            return self.storage.claim_trial_slot(self.study_id, limit, claimed)
        with _LockedCounter(self._counter_path()) as counter:
            taken = counter.read(claimed)
            if taken >= limit:
                return False
            counter.write(taken + 1)
            return True

    def release(self) -> None:
        """Give back a slot (its trial failed)."""
        if hasattr(self.storage, "release_trial_slot"):
            self.storage.release_trial_slot(self.study_id)
            return
        path = self._counter_path()
        if os.path.exists(path):
            with _LockedCounter(path) as counter:
                taken = counter.read(lambda: 0)
                counter.write(max(taken - 1, 0))

    def _counter_path(self) -> str:
        return f"{journal_file_path(self.storage)}.slots-{self.study_id}"


class _LockedCounter:
    """An integer in a small file, held under an exclusive `flock` while in the `with` block."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __enter__(self) -> _LockedCounter:
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        os.close(self._fd)  # closing the file releases its flock

    def read(self, initial: Callable[[], int]) -> int:
        text = os.pread(self._fd, 64, 0).decode().strip()
        return int(text) if text else initial()

    def write(self, value: int) -> None:
        data = f"{value}\n".encode()
        os.pwrite(self._fd, data.ljust(32), 0)
        os.fsync(self._fd)
