"""What one Dask task does: evaluate one trial of a study on a worker.

The driver created the trial (RUNNING) and will tell its result; the task samples the trial's
parameters from the study (define-by-run), trains and scores its folds, and reports between folds.
Everything a task opens (stores, datasets, fold plans) is opened once per worker process.
"""

from __future__ import annotations

import copy
import functools
import os
import socket
import time
from dataclasses import dataclass, field

import numpy as np
import optuna
from optuna.trial import TrialState

from tlsearch import _pickling
from tlsearch._compat import optuna as compat
from tlsearch.cv import _evaluate as cv
from tlsearch.data import Folds, HostCache
from tlsearch.errors import DatasetChangedError
from tlsearch.seeds import derive_seed
from tlsearch.stores._stores import Stores


@dataclass(frozen=True)
class TrialJob:
    """Everything a worker needs to evaluate one trial; small and picklable."""

    stores: Stores
    study_name: str
    trial_id: int
    dataset_ref: str
    dataset_hash: str
    fold_plan_hash: str
    seed: int  # the trial's sampler seed
    folds: tuple[int, ...] = ()  # the folds this task trains when its trial runs split (tlsearch.execution._fold_tasks)


@dataclass(frozen=True)
class TrialOutcome:
    """How a trial ended on the worker; the driver tells it to the study."""

    state: TrialState
    values: list[float] | None = None
    error: dict = field(default_factory=dict)
    retryable: bool = False
    worker: str = ""
    seconds: float = 0.0
    folds: dict = field(default_factory=dict)  # a fold task's results by fold index (cv.FoldResult)


def sampler_seed(spec, study_name: str, trial_number: int) -> int:
    """The seed of a trial's copy of the study's sampler (`TrialJob.seed`, see `open_trial`)."""
    return derive_seed(spec.seed, study_name, trial_number, "sampler")


def pack_spec(spec) -> bytes:
    """The study definition as bytes for the workers.

    cloudpickle, explicitly: the functions of a study file live in a module the workers cannot import,
    and Dask's serializer would otherwise pickle them by reference.
    """
    spec = copy.copy(spec)
    spec.callbacks = ()  # run by the driver only; they may hold clients (MLflow, W&B) that do not pickle
    return _pickling.dumps(spec)


@functools.lru_cache(maxsize=4)
def _unpack_spec(payload: bytes):
    import cloudpickle

    return cloudpickle.loads(payload)


def run_trial(job: TrialJob, spec_payload: bytes) -> TrialOutcome:
    """Evaluate `job`'s trial with the study definition packed by `pack_spec`; never raises for a trial's
    own failure. With `job.folds`, train only those folds (`cv.evaluate_folds`): the outcome holds their results."""
    spec = _unpack_spec(spec_payload)
    started = time.perf_counter()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    try:
        result = evaluate_trial(job, spec, worker)
    except optuna.TrialPruned:
        return TrialOutcome(TrialState.PRUNED, worker=worker, seconds=time.perf_counter() - started)
    except Exception as error:  # the trial failed; the study goes on (the driver records why)
        return TrialOutcome(
            TrialState.FAIL,
            error=cv.describe_failure(error),
            retryable=cv.is_retryable(error),
            worker=worker,
            seconds=time.perf_counter() - started,
        )
    if job.folds:
        return TrialOutcome(TrialState.COMPLETE, folds=result, worker=worker, seconds=time.perf_counter() - started)
    values = [float(result)] if np.isscalar(result) else [float(v) for v in result]
    return TrialOutcome(TrialState.COMPLETE, values, worker=worker, seconds=time.perf_counter() - started)


def evaluate_trial(job: TrialJob, spec, worker: str):
    """Open `job`'s trial, dataset and folds as a worker does, and evaluate it: the trial's value(s) (`cv.evaluate`),
    or with `job.folds` those folds' results by fold index (`cv.evaluate_folds`). `optuna.TrialPruned` and the
    trial's own errors propagate. `worker` names where it runs, for the trial's attributes."""
    trial = open_trial(spec, job.stores.study_storage(), job.study_name, job.trial_id, job.seed)
    dataset = _open_dataset(job.stores, job.dataset_ref, job.dataset_hash)
    rows = _fold_rows(spec, dataset, _fold_plan(job.stores, job.fold_plan_hash))
    if job.folds:
        return cv.evaluate_folds(
            trial, spec, dataset.arrays, rows, job.folds, worker=worker, placement=_placement(worker)
        )
    return cv.evaluate(
        trial,
        spec,
        dataset.arrays,
        rows,
        dataset_hash=job.dataset_hash,
        fold_plan_hash=job.fold_plan_hash,
        artifact_store=job.stores.artifact_store() if spec.keep_predictions else None,
        placement=_placement(worker),
    )


def _placement(worker: str) -> dict[str, str]:
    """Where this trial runs, for its user attributes: the worker (host:pid) and, on a GPU worker (see
    tlsearch.execution._cluster.worker_specs), the GPU it is pinned to."""
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return {"worker": worker, "gpu": gpu} if gpu.strip() not in ("", "-1") else {"worker": worker}


def open_trial(spec, storage, study_name: str, trial_id: int, seed: int) -> optuna.Trial:
    """The trial as its task sees it, in a study object of its own.

    The study object is new for every trial: Optuna's `Study` caches the study's trials per thread for its
    sampler and empties that cache only in `ask`, which runs in the driver, so a study object kept across
    trials would show every later trial the history as it was at the first. The sampler is the study's
    (`spec.sampler_`, the one whose `before_trial` started the trial in the driver) with its random state
    seeded from `seed`: a grid's order or a QMC sequence comes from the study, each trial's draws from its seed."""
    sampler = compat.seeded_copy(spec.sampler_, seed)
    study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler, pruner=spec.pruner_)
    return compat.open_trial(study, trial_id)


@functools.cache
def _host_cache():
    return HostCache()


@functools.lru_cache(maxsize=8)
def _open_dataset(stores: Stores, ref: str, content_hash: str):
    """The dataset a study is bound to, opened once per worker process. Keyed by its content hash as well as its
    ref: a ref deleted and pushed again with other content is another dataset (a long-lived `tlsearch worker`
    serves many studies), and one whose content is not the study's is refused."""
    dataset = _host_cache().open(stores.dataset_store(), ref)
    if dataset.info.hash != content_hash:
        dataset.close()
        raise DatasetChangedError(
            f"dataset {ref} is now sha256 {dataset.info.hash[:12]}, but the study was bound to sha256 "
            f"{content_hash[:12]}: it was deleted and pushed again with other content; restart the run"
        )
    return dataset


def _fold_rows(spec, dataset, plan) -> Folds:
    """scikit-learn models get each fold's rows gathered in index order, so their scores equal
    cross_validate's (row order matters to bootstrap and SGD estimators); Keras models and custom loops,
    which shuffle anyway, train on the host cache's laid-out fold arrays without copying them."""
    return dataset.folds(plan, layout=not spec.model.gathers_fold_rows)


def _fold_plan(stores: Stores, plan_hash: str):
    return _host_cache().fold_plan(stores.dataset_store(), plan_hash)
