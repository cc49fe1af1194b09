"""What tlsearch's study stores add to Optuna's storage interface, as protocols both stores implement
(`MongoStorage`, `JournalStorage`) unless one says otherwise; code that needs an extension checks for it with
`isinstance`."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class BatchedUserAttrs(Protocol):
    """Several user attributes of one trial in one write (a k-fold trial stores a few per fold); raises as
    `set_trial_user_attr` does for a finished (`UpdateFinishedTrialError`) or missing (`KeyError`) trial."""

    def set_trial_user_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> None: ...


@runtime_checkable
class BatchedWrites(Protocol):
    """Several writes to one unfinished trial sent as one: inside `with storage.one_write(trial_id):`, this
    thread's writes to that trial (parameters, intermediate values, user attributes) are held and sent together
    when the block ends, even when it ends by an exception; reads of the trial inside the block do not see them.
    What a held write would raise (a finished or missing trial, a parameter's distribution that another trial
    set differently) may be raised when the block ends instead. A block inside another for the same trial is
    part of the outer one; writes to other trials go straight through."""

    def one_write(self, trial_id: int) -> AbstractContextManager[None]: ...


class HeldWrites:
    """Each thread's open `one_write` block (`BatchedWrites`), for a store to implement it with: the trial the
    block is for and the writes it holds (`writes`, in whatever container the store passed). Pickled empty."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __reduce__(self) -> tuple[type, tuple]:
        return HeldWrites, ()

    def holds(self, trial_id: int) -> bool:
        """Whether this thread is inside a block for `trial_id`."""
        return getattr(self._local, "trial_id", None) == trial_id

    @property
    def writes(self) -> Any:
        """What this thread's block holds."""
        return self._local.writes

    @contextmanager
    def block(self, trial_id: int, writes: Any, send: Callable[[Any], None]) -> Iterator[None]:
        """A block for `trial_id` holding `writes`, handed to `send` when it ends (even by an exception) if it
        holds any; inside a block for the same trial, part of it instead (nothing held, nothing sent)."""
        if self.holds(trial_id):
            yield
            return
        local = self._local
        outer = getattr(local, "trial_id", None), getattr(local, "writes", None)
        local.trial_id, local.writes = trial_id, writes
        try:
            yield
        finally:
            local.trial_id, local.writes = outer
            if writes:
                send(writes)


@runtime_checkable
class TrialSlotCounter(Protocol):
    """The count of a study's trial slots taken, kept in the store and changed atomically, so any number of
    drivers finish exactly `n_trials` trials together (see `tlsearch.storage._slots`)."""

    def claim_trial_slot(self, study_id: int, limit: int, claimed: Callable[[], int]) -> int | None:
        """Take a slot if fewer than `limit` are taken (`claimed()` gives the count where none is kept yet): the
        slots taken after the claim, or None; `SlotCounterError` when the counter holds anything but a count in
        0..limit."""
        ...

    def release_trial_slot(self, study_id: int) -> None:
        """Give back a slot (its trial failed)."""
        ...


@runtime_checkable
class FoldCounter(Protocol):
    """The count of a study's folds claimed (trained, or claimed by a running trial), kept in the store and
    changed atomically, so any number of drivers keep to one fold budget together (see `tlsearch.storage._slots`)."""

    def claim_folds(self, study_id: int, n: int, limit: int, used: Callable[[], int]) -> int | None:
        """Claim `n` folds if no more than `limit` are then claimed (`used()` gives the count where none is kept
        yet): the count after the claim, or None; `SlotCounterError` when the counter holds anything but a
        count."""
        ...

    def release_folds(self, study_id: int, n: int) -> None:
        """Give back `n` claimed folds (never below zero)."""
        ...

    def folds_claimed(self, study_id: int) -> int | None:
        """The folds claimed now; None where none is kept yet."""
        ...


@dataclasses.dataclass(frozen=True)
class TrialsSummary:
    """A study's trials summed up: counts by state name, the first start and the last start or finish, and,
    for one objective, the best value, the lowest-numbered trial reaching it and how many do (as
    `Study.best_trial`, without constraints: tlsearch sets none)."""

    counts: Mapping[str, int]
    first_start: datetime | None
    last_activity: datetime | None
    best_value: float | None = None
    best_number: int | None = None
    best_ties: int = 0


@runtime_checkable
class SummarizedTrials(Protocol):
    """`TrialsSummary` computed by the store, with no trial loaded (`MongoStorage` only: a journal must be
    replayed whole to know anything about its trials)."""

    def summarize_trials(self, study_id: int) -> TrialsSummary: ...
