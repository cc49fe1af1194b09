"""What one Dask task does: evaluate one trial of a study on a worker.

The driver created the trial (RUNNING) and will tell its result; the task samples the trial's
parameters from the study (define-by-run), trains and scores its folds, and reports between folds.
Everything a task opens (stores, datasets, fold plans) is opened once per worker process.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
import socket
import time
from dataclasses import dataclass, field

import numpy as np
import optuna
from optuna.samplers._lazy_random_state import LazyRandomState
from optuna.trial import TrialState

from tlsearch.stores import Stores


@dataclass(frozen=True)
class TrialJob:
    """Everything a worker needs to evaluate one trial; small and picklable."""

    stores: Stores
    study_name: str
    trial_id: int
    trial_number: int
    dataset_ref: str
    dataset_hash: str
    fold_plan_hash: str
    seed: int | None


@dataclass(frozen=True)
class TrialOutcome:
    """How a trial ended on the worker; the driver tells it to the study."""

    state: TrialState
    values: list[float] | None = None
    error: dict = field(default_factory=dict)
    retryable: bool = False
    worker: str = ""
    seconds: float = 0.0


def trial_seed(seed: int | None, study_name: str, trial_number: int) -> int | None:
    """A stable 32-bit seed per (study seed, study, trial): distinct across trials, the same on a re-run."""
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}:{study_name}:{trial_number}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def seeded_sampler(sampler: optuna.samplers.BaseSampler, seed: int | None) -> optuna.samplers.BaseSampler:
    """A copy of `sampler` whose random state is seeded with `seed` (or fresh entropy when None).

    Every worker receives the same sampler object; without this, seeded samplers on concurrent workers
    draw identical parameters.
    """
    sampler = copy.deepcopy(sampler)
    if seed is None:
        sampler.reseed_rng()
    else:
        _reseed(sampler, seed, seen=set())
    return sampler


def _reseed(obj, seed: int, seen: set[int]) -> None:
    if id(obj) in seen or not hasattr(obj, "__dict__"):
        return
    seen.add(id(obj))
    for name, value in vars(obj).items():
        if isinstance(value, LazyRandomState):
            value.rng.seed(seed)
        elif isinstance(value, np.random.RandomState):
            value.seed(seed)
        elif isinstance(value, np.random.Generator):
            setattr(obj, name, np.random.default_rng(seed))
        elif isinstance(value, optuna.samplers.BaseSampler):
            _reseed(value, seed + 1, seen)


def pack_spec(spec) -> bytes:
    """The study definition as bytes for the workers.

    cloudpickle, explicitly: the functions of a study file live in a module the workers cannot import,
    and Dask's serializer would otherwise pickle them by reference.
    """
    import copy

    import cloudpickle

    spec = copy.copy(spec)
    spec.callbacks = ()  # run by the driver only; they may hold clients (MLflow, W&B) that do not pickle
    return cloudpickle.dumps(spec)


@functools.lru_cache(maxsize=4)
def _unpack_spec(payload: bytes):
    import cloudpickle

    return cloudpickle.loads(payload)


def run_trial(job: TrialJob, spec_payload: bytes) -> TrialOutcome:
    """Evaluate `job`'s trial with the study definition packed by `pack_spec`; never raises for a trial's
    own failure."""
    from tlsearch import cv

    spec = _unpack_spec(spec_payload)
    started = time.perf_counter()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    try:
        study = optuna.load_study(
            study_name=job.study_name,
            storage=job.stores.study_storage(),
            sampler=seeded_sampler(spec.sampler, job.seed),
            pruner=spec.pruner,
        )
        trial = optuna.Trial(study, job.trial_id)
        dataset = _open_dataset(job.stores, job.dataset_ref)
        plan = _fold_plan(job.stores, job.fold_plan_hash)
        values = cv.evaluate(trial, spec, dataset.arrays, _fold_rows(spec, dataset, plan),
                             dataset_hash=job.dataset_hash, fold_plan_hash=job.fold_plan_hash,
                             artifact_store=job.stores.artifact_store() if spec.keep_predictions else None)
    except optuna.TrialPruned:
        return TrialOutcome(TrialState.PRUNED, worker=worker, seconds=time.perf_counter() - started)
    except Exception as error:  # the trial failed; the study goes on (the driver records why)
        return TrialOutcome(TrialState.FAIL, error=cv.describe_failure(error),
                            retryable=cv.is_infrastructure_error(error), worker=worker,
                            seconds=time.perf_counter() - started)
    values = [float(values)] if np.isscalar(values) else [float(v) for v in values]
    return TrialOutcome(TrialState.COMPLETE, values, worker=worker, seconds=time.perf_counter() - started)


@functools.cache
def _host_cache():
    from tlsearch.data import HostCache

    return HostCache()


@functools.lru_cache(maxsize=8)
def _open_dataset(stores: Stores, ref: str):
    return _host_cache().open(stores.dataset_store(), ref)


def _fold_rows(spec, dataset, plan) -> list:
    """scikit-learn models get each fold's rows gathered in index order, so their scores equal
    cross_validate's (row order matters to bootstrap and SGD estimators); Keras models and custom loops,
    which shuffle anyway, train on the host cache's laid-out fold arrays without copying them."""
    from tlsearch.study import SklearnModel

    if isinstance(spec.model, SklearnModel):
        return plan.folds
    return dataset.folds(plan)


def _fold_plan(stores: Stores, plan_hash: str):
    return _host_cache().fold_plan(stores.dataset_store(), plan_hash)
