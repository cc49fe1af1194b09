"""Failing a trial whose worker or driver was lost, and queueing its retry with the same parameters."""

from __future__ import annotations

import contextlib
import logging

import optuna
from optuna.trial import TrialState

from tlsearch import _optuna_compat as compat
from tlsearch.storage._slots import TrialSlots

log = logging.getLogger(__name__)


def fail_abandoned_trials(study: optuna.Study, spec, all_running: bool = False) -> int:
    """Fail trials left RUNNING by a driver that died (stale heartbeats; every RUNNING trial when
    `all_running`), and queue their retries; how many there were."""
    storage = compat.storage_of(study)
    if all_running:
        abandoned = [compat.trial_id(t) for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    elif compat.heartbeat_interval(storage):
        abandoned = compat.stale_trial_ids(storage, compat.study_id(study))
    else:
        return 0
    for trial_id in abandoned:
        number = storage.get_trial_number_from_id(trial_id)
        if fail_and_retry(
            study,
            trial_id,
            {"error_type": "DriverLost", "error_message": "the driver running this trial stopped"},
            spec.retries,
        ):
            log.warning("trial %d FAIL: DriverLost (its driver stopped); retry queued", number)
    return len(abandoned)


def fail_and_retry(study: optuna.Study, trial_id: int, error: dict, retries: int) -> bool:
    """Record why the trial failed, fail it (unless someone finished it first), give back its trial slot
    and queue its retry; whether this call failed it."""
    storage = compat.storage_of(study)
    with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
        storage.set_trial_user_attrs(trial_id, error)
    try:
        if not storage.set_trial_state_values(trial_id, TrialState.FAIL):
            return False
    except optuna.exceptions.UpdateFinishedTrialError:
        return False  # someone else finished or failed it first
    TrialSlots(storage, compat.study_id(study)).release()
    queue_retry(study, storage.get_trial(trial_id), retries)
    return True


def queue_retry(study: optuna.Study, failed: optuna.trial.FrozenTrial, retries: int) -> None:
    """Enqueue `failed`'s parameters again, up to `retries` times per original trial. The bookkeeping is
    Optuna's RetryHeartbeatStaleTrialCallback's (system attrs `failed_trial`, `retry_history`), but the
    failed attempt's user attributes (its error, partial fold scores) stay with it."""
    history = [*failed.system_attrs.get("retry_history", []), failed.number]
    if len(history) > retries:
        return
    system_attrs = {
        **failed.system_attrs,
        "failed_trial": failed.system_attrs.get("failed_trial", failed.number),
        "retry_history": history,
    }
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.WAITING,
            params=failed.params,
            distributions=failed.distributions,
            system_attrs=system_attrs,
        )
    )
