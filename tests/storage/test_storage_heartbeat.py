"""Heartbeats: a killed worker's trial is failed once and retried; a live one never is; the server's clock rules."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pymongo
import pytest
from optuna.storages import RetryHeartbeatStaleTrialCallback, fail_stale_trials
from optuna.trial import TrialState

from tlsearch.storage import MongoStorage, _mongo

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

WORKERS = Path(__file__).with_name("_workers.py")
INTERVAL, GRACE = 0.2, 1.5  # a heartbeat thread starved for 1.5 s on a loaded machine is not a dead worker


def heartbeat_storage(uri: str, database: str, **kwargs) -> MongoStorage:
    return MongoStorage(uri, database, heartbeat_interval=INTERVAL, grace_period=GRACE, **kwargs)


@pytest.mark.slow
def test_a_killed_workers_trial_fails_after_the_grace_period_and_is_retried(mongo_uri, mongo_db_name, tmp_path):
    retry = RetryHeartbeatStaleTrialCallback()
    storage = heartbeat_storage(mongo_uri, mongo_db_name, heartbeat_stale_trial_callback=retry)
    study = optuna.create_study(study_name="killed", storage=storage)
    started = tmp_path / "started"
    worker = subprocess.Popen(
        [sys.executable, str(WORKERS), "hang", mongo_uri, mongo_db_name, "killed", str(started)],
        env={**os.environ, "TEST_HEARTBEAT_INTERVAL": str(INTERVAL)},
    )
    try:
        _wait_until(started.exists, timeout=60)
        fail_stale_trials(study)
        assert study.get_trials()[0].state == TrialState.RUNNING  # heartbeats are still fresh
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()

    _wait_until(lambda: storage._get_stale_trial_ids(study._study_id), timeout=10 * GRACE)
    # Two sweepers at once: the trial is failed, and retried, exactly once.
    sweepers = []
    for _ in range(2):
        sweeper_storage = heartbeat_storage(
            mongo_uri, mongo_db_name, heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback()
        )
        sweeper_study = optuna.load_study(study_name="killed", storage=sweeper_storage)
        sweepers.append(threading.Thread(target=fail_stale_trials, args=(sweeper_study,)))
    for sweeper in sweepers:
        sweeper.start()
    for sweeper in sweepers:
        sweeper.join()

    killed, retry = study.get_trials()
    assert killed.state == TrialState.FAIL and killed.datetime_complete is not None
    assert set(killed.params) == {"x"} and killed.intermediate_values == {0: 0.5}
    assert retry.state == TrialState.WAITING
    assert retry.params == killed.params
    assert RetryHeartbeatStaleTrialCallback.retried_trial_number(retry) == killed.number
    fail_stale_trials(study)
    assert len(study.get_trials()) == 2  # failed once, retried once


def test_a_live_trial_with_heartbeats_is_never_failed(mongo_uri, mongo_db_name):
    study = optuna.create_study(study_name="live", storage=heartbeat_storage(mongo_uri, mongo_db_name))
    running = threading.Event()

    def slow(trial: optuna.Trial) -> float:
        running.set()
        time.sleep(2 * GRACE)
        return 1.0

    worker = threading.Thread(target=study.optimize, args=(slow,), kwargs={"n_trials": 1})
    worker.start()
    sweeper = optuna.load_study(study_name="live", storage=heartbeat_storage(mongo_uri, mongo_db_name))
    running.wait(timeout=30)
    while worker.is_alive():
        fail_stale_trials(sweeper)
        time.sleep(INTERVAL / 2)
    worker.join()
    assert [trial.state for trial in sweeper.get_trials()] == [TrialState.COMPLETE]


def test_heartbeats_use_the_servers_clock(mongo_uri, mongo_db_name, monkeypatch):
    storage = heartbeat_storage(mongo_uri, mongo_db_name)
    study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE])
    trial_id = storage.create_new_trial(study_id)

    class SkewedClock(dt.datetime):
        @classmethod
        def now(cls, tz=None):  # this machine's clock runs an hour late
            return dt.datetime.now(tz) - dt.timedelta(hours=1)

    monkeypatch.setattr(_mongo, "datetime", SkewedClock)
    storage.record_heartbeat(trial_id)
    assert storage._get_stale_trial_ids(study_id) == []
    _wait_until(lambda: storage._get_stale_trial_ids(study_id) == [trial_id], timeout=10 * GRACE)


def test_heartbeat_settings_are_checked(mongo_uri, mongo_db_name):
    with pytest.raises(ValueError, match="heartbeat_interval"):
        MongoStorage(mongo_uri, mongo_db_name, heartbeat_interval=0)
    with pytest.raises(ValueError, match="grace_period"):
        MongoStorage(mongo_uri, mongo_db_name, heartbeat_interval=1, grace_period=-1)


def _wait_until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting after {timeout} s"
        time.sleep(0.05)


def test_a_running_trial_that_never_beat_is_stale_after_the_grace_period_from_its_start(mongo_uri, mongo_db_name):
    storage = heartbeat_storage(mongo_uri, mongo_db_name)
    study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE])
    trial_id = storage.create_new_trial(study_id)  # a driver that died before the trial's first heartbeat
    _wait_until(lambda: storage._get_stale_trial_ids(study_id) == [trial_id], timeout=10 * GRACE)


def test_a_heartbeat_dated_in_the_future_is_clamped_to_the_servers_clock(mongo_uri, mongo_db_name):
    storage = heartbeat_storage(mongo_uri, mongo_db_name)
    study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE])
    trial_id = storage.create_new_trial(study_id)
    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=365)
    pymongo.MongoClient(mongo_uri)[mongo_db_name].trials.update_one({"_id": trial_id}, {"$set": {"heartbeat": future}})
    assert storage._get_stale_trial_ids(study_id) == []
    _wait_until(lambda: storage._get_stale_trial_ids(study_id) == [trial_id], timeout=10 * GRACE)
