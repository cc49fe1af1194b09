"""The journal study store's lock: writers queue in the kernel, and plain Optuna writers are still excluded."""

from __future__ import annotations

import subprocess
import sys
import threading

import optuna
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import TrialState

from tlsearch.storage._journal import QueuedJournalLock, open_journal


def _contend(lock, acquired: threading.Event) -> threading.Thread:
    def take_and_release() -> None:
        lock.acquire()
        acquired.set()
        lock.release()

    thread = threading.Thread(target=take_and_release, daemon=True)
    thread.start()
    return thread


def test_the_lock_excludes_queued_and_plain_optuna_writers(tmp_path):
    path = str(tmp_path / "studies.journal")
    holder = QueuedJournalLock(path)
    for contender in (QueuedJournalLock(path), JournalFileSymlinkLock(path)):
        holder.acquire()
        acquired = threading.Event()
        thread = _contend(contender, acquired)
        assert not acquired.wait(0.3), f"{type(contender).__name__} got the lock while it was held"
        holder.release()
        assert acquired.wait(10), f"{type(contender).__name__} never got the lock once it was free"
        thread.join(10)


WRITER = """
import sys, optuna
from optuna.storages.journal import JournalFileBackend
from tlsearch.storage._journal import open_journal
path, kind, n_trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
storage = open_journal(path) if kind == "queued" else optuna.storages.JournalStorage(JournalFileBackend(path))
study = optuna.load_study(study_name="shared", storage=storage)
for _ in range(n_trials):
    trial = study.ask()
    trial.report(1.0, 0)
    trial.set_user_attr("writer", kind)
    study.tell(trial, 1.0)
"""


def test_queued_and_plain_writers_share_one_journal_without_losing_a_write(tmp_path):
    path = str(tmp_path / "studies.journal")
    optuna.create_study(study_name="shared", storage=open_journal(path))
    kinds = ["queued", "queued", "queued", "plain"]
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, path, kind, "25"]) for kind in kinds]
    assert [writer.wait(120) for writer in writers] == [0] * len(kinds)
    trials = optuna.load_study(study_name="shared", storage=open_journal(path)).get_trials(deepcopy=False)
    assert sorted(trial.number for trial in trials) == list(range(100))
    assert all(trial.state == TrialState.COMPLETE and trial.intermediate_values == {0: 1.0} for trial in trials)
    assert sorted(trial.user_attrs["writer"] for trial in trials) == ["plain"] * 25 + ["queued"] * 75
