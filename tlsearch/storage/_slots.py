"""Trial slots and claimed folds: how any number of drivers on one study finish exactly its `n_trials` trials
and keep to its fold budget together.

A driver takes a slot before it asks for a trial and gives it back when that trial fails; it claims the trial's
k folds before it starts it and gives back those the trial did not train when it ends (`ClaimedFolds`). Both
counts live in the store, changed atomically: a conditional `$inc` on the study document in MongoDB
(`MongoStorage.claim_trial_slot`, `claim_folds`), a counter file under an exclusive `flock` beside the journal
file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import optuna

from tlsearch._files import open_no_follow, write_file
from tlsearch._text import printable
from tlsearch.errors import SlotCounterError
from tlsearch.storage._extensions import FoldCounter, TrialSlotCounter

try:
    import fcntl
except ImportError:  # Windows: no counter; the driver falls back to counting finished trials
    fcntl = None  # type: ignore[assignment]


class TrialSlots:
    """The slot counter of one study, kept by its store (`TrialSlotCounter`); `claimed()` gives its start value
    (finished + running trials)."""

    def __init__(self, storage: optuna.storages.BaseStorage, study_id: int) -> None:
        if not isinstance(storage, TrialSlotCounter):
            raise TypeError(f"{type(storage).__name__} keeps no trial slots: use MongoStorage or JournalStorage")
        self.storage, self.study_id = storage, study_id

    def claim(self, limit: int, claimed: Callable[[], int]) -> int | None:
        """Take a slot if fewer than `limit` are taken: the slots taken after the claim, or None. SlotCounterError
        when the counter holds anything but a count in 0..limit."""
        return self.storage.claim_trial_slot(self.study_id, limit, claimed)

    def release(self) -> None:
        """Give back a slot (its trial failed)."""
        self.storage.release_trial_slot(self.study_id)


class ClaimedFolds:
    """The fold counter of one study, kept by its store (`FoldCounter`): folds trained by its trials, plus k for
    each trial running; the start value comes from `used()` (see `FoldCounter.claim_folds`). Whatever trains
    folds for the study claims them here first (a trial its k; a path that trains more folds of a trial, such
    as a re-evaluation, those)."""

    def __init__(self, storage: optuna.storages.BaseStorage, study_id: int) -> None:
        if not isinstance(storage, FoldCounter):
            raise TypeError(f"{type(storage).__name__} keeps no fold counter: use MongoStorage or JournalStorage")
        self.storage, self.study_id = storage, study_id

    def claim(self, n: int, limit: int, used: Callable[[], int]) -> int | None:
        """Claim `n` folds if no more than `limit` are then claimed: the count after the claim, or None."""
        return self.storage.claim_folds(self.study_id, n, limit, used)

    def release(self, n: int) -> None:
        """Give back `n` folds that were claimed and not trained."""
        if n > 0:
            self.storage.release_folds(self.study_id, n)

    def count(self) -> int | None:
        """The folds claimed now, or None where no driver has counted them yet."""
        return self.storage.folds_claimed(self.study_id)


def folds_claimed(storage: optuna.storages.BaseStorage, study_id: int) -> int | None:
    """A study's folds claimed, None where its store keeps no fold counter or none is kept yet."""
    return storage.folds_claimed(study_id) if isinstance(storage, FoldCounter) else None


def claim_in_file(path: str, limit: int, claimed: Callable[[], int]) -> int | None:
    """`TrialSlotCounter.claim_trial_slot` on a counter file at `path`."""
    with _LockedCounter(path) as counter:
        taken = counter.read(claimed, limit)
        if taken >= limit:
            return None
        counter.write(taken + 1)
        return taken + 1


def release_in_file(path: str, n: int = 1, what: str = "trial-slot counter") -> None:
    """`TrialSlotCounter.release_trial_slot` (and `FoldCounter.release_folds`, giving back `n`) on a counter file at
    `path`."""
    if os.path.exists(path):
        with _LockedCounter(path, what) as counter:
            taken = counter.read(lambda: 0, sys.maxsize)
            counter.write(max(taken - n, 0))


def claim_folds_in_file(path: str, n: int, limit: int, used: Callable[[], int]) -> int | None:
    """`FoldCounter.claim_folds` on a counter file at `path`; unlike a trial slot's, a count above `limit` is
    obeyed (a run with a smaller fold budget after a larger one): nothing more is claimed."""
    with _LockedCounter(path, "fold counter") as counter:
        taken = counter.read(used, sys.maxsize)
        if taken + n > limit:
            return None
        counter.write(taken + n)
        return taken + n


def count_in_file(path: str) -> int | None:
    """`FoldCounter.folds_claimed` on a counter file at `path` (read under its lock)."""
    if not os.path.exists(path):
        return None
    with _LockedCounter(path, "fold counter") as counter:
        return counter.read(lambda: None, sys.maxsize)  # type: ignore[arg-type,return-value]


class _LockedCounter:
    """An integer in a small file, held under an exclusive `flock` on a lock file beside it while in the `with`
    block; the counter is rewritten whole (`tlsearch._files`), and neither file is opened through a link."""

    def __init__(self, path: str, what: str = "trial-slot counter") -> None:
        self._path, self._what = path, what

    def __enter__(self) -> _LockedCounter:
        self._fd = open_no_follow(f"{self._path}.lock", os.O_RDWR | os.O_CREAT)
        if fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        os.close(self._fd)  # closing the file releases its flock

    def read(self, initial: Callable[[], int], limit: int) -> int:
        """The count, or `initial()` where there is none yet; SlotCounterError outside 0..`limit`."""
        try:
            fd = open_no_follow(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return initial()
        try:
            text = os.read(fd, 64).decode(errors="replace").strip()
        finally:
            os.close(fd)
        if not text:
            return initial()
        if not (text.isascii() and text.isdigit() and int(text) <= limit):
            bound = "" if limit == sys.maxsize else f"..{limit} (the trial budget)"
            counted = "trials" if self._what == "trial-slot counter" else "folds"
            raise SlotCounterError(
                f"{self._what} {self._path} holds {printable(repr(text[:20]))}, not a count in 0{bound}: "
                f"not obeyed; delete the file and tlsearch counts the study's {counted} again"
            )
        return int(text)

    def write(self, value: int) -> None:
        write_file(self._path, f"{value}\n")
