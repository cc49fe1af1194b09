"""The driver's heartbeat on its own: one beat per call, none where the storage keeps none, a failed beat logged."""

from __future__ import annotations

import logging

import pytest

from tlsearch._compat import optuna as compat
from tlsearch.execution._heartbeat import Heartbeat


class Storage:
    def __init__(self, interval, fails=False) -> None:
        self.interval, self.fails, self.beats = interval, fails, []

    def record_heartbeat(self, trial_id: int) -> None:
        if self.fails:
            raise ConnectionError("server restarting")
        self.beats.append(trial_id)


@pytest.fixture(autouse=True)
def _interval_of_the_fake_storage(monkeypatch):
    monkeypatch.setattr(compat, "heartbeat_interval", lambda storage: storage.interval)


def test_a_beat_records_a_heartbeat_for_the_trial():
    storage = Storage(interval=5)
    Heartbeat(storage, lambda: []).beat(7)
    assert storage.beats == [7]


def test_a_storage_without_heartbeats_gets_none():
    storage = Storage(interval=None)
    Heartbeat(storage, lambda: [1, 2]).beat(7)
    assert storage.beats == []


def test_a_failed_beat_is_logged_not_raised(caplog):
    with caplog.at_level(logging.WARNING, logger="tlsearch.execution._heartbeat"):
        Heartbeat(Storage(interval=5, fails=True), lambda: []).beat(7)
    assert "heartbeat for trial 7 failed: server restarting" in caplog.text
