"""Connections: pickling for Dask workers, a fast clear error, masked credentials, and surviving lost connections."""

from __future__ import annotations

import logging
import pickle
import socket
import threading
import time

import optuna
import pymongo
import pytest
from optuna.study import StudyDirection
from optuna.trial import TrialState
from pymongo.collection import Collection
from pymongo.errors import AutoReconnect

from tlsearch.errors import MongoUnavailableError, TLSearchError
from tlsearch.mongo import mask_uri
from tlsearch.storage import MongoStorage

SECRET = "s3cr3t-pw"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_storage_built_from_a_uri_pickles_and_reconnects(mongo_storage, mongo_uri, mongo_db_name):
    callback = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2)
    storage = MongoStorage(
        mongo_uri, mongo_db_name, heartbeat_interval=5, grace_period=20, heartbeat_stale_trial_callback=callback
    )
    study_id = storage.create_new_study([StudyDirection.MAXIMIZE], "pickled")
    storage.create_new_trial(study_id)

    copy = pickle.loads(pickle.dumps(storage))
    assert (copy.get_heartbeat_interval(), copy.grace_period) == (5, 20)
    assert copy.get_heartbeat_stale_trial_callback()._max_retry == 2
    assert copy._db is None  # reconnects on first use, not when unpickled
    assert copy.get_study_id_from_name("pickled") == study_id
    assert len(copy.get_all_trials(study_id)) == 1


def test_a_storage_built_from_a_client_refuses_to_pickle(mongo_client, mongo_db_name):
    storage = MongoStorage(mongo_client, mongo_db_name)
    with pytest.raises(TypeError, match="build it from a URI"):
        pickle.dumps(storage)


def test_an_unreachable_server_is_one_clear_error_within_5_seconds():
    started = time.monotonic()
    with pytest.raises(MongoUnavailableError, match="cannot reach MongoDB at mongodb://127.0.0.1") as raised:
        MongoStorage(f"mongodb://127.0.0.1:{closed_port()}/")
    assert time.monotonic() - started < 5  # the contract itself: no 30 s hang
    assert isinstance(raised.value, TLSearchError) and "\n" not in str(raised.value)


def test_credentials_are_never_shown(mongo_uri, caplog):
    uri = f"mongodb://alice:{SECRET}@127.0.0.1:{closed_port()}/?authSource=admin"
    with caplog.at_level(logging.DEBUG), pytest.raises(MongoUnavailableError) as raised:
        MongoStorage(uri)
    assert SECRET not in str(raised.value) and "alice" not in str(raised.value)
    assert "mongodb://***@127.0.0.1" in str(raised.value)
    assert all(SECRET not in record.getMessage() for record in caplog.records)

    # A server that refuses the credentials (the test server knows no authentication; MongoDB may say no).
    refused = mongo_uri.replace("mongodb://", f"mongodb://alice:{SECRET}@")
    try:
        storage = MongoStorage(refused)
    except MongoUnavailableError as error:
        assert SECRET not in str(error)
    else:
        assert SECRET not in repr(storage) and SECRET not in str(storage)

    lazy = MongoStorage.__new__(MongoStorage)
    lazy.__setstate__(
        {
            "uri": uri,
            "database": "db",
            "heartbeat_interval": None,
            "grace_period": None,
            "heartbeat_stale_trial_callback": None,
        }
    )
    assert repr(lazy) == f"MongoStorage('mongodb://***@127.0.0.1:{uri.split(':')[3]}', database='db')"


@pytest.mark.parametrize(
    "uri, masked",
    [
        ("mongodb://u:p@h:1/db?x=1", "mongodb://***@h:1/db?x=1"),
        ("mongodb+srv://user:p%40ss@cluster.example.net/", "mongodb+srv://***@cluster.example.net/"),
        (
            "mongodb://h1,h2/?tlsCertificateKeyFilePassword=abc&w=1",
            "mongodb://h1,h2/?tlsCertificateKeyFilePassword=***&w=1",
        ),
        (
            "mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:t0k",
            "mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties=***",
        ),
        ("mongodb://h/", "mongodb://h/"),
    ],
)
def test_mask_uri(uri, masked):
    assert mask_uri(uri) == masked


def test_a_lost_reply_to_a_trial_insert_makes_no_duplicate(mongo_storage, monkeypatch):
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    insert_one = Collection.insert_one
    lost = []

    def insert_then_lose_the_reply(self, document, *args, **kwargs):
        result = insert_one(self, document, *args, **kwargs)
        if not lost:
            lost.append(document["_id"])
            raise AutoReconnect("connection closed (simulated)")
        return result

    monkeypatch.setattr(Collection, "insert_one", insert_then_lose_the_reply)
    trial_id = mongo_storage.create_new_trial(study_id)
    monkeypatch.undo()
    assert lost == [trial_id]
    assert [trial._trial_id for trial in mongo_storage.get_all_trials(study_id)] == [trial_id]
    assert mongo_storage.get_trial_number_from_id(mongo_storage.create_new_trial(study_id)) == 1


def test_a_write_lost_before_the_server_saw_it_is_retried(mongo_storage, monkeypatch):
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    failures = {"update": 1, "insert": 1}

    def flaky(kind, original):
        def call(self, *args, **kwargs):
            if failures[kind]:
                failures[kind] -= 1
                raise AutoReconnect("connection refused (simulated)")
            return original(self, *args, **kwargs)

        return call

    for name in ("update_one", "find_one_and_update"):  # a trial update is one or the other
        monkeypatch.setattr(Collection, name, flaky("update", getattr(Collection, name)))
    monkeypatch.setattr(Collection, "insert_one", flaky("insert", Collection.insert_one))
    trial_id = mongo_storage.create_new_trial(study_id)
    mongo_storage.set_trial_user_attr(trial_id, "kept", True)
    assert failures == {"update": 0, "insert": 0}
    assert mongo_storage.get_trial(trial_id).user_attrs == {"kept": True}


def test_a_lost_reply_to_a_state_change_still_counts_once(mongo_storage, monkeypatch):
    study = optuna.create_study(storage=mongo_storage)
    study.enqueue_trial({"x": 0.5})
    waiting = mongo_storage.get_all_trials(study._study_id)[0]._trial_id
    find_one_and_update = Collection.find_one_and_update
    calls = []

    def change_then_lose_the_reply(self, *args, **kwargs):
        calls.append(None)
        result = find_one_and_update(self, *args, **kwargs)
        if len(calls) % 2:  # every first attempt lands, and its reply is lost
            raise AutoReconnect("connection closed (simulated)")
        return result

    monkeypatch.setattr(Collection, "find_one_and_update", change_then_lose_the_reply)
    assert mongo_storage.set_trial_state_values(waiting, TrialState.RUNNING) is True  # we took it
    assert mongo_storage.set_trial_state_values(waiting, TrialState.RUNNING) is False  # nobody takes it again
    assert mongo_storage.set_trial_state_values(waiting, TrialState.COMPLETE, [1.0]) is True
    monkeypatch.undo()
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        mongo_storage.set_trial_state_values(waiting, TrialState.FAIL)
    assert mongo_storage.get_trial(waiting).values == [1.0]


@pytest.mark.slow
def test_a_server_restart_during_writes_loses_nothing_and_duplicates_nothing(persistent_mongo_server, caplog):
    # A short server selection timeout, so that operations fail while the server is down and are retried
    # by the storage (with the default 5 s, pymongo itself may wait the restart out).
    uri = f"mongodb://{persistent_mongo_server.host}:{persistent_mongo_server.port}/?serverSelectionTimeoutMS=200"
    storage = MongoStorage(uri, "restart")
    study = optuna.create_study(study_name="restart", storage=storage)
    done = threading.Event()

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0, 1)
        for step in range(3):
            time.sleep(0.01)
            trial.report(x + step, step)
        return x

    def optimize():
        try:
            study.optimize(objective, n_trials=40)
        finally:
            done.set()

    worker = threading.Thread(target=optimize)
    worker.start()
    deadline = time.monotonic() + 60
    while len(study.get_trials(deepcopy=False)) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="tlsearch.storage"):
        persistent_mongo_server.restart()
        worker.join(timeout=120)
    assert done.is_set()
    assert any("retrying" in record.getMessage() for record in caplog.records)  # the restart hit live writes

    trials = MongoStorage(persistent_mongo_server.uri, "restart").get_all_trials(study._study_id)
    assert [trial.number for trial in trials] == list(range(40))
    assert all(trial.state == TrialState.COMPLETE for trial in trials)
    assert all(sorted(trial.intermediate_values) == [0, 1, 2] for trial in trials)
    documents = pymongo.MongoClient(persistent_mongo_server.uri)["restart"]["trials"].count_documents({})
    assert documents == 40
