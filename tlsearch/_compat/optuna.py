"""The one place tlsearch touches Optuna's private API.

Each use says why, and what replaces it if a new Optuna breaks it. The optional internals come through
`_internal`: where one has moved, what it served is turned off with one `OptunaCompatibilityWarning` and the product
keeps working. The core ones (a study's storage and ids, reopening a trial by id) have no replacement.
tests/test_optuna_compat.py checks every name used here against the installed Optuna and fails naming the one that
changed, and runs a study with every optional internal removed; `.ci/optuna-latest` runs it against Optuna's latest
release.
"""

from __future__ import annotations

import importlib
import random
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna

from tlsearch import _pickling


class OptunaCompatibilityWarning(UserWarning):
    """An Optuna internal tlsearch uses is not where it was: what it served is off, and the warning says what."""


class _Absent:
    """Stands in for a class the installed Optuna lacks: nothing is an instance of it."""


def _internal(module: str, name: str, *, without: str, fallback: Any) -> Any:
    """`module.name` from Optuna's private API, else `fallback` and one warning saying what is off `without` it:
    a moved internal turns its optimisation off and leaves the product working."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        warnings.warn(
            f"Optuna {optuna.__version__} has no {module}.{name}: {without}", OptunaCompatibilityWarning, stacklevel=2
        )
        return fallback


class _StudySnapshot:
    """The fields of Optuna's `FrozenStudy` that its tools read, where the installed Optuna has none."""

    def __init__(self, study_name, direction, user_attrs, system_attrs, study_id, *, directions=None) -> None:
        self.study_name, self.user_attrs, self.system_attrs = study_name, user_attrs, system_attrs
        self._study_id = study_id
        self._directions = list(directions) if directions is not None else [direction]

    @property
    def direction(self) -> optuna.study.StudyDirection:
        if len(self._directions) > 1:
            raise RuntimeError("a multi-objective study has directions, not one direction")
        return self._directions[0]

    @property
    def directions(self) -> list[optuna.study.StudyDirection]:
        return self._directions


# The lazily created random state of Optuna's samplers, to seed each trial's copy of the study's sampler.
LazyRandomState = _internal(
    "optuna.samplers._lazy_random_state",
    "LazyRandomState",
    without="a trial's parameters are not reproducible from its seed (its sampler copy gets fresh entropy)",
    fallback=_Absent,
)
# The prefix of generated study names.
DEFAULT_STUDY_NAME_PREFIX = _internal(
    "optuna.storages._base",
    "DEFAULT_STUDY_NAME_PREFIX",
    without="generated study names start 'no-name-'",
    fallback="no-name-",
)
# The study snapshot a storage's `get_all_studies` returns (no public path).
FrozenStudy = _internal(
    "optuna.study._frozen",
    "FrozenStudy",
    without="MongoDB's get_all_studies returns a stand-in with its fields",
    fallback=_StudySnapshot,
)
# Optuna's heartbeat base class (RDBStorage, GrpcStorageProxy, MongoStorage), which Optuna's own
# `fail_stale_trials` and `optimize` look for; tlsearch itself finds heartbeats by `get_heartbeat_interval`.
BaseHeartbeat = _internal(
    "optuna.storages._heartbeat",
    "BaseHeartbeat",
    without="Optuna's own fail_stale_trials does not see MongoDB's heartbeats (tlsearch's own sweep still does)",
    fallback=_Absent,
)
# The journal's file lock protocol, which tlsearch's queued lock declares.
BaseJournalFileLock = _internal(
    "optuna.storages.journal._file",
    "BaseJournalFileLock",
    without="tlsearch's journal lock no longer declares Optuna's lock protocol (it works the same)",
    fallback=_Absent,
)
# The journal's operation codes, to write several operations in one append (batched user attributes).
JournalOperation = _internal(
    "optuna.storages.journal._storage",
    "JournalOperation",
    without="a trial's user attributes are written to the journal one append each, not batched",
    fallback=None,
)

if TYPE_CHECKING:  # the artifact store protocol, for annotations only (no public path)
    from optuna.artifacts._protocol import ArtifactStore as ArtifactStore  # re-exported for annotations

__all__ = [
    "BaseHeartbeat",
    "BaseJournalFileLock",
    "DEFAULT_STUDY_NAME_PREFIX",
    "FrozenStudy",
    "JournalOperation",
    "LazyRandomState",
    "OptunaCompatibilityWarning",
    "append_journal_operations",
    "can_batch_journal_writes",
    "heartbeat_interval",
    "latest_trial",
    "open_trial",
    "replay_journal",
    "seeded_copy",
    "stale_trial_ids",
    "storage_of",
    "study_id",
    "study_system_attrs",
    "set_study_system_attr",
    "trial_id",
]


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The study's storage. Optuna has no public accessor (`Study._storage`); the storage object the study was
    opened with is the same one, so a caller may keep that instead if this breaks."""
    return study._storage


def study_id(study: optuna.Study) -> int:
    """The study's id in its storage (`Study._study_id`). If it breaks:
    `storage.get_study_id_from_name(study.study_name)` (one more round trip)."""
    return study._study_id


def trial_id(trial: optuna.Trial | optuna.trial.FrozenTrial) -> int:
    """A trial's id in its storage (`Trial._trial_id`, `FrozenTrial._trial_id`); the storage API is keyed by it.
    If it breaks: `storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)`."""
    return trial._trial_id


def study_system_attrs(study: optuna.Study) -> dict[str, Any]:
    """The study's system attributes: Optuna 5 removed `Study.system_attrs`; the storage call is public."""
    return storage_of(study).get_study_system_attrs(study_id(study))


def set_study_system_attr(study: optuna.Study, key: str, value: Any) -> None:
    """Set a study system attribute: Optuna 5 removed `Study.set_system_attr`; the storage call is public."""
    storage_of(study).set_study_system_attr(study_id(study), key, value)


def open_trial(study: optuna.Study, trial_id: int) -> optuna.Trial:
    """The `optuna.Trial` of a trial the driver created (`study.ask()` in another process): Optuna documents no
    way to reopen a trial by id, and `Trial(study, trial_id)` is what `ask` itself returns. If it breaks, the
    worker could call `study.ask()` on a WAITING trial the driver enqueued instead."""
    return optuna.Trial(study, trial_id)


def latest_trial(trial: optuna.Trial) -> optuna.trial.FrozenTrial:
    """`trial` as a pruner's `prune` sees it, its intermediate values included: Optuna's own
    `Trial._get_latest_trial()` (what `Trial.should_prune` passes), else, if that method goes (Optuna marks it
    for removal), the storage's copy of the trial."""
    get_latest = getattr(trial, "_get_latest_trial", None)
    if get_latest is not None:
        return get_latest()
    return storage_of(trial.study).get_trial(trial_id(trial))


def heartbeat_interval(storage: optuna.storages.BaseStorage) -> float | None:
    """Seconds between heartbeats, or None where the storage keeps none (Optuna's storages with heartbeats and
    MongoStorage have `get_heartbeat_interval`; the journal has not)."""
    get_interval = getattr(storage, "get_heartbeat_interval", None)
    return get_interval() if callable(get_interval) else None


def stale_trial_ids(storage: optuna.storages.BaseStorage, study_id: int) -> list[int]:
    """RUNNING trials whose heartbeat stopped (`BaseHeartbeat._get_stale_trial_ids`).

    Why not the public `optuna.storages.fail_stale_trials` with a callback (checked on Optuna 5.0): it sets the
    trial FAIL first and only then calls the storage's `heartbeat_stale_trial_callback` (e.g.
    `RetryFailedTrialCallback`) with the finished trial, whose attributes can no longer change
    (UpdateFinishedTrialError); tlsearch records why the trial failed (the `DriverLost` error attributes) before
    failing it, as for every other failure. The callback is also fixed when the storage is built, not per call,
    and the function is experimental. If this breaks: `fail_stale_trials` with a callback that releases the
    trial slot and queues the retry (the failed attempt then carries no error attributes)."""
    return storage._get_stale_trial_ids(study_id)


_JOURNAL_INTERNALS = ("_thread_lock", "_replay_result", "_backend", "_sync_with_backend")


def can_batch_journal_writes(storage: optuna.storages.JournalStorage) -> bool:
    """Whether `append_journal_operations` works with the installed Optuna; if not, one warning says so and the
    caller writes through the public setters."""
    missing = [name for name in _JOURNAL_INTERNALS if not hasattr(storage, name)]
    if JournalOperation is not None and not missing:
        return True
    if missing:
        warnings.warn(
            f"Optuna {optuna.__version__}'s JournalStorage has no {', '.join(missing)}: a trial's user attributes "
            "are written to the journal one append each, not batched",
            OptunaCompatibilityWarning,
            stacklevel=2,
        )
    return False


def append_journal_operations(storage: optuna.storages.JournalStorage, operations: list[dict[str, Any]]) -> None:
    """Append several journal operations in one locked, synced write, then replay them, as each public setter
    does for one (`_thread_lock`, `_replay_result.worker_id`, `_backend`, `_sync_with_backend`); only where
    `can_batch_journal_writes(storage)`."""
    with storage._thread_lock:
        worker_id = storage._replay_result.worker_id
        storage._backend.append_logs([{**operation, "worker_id": worker_id} for operation in operations])
        storage._sync_with_backend()


def replay_journal(storage: optuna.storages.JournalStorage) -> None:
    """Replay the journal operations not yet applied (`JournalStorage._sync_with_backend`)."""
    storage._sync_with_backend()


def seeded_copy(sampler: optuna.samplers.BaseSampler, seed: int | None) -> optuna.samplers.BaseSampler:
    """A copy of `sampler` whose random states are seeded with `seed` (fresh entropy when None): every worker
    receives the same sampler object, and unseeded copies on concurrent workers would draw identical parameters.
    Optuna has no public way to seed an existing sampler (`reseed_rng()` takes no seed); the random states are
    found among its attributes (`LazyRandomState`, NumPy's, Python's), its inner samplers seeded with `seed + 1`.
    A sampler with none of those gets `reseed_rng()`: its draws differ per trial but are not reproducible."""
    sampler = _pickling.copy(sampler)  # not copy.deepcopy: some samplers hold a lock
    if seed is None or not _reseed(sampler, seed, seen=set()):
        sampler.reseed_rng()
    return sampler


def _reseed(obj, seed: int, seen: set[int]) -> bool:
    """Seed every random state found in `obj`'s attributes; whether there was one."""
    if id(obj) in seen or not hasattr(obj, "__dict__"):
        return False
    seen.add(id(obj))
    found = False
    for name, value in vars(obj).items():
        if isinstance(value, LazyRandomState):
            value.rng.seed(seed)
        elif isinstance(value, (np.random.RandomState, random.Random)):
            value.seed(seed)
        elif isinstance(value, np.random.Generator):
            setattr(obj, name, np.random.default_rng(seed))
        elif isinstance(value, optuna.samplers.BaseSampler):
            found |= _reseed(value, seed + 1, seen)
            continue
        else:
            continue
        found = True
    return found
