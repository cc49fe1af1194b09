"""The driver's heartbeat on a real MongoStorage: a trial just started gets its first beat at once, off the
dispatching thread; the trials of a beat share one write; a failed beat is logged, not raised."""

from __future__ import annotations

import logging
import threading
import time

import optuna
import pymongo
import pytest
from pymongo import monitoring

from tlsearch.execution._heartbeat import Heartbeat
from tlsearch.storage import MongoStorage


class Updates(monitoring.CommandListener):
    """The threads that sent heartbeat writes (updates that set `heartbeat`), one entry a write."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update" and "heartbeat" in str(event.command.get("updates")):
            self.threads.append(threading.current_thread().name)

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


@pytest.fixture
def storage_and_updates(mongo_uri, mongo_db_name):
    """A MongoStorage with heartbeats every 60 s, the heartbeat writes it sends, and its client."""
    updates = Updates()
    client = pymongo.MongoClient(mongo_uri, event_listeners=[updates])
    yield MongoStorage(client, database=mongo_db_name, heartbeat_interval=60), updates, client
    client.close()


def _running_trials(storage, n):
    study = optuna.create_study(storage=storage)
    return study, [study.ask()._trial_id for _ in range(n)]


def _heartbeats(client, database, trial_ids):
    """Each trial's stored heartbeat (None if it has none), read straight from its document."""
    return {trial_id: client[database].trials.find_one({"_id": trial_id}).get("heartbeat") for trial_id in trial_ids}


def _wait_for(condition, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the heartbeat thread did not beat"
        time.sleep(0.01)


def test_a_trial_just_started_gets_its_first_beat_at_once_from_the_heartbeat_thread(storage_and_updates, mongo_db_name):
    storage, updates, client = storage_and_updates
    _, trial_ids = _running_trials(storage, 5)
    heartbeat = Heartbeat(storage, lambda: trial_ids)
    heartbeat.start()
    try:
        for trial_id in trial_ids:  # the dispatching thread hands them over and goes on
            heartbeat.soon(trial_id)
        _wait_for(lambda: all(_heartbeats(client, mongo_db_name, trial_ids).values()))  # long before 60 s
    finally:
        heartbeat.stop()
    assert updates.threads and set(updates.threads) == {"tlsearch-heartbeat"}


def test_the_trials_of_a_beat_share_one_write(storage_and_updates, mongo_db_name):
    storage, updates, client = storage_and_updates
    _, trial_ids = _running_trials(storage, 5)
    Heartbeat(storage, lambda: []).beat(trial_ids)
    assert all(_heartbeats(client, mongo_db_name, trial_ids).values())
    assert len(updates.threads) == 1


def test_a_beat_skips_finished_trials(storage_and_updates, mongo_db_name):
    storage, _, client = storage_and_updates
    study, trial_ids = _running_trials(storage, 2)
    study.tell(0, 1.0)
    Heartbeat(storage, lambda: []).beat(trial_ids)
    beats = _heartbeats(client, mongo_db_name, trial_ids)
    assert beats[trial_ids[0]] is None and beats[trial_ids[1]] is not None


def test_a_storage_without_heartbeats_gets_none(mongo_uri, mongo_client, mongo_db_name):
    storage = MongoStorage(mongo_uri, database=mongo_db_name)
    _, trial_ids = _running_trials(storage, 1)
    heartbeat = Heartbeat(storage, lambda: trial_ids)
    heartbeat.start()
    heartbeat.soon(trial_ids[0])
    heartbeat.beat(trial_ids)
    heartbeat.stop()
    assert _heartbeats(mongo_client, mongo_db_name, trial_ids) == {trial_ids[0]: None}


def test_a_failed_beat_is_logged_not_raised(storage_and_updates, caplog):
    storage, _, client = storage_and_updates
    _, trial_ids = _running_trials(storage, 1)
    client.close()  # the connection is gone: the write fails
    with caplog.at_level(logging.WARNING, logger="tlsearch.execution._heartbeat"):
        Heartbeat(storage, lambda: []).beat(trial_ids)
    assert f"heartbeat for trials {trial_ids[0]} failed" in caplog.text
