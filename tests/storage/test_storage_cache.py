"""The client-side cache: each call reads what changed (new and unfinished trials), not the whole study.

Judged by the documents each call reads from the server, which do not depend on the server or the machine.
"""

from __future__ import annotations

import threading

import optuna
import pymongo
import pytest
from optuna.study import StudyDirection
from optuna.trial import TrialState
from pymongo import monitoring

from tlsearch.storage import MongoStorage


class DocumentsRead(monitoring.CommandListener):
    """Counts the documents the server returns to find and getMore commands, and the commands sent."""

    def __init__(self) -> None:
        self.documents = 0
        self.commands = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor", {})
        self.documents += len(cursor.get("firstBatch", cursor.get("nextBatch", [])))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> tuple[int, int]:
        """(documents, commands) since the last take."""
        counts = self.documents, self.commands
        self.documents = self.commands = 0
        return counts


@pytest.fixture
def counted(mongo_uri, mongo_db_name):
    listener = DocumentsRead()
    client = pymongo.MongoClient(mongo_uri, event_listeners=[listener])
    yield MongoStorage(client, mongo_db_name), listener
    client.close()


def add_trials(storage: MongoStorage, study_id: int, n: int, state: TrialState = TrialState.COMPLETE) -> list[int]:
    template = optuna.trial.create_trial(
        state=state,
        value=1.0 if state == TrialState.COMPLETE else None,
        params={"x": 0.5},
        distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
        intermediate_values={0: 1.0, 1: 0.5},
    )
    return [storage.create_new_trial(study_id, template) for _ in range(n)]


def test_get_all_trials_reads_only_new_and_unfinished_trials(counted, mongo_storage):
    storage, reads = counted
    writer = mongo_storage  # another process
    study_id = writer.create_new_study([StudyDirection.MINIMIZE], "cached")
    add_trials(writer, study_id, 300)
    running = add_trials(writer, study_id, 2, TrialState.RUNNING)

    assert len(storage.get_all_trials(study_id)) == 302
    assert reads.take()[0] == 302 + 1  # the study once, then every trial once

    assert len(storage.get_all_trials(study_id)) == 302
    assert reads.take() == (2, 1)  # the two unfinished trials, in one query

    writer.set_trial_state_values(running[0], TrialState.COMPLETE, [0.0])
    add_trials(writer, study_id, 3)
    trials = storage.get_all_trials(study_id, deepcopy=False)
    assert reads.take() == (2 + 3, 1)  # the two it knew unfinished, and the three new ones
    assert [trial.number for trial in trials] == list(range(305))
    assert trials[300].state == TrialState.COMPLETE

    complete = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE,))
    assert len(complete) == 304 and reads.take()[0] == 1  # only the one still running

    add_trials(writer, study_id, 500)  # more new trials than one look-ahead window holds
    assert len(storage.get_all_trials(study_id, deepcopy=False)) == 805
    documents, commands = reads.take()
    assert documents == 500 + 1 and commands <= 8


def test_finished_trials_are_served_from_the_cache(counted, mongo_storage):
    storage, reads = counted
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    [finished] = add_trials(mongo_storage, study_id, 1)
    [running] = add_trials(mongo_storage, study_id, 1, TrialState.RUNNING)
    storage.get_all_trials(study_id)
    reads.take()
    assert storage.get_trial(finished).value == 1.0
    assert reads.take() == (0, 0)
    assert storage.get_trial(running).state == TrialState.RUNNING  # unfinished: read afresh
    assert reads.take() == (1, 1)


def test_a_trial_finished_here_is_not_read_back(counted):
    storage, reads = counted
    study = optuna.create_study(storage=storage)
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
    reads.take()
    trial = study.ask()
    trial.suggest_float("x", 0, 1)
    study.tell(trial, 0.5)
    reads.take()
    assert storage.get_trial(trial._trial_id).state == TrialState.COMPLETE
    assert study.best_trial.number in range(4)
    assert reads.take()[0] <= 1  # get_best_trial refreshes: nothing is unfinished, nothing new


def test_cached_results_are_not_changed_by_later_writes(mongo_storage):
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    trial_id = mongo_storage.create_new_trial(study_id)
    before = mongo_storage.get_all_trials(study_id, deepcopy=False)
    snapshot = [trial.state for trial in before]
    mongo_storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [1.0])
    mongo_storage.create_new_trial(study_id)
    after = mongo_storage.get_all_trials(study_id, deepcopy=False)
    assert [trial.state for trial in before] == snapshot and len(before) == 1
    assert [trial.state for trial in after] == [TrialState.COMPLETE, TrialState.RUNNING]


class Commands(monitoring.CommandListener):
    """The names of the commands sent, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> list[str]:
        names, self.names = self.names, []
        return names


@pytest.fixture
def commands(mongo_uri, mongo_db_name):
    listener = Commands()
    client = pymongo.MongoClient(mongo_uri, event_listeners=[listener])
    yield MongoStorage(client, mongo_db_name), listener
    client.close()


def test_a_trial_is_told_from_the_document_its_last_write_left(commands, mongo_storage):
    storage, sent = commands
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    trial.suggest_float("x", 0, 1)
    trial.report(0.5, 0)
    sent.take()
    study.tell(trial, 0.25)  # reads the trial, then finishes it
    assert sent.take() == ["findAndModify"]  # no read: the report's reply said nobody else wrote in between
    told = storage.get_trial(trial._trial_id)
    assert sent.take() == []  # finished: from the cache
    fresh = mongo_storage.get_trial(trial._trial_id)  # what the server holds: the same trial
    assert told == fresh and fresh.intermediate_values == {0: 0.5} and fresh.value == 0.25
    assert storage.get_trial(trial._trial_id).params == trial.params


def test_another_processs_write_to_a_trial_is_read_not_guessed(commands, mongo_storage):
    storage, sent = commands
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    trial.report(0.5, 0)
    mongo_storage.set_trial_user_attr(trial._trial_id, "note", "from elsewhere")  # another process
    trial.report(0.4, 1)  # finds a version it did not write: it no longer knows the document
    assert storage.get_trial(trial._trial_id).user_attrs == {"note": "from elsewhere"}
    assert sent.take()[-1] == "find"
    storage.set_trial_state_values(trial._trial_id, TrialState.COMPLETE, [0.4])
    finished = mongo_storage.get_trial(trial._trial_id)
    assert finished.user_attrs == {"note": "from elsewhere"} and finished.intermediate_values == {0: 0.5, 1: 0.4}
    assert storage.get_trial(trial._trial_id).user_attrs == {"note": "from elsewhere"}  # cached as the server has it


def test_a_sampling_steps_back_to_back_reads_share_one_refresh(commands, mongo_storage):
    storage, sent = commands
    study_id = storage.create_new_study([StudyDirection.MINIMIZE])
    trial_id = storage.create_new_trial(study_id)
    sent.take()
    storage.get_all_trials(study_id, deepcopy=False)
    storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE,))  # TPE reads twice
    assert sent.take() == ["find"]
    storage.set_trial_param(trial_id, "x", 0.5, optuna.distributions.FloatDistribution(0, 1))
    assert storage.get_all_trials(study_id)[0].params == {"x": 0.5}  # a write ends the step: read again
    other = mongo_storage.create_new_trial(study_id)  # another process
    assert [trial._trial_id for trial in storage.get_all_trials(study_id)] == [trial_id, other]
    assert sent.take().count("find") == 2


def test_a_reader_that_samples_nothing_always_reads_afresh(commands, mongo_storage):
    storage, sent = commands
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    for expected in range(1, 4):
        mongo_storage.create_new_trial(study_id)  # another process
        assert len(storage.get_all_trials(study_id)) == expected
    storage.create_new_trial(study_id)
    storage.get_all_trials(study_id)
    mongo_storage.create_new_trial(study_id)
    storage.get_trial(mongo_storage.get_trial_id_from_study_id_trial_number(study_id, 0))  # a command in between
    assert len(storage.get_all_trials(study_id)) == 5


def test_a_sampling_step_shares_nothing_past_another_threads_command(commands):
    storage, sent = commands
    study_id = storage.create_new_study([StudyDirection.MINIMIZE])
    storage.create_new_trial(study_id)
    storage.get_all_trials(study_id)
    thread = threading.Thread(target=storage.create_new_trial, args=(study_id,))
    thread.start()
    thread.join()
    assert len(storage.get_all_trials(study_id)) == 2


def test_a_trial_another_process_wrote_to_is_read_once_to_tell_it(commands, mongo_storage):
    """The driver's path: it creates a trial, a worker reports to it, the driver tells it."""
    storage, sent = commands
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    mongo_storage.set_trial_intermediate_value(trial._trial_id, 0, 0.5)  # the worker
    mongo_storage.set_trial_user_attr(trial._trial_id, "split0_test_score", 0.5)
    sent.take()
    study.tell(trial, 0.5)  # Optuna reads the trial, then finishes it: that read is the document after
    assert sent.take() == ["find", "findAndModify"]
    told = storage.get_trial(trial._trial_id)
    assert told.user_attrs == {"split0_test_score": 0.5} and told.intermediate_values == {0: 0.5}
    assert told == mongo_storage.get_trial(trial._trial_id)


def test_ask_reads_no_running_trial_to_look_for_enqueued_ones(counted, mongo_storage):
    storage, read = counted
    study = optuna.create_study(storage=storage)
    running = [study.ask() for _ in range(20)]  # trials the workers are writing to
    for trial in running:
        mongo_storage.set_trial_user_attr(trial._trial_id, "split0_test_score", 0.5)
    read.take()
    study.ask()
    assert read.take()[0] == 0  # none of the 20 came back
    other = optuna.load_study(study_name=study.study_name, storage=mongo_storage)
    other.enqueue_trial({"x": 0.25})  # another driver queues a trial: the next ask takes it
    assert study.ask().number == other.trials[-1].number == 21
    assert [trial.state for trial in study.get_trials()].count(TrialState.RUNNING) == 22
    assert study.get_trials()[0].user_attrs == {"split0_test_score": 0.5}  # a full read still sees their writes
