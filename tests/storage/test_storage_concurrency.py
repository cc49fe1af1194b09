"""MongoStorage under concurrent processes: dense trial numbers, enqueued trials run once, resumable studies."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pymongo
import pytest
from optuna.trial import TrialState

from tlsearch.storage import MongoStorage

WORKERS = Path(__file__).with_name("_workers.py")
REPORTS = 5


def start(mode: str, uri: str, database: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKERS), mode, uri, database, *map(str, args)])


def wait_all(processes: list[subprocess.Popen], timeout: float = 240) -> None:
    for process in processes:
        assert process.wait(timeout=timeout) == 0


@pytest.mark.slow
def test_eight_processes_with_tpe_make_dense_complete_trials(mongo_uri, mongo_db_name):
    storage = MongoStorage(mongo_uri, mongo_db_name)
    optuna.create_study(study_name="tpe", storage=storage)
    wait_all([start("tpe", mongo_uri, mongo_db_name, "tpe", 50, seed) for seed in range(8)])

    trials = MongoStorage(mongo_uri, mongo_db_name).get_all_trials(storage.get_study_id_from_name("tpe"))
    assert [trial.number for trial in trials] == list(range(400))
    assert all(trial.state == TrialState.COMPLETE for trial in trials)
    assert all(sorted(trial.intermediate_values) == list(range(REPORTS)) for trial in trials)
    assert all(set(trial.params) == {"x", "n"} for trial in trials)


@pytest.mark.slow
def test_four_processes_run_each_enqueued_trial_once(mongo_uri, mongo_db_name, tmp_path):
    storage = MongoStorage(mongo_uri, mongo_db_name)
    study = optuna.create_study(study_name="queue", storage=storage)
    for i in range(100):
        study.enqueue_trial({"i": i})
    logs = [tmp_path / f"worker{k}.log" for k in range(4)]
    wait_all([start("drain", mongo_uri, mongo_db_name, "queue", log) for log in logs])

    runs = sorted(int(line) for log in logs if log.exists() for line in log.read_text().split())
    assert runs == list(range(100))  # each enqueued trial ran, and only once
    trials = MongoStorage(mongo_uri, mongo_db_name).get_all_trials(study._study_id)
    enqueued = [trial for trial in trials if "fixed_params" in trial.system_attrs]
    assert sorted(trial.params["i"] for trial in enqueued) == list(range(100))
    assert all(trial.state == TrialState.COMPLETE for trial in enqueued)
    assert [trial.number for trial in trials] == list(range(len(trials)))


@pytest.mark.slow
def test_a_study_is_resumed_by_another_process(mongo_uri, mongo_db_name):
    optuna.create_study(study_name="resumed", storage=MongoStorage(mongo_uri, mongo_db_name))
    wait_all([start("tpe", mongo_uri, mongo_db_name, "resumed", 12, 0)])
    wait_all([start("tpe", mongo_uri, mongo_db_name, "resumed", 8, 1)])

    study = optuna.load_study(study_name="resumed", storage=MongoStorage(mongo_uri, mongo_db_name))
    trials = study.get_trials()
    assert [trial.number for trial in trials] == list(range(20))
    assert all(trial.state == TrialState.COMPLETE for trial in trials)
    starts = [trial.datetime_start for trial in trials]
    assert starts == sorted(starts)  # the second process's trials follow the first's


@pytest.mark.slow
def test_numbers_stay_dense_when_creating_processes_are_killed(mongo_uri, mongo_db_name):
    storage = MongoStorage(mongo_uri, mongo_db_name)
    study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "crash")
    survivors = [start("create", mongo_uri, mongo_db_name, "crash", 60) for _ in range(2)]
    for _ in range(3):  # creators killed at arbitrary points, mid-creation included
        victim = start("create", mongo_uri, mongo_db_name, "crash", 10**6)
        _wait_for_trials(storage, study_id, 5)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    wait_all(survivors)
    storage.create_new_trial(study_id)  # a newcomer continues the sequence

    documents = list(pymongo.MongoClient(mongo_uri)[mongo_db_name]["trials"].find({"study_id": study_id}))
    numbers = sorted(document["number"] for document in documents)
    assert numbers == list(range(len(documents)))
    trials = MongoStorage(mongo_uri, mongo_db_name).get_all_trials(study_id)
    assert [trial.number for trial in trials] == numbers


def _wait_for_trials(storage: MongoStorage, study_id: int, more: int, timeout: float = 60) -> None:
    target = len(storage.get_all_trials(study_id, deepcopy=False)) + more
    deadline = time.monotonic() + timeout
    while len(storage.get_all_trials(study_id, deepcopy=False)) < target:
        assert time.monotonic() < deadline, "the creating process made no progress"
        time.sleep(0.02)
