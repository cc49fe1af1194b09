"""Failing a trial whose worker or driver was lost, and queueing its retry with the same parameters; the folds a
trial trained, which it keeps of the k folds it claimed from the study's fold counter when it ends."""

from __future__ import annotations

import contextlib
import logging

import optuna
from optuna.trial import TrialState

from tlsearch._compat import optuna as compat
from tlsearch.storage._slots import ClaimedFolds, TrialSlots

log = logging.getLogger(__name__)

# System attributes a retry carries (beside Optuna's `failed_trial` and `retry_history`): how many attempts of
# these parameters killed their worker (a second one fails them for good), and how many retries were free:
# the attempt was lost to a fault not its own (a worker that died under another trial), so it does not
# count against `StudySpec.retries`, up to MAX_FREE_RETRIES.
WORKER_DEATHS = "worker_deaths"
FREE_RETRIES = "free_retries"
MAX_WORKER_DEATHS = 2
MAX_FREE_RETRIES = 5


def folds_trained(trial: optuna.trial.FrozenTrial) -> int:
    """The folds `trial` trained: its `n_folds_run`, or, where it has none (it failed), the folds whose results
    it stored. A fold stopped inside by an epoch schedule is not counted."""
    if "n_folds_run" in trial.user_attrs:
        return int(trial.user_attrs["n_folds_run"])
    return sum(key.startswith("split") and key.endswith("_fit_time") for key in trial.user_attrs)


def folds_used(study: optuna.Study, n_folds: int) -> int:
    """The folds claimed when a study's fold counter starts: those its finished trials trained, and all
    `n_folds` of each running trial."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return sum(map(folds_trained, finished)) + n_folds * len(running)


def release_untrained_folds(study: optuna.Study, trial: optuna.trial.FrozenTrial, n_folds: int) -> None:
    """Give back the folds of the `n_folds` a trial claimed that it did not train (it was pruned or failed); only
    the driver that finished the trial calls this, once."""
    ClaimedFolds(compat.storage_of(study), compat.study_id(study)).release(n_folds - folds_trained(trial))


def fail_abandoned_trials(study: optuna.Study, spec, n_folds: int, all_running: bool = False) -> int:
    """Fail trials left RUNNING by a driver that died (stale heartbeats; every RUNNING trial when
    `all_running`), and queue their retries; how many there were. `n_folds`: the folds each trial claimed."""
    storage = compat.storage_of(study)
    if all_running:
        abandoned = [compat.trial_id(t) for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    elif compat.heartbeat_interval(storage):
        abandoned = compat.stale_trial_ids(storage, compat.study_id(study))
    else:
        return 0
    for trial_id in abandoned:
        number = storage.get_trial_number_from_id(trial_id)
        error = {"error_type": "DriverLost", "error_message": "the driver running this trial stopped"}
        retried = fail_and_retry(study, trial_id, error, spec.retries, n_folds=n_folds)
        if retried is not None:
            log.warning(
                "trial %d FAIL: DriverLost (its driver stopped); %s",
                number,
                "retry queued" if retried else "no retry left",
            )
    return len(abandoned)


def fail_and_retry(
    study: optuna.Study,
    trial_id: int,
    error: dict,
    retries: int,
    *,
    n_folds: int,
    killed_worker: bool = False,
    free: bool = False,
) -> bool | None:
    """Record why the trial failed, fail it (unless someone finished it first), give back its trial slot and
    the folds of its `n_folds` it did not train, and queue its retry (`queue_retry`); None when someone else
    finished it first, else whether a retry was queued."""
    storage = compat.storage_of(study)
    with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
        storage.set_trial_user_attrs(trial_id, error)
    try:
        if not storage.set_trial_state_values(trial_id, TrialState.FAIL):
            return None
    except optuna.exceptions.UpdateFinishedTrialError:
        return None  # someone else finished or failed it first
    TrialSlots(storage, compat.study_id(study)).release()
    failed = storage.get_trial(trial_id)
    release_untrained_folds(study, failed, n_folds)
    return queue_retry(study, failed, retries, killed_worker=killed_worker, free=free)


def worker_deaths(trial: optuna.trial.FrozenTrial) -> int:
    """How many earlier attempts of this trial's parameters killed their worker."""
    return int(trial.system_attrs.get(WORKER_DEATHS, 0))


def queue_retry(
    study: optuna.Study,
    failed: optuna.trial.FrozenTrial,
    retries: int,
    *,
    killed_worker: bool = False,
    free: bool = False,
) -> bool:
    """Enqueue `failed`'s parameters again, up to `retries` times per original trial (retries that are
    `free` aside), unless their attempts have now killed MAX_WORKER_DEATHS workers; whether it did. The
    bookkeeping is Optuna's RetryHeartbeatStaleTrialCallback's (system attrs `failed_trial`, `retry_history`),
    but the failed attempt's user attributes (its error, partial fold scores) stay with it."""
    history = [*failed.system_attrs.get("retry_history", []), failed.number]
    deaths = worker_deaths(failed) + killed_worker
    frees = int(failed.system_attrs.get(FREE_RETRIES, 0)) + free
    if deaths >= MAX_WORKER_DEATHS or len(history) - min(frees, MAX_FREE_RETRIES) > retries:
        return False
    system_attrs = {
        **failed.system_attrs,
        "failed_trial": failed.system_attrs.get("failed_trial", failed.number),
        "retry_history": history,
        **({WORKER_DEATHS: deaths} if deaths else {}),
        **({FREE_RETRIES: frees} if frees else {}),
    }
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.WAITING,
            params=failed.params,
            distributions=failed.distributions,
            system_attrs=system_attrs,
        )
    )
    return True
