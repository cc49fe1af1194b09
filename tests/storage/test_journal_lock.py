"""The journal study store's lock: writers queue in the kernel, and plain Optuna writers are still excluded."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from concurrent.futures import ProcessPoolExecutor

import optuna
import pytest
from optuna.storages.journal import JournalFileSymlinkLock
from optuna.testing.pytest_storages import StorageTestCase
from optuna.trial import TrialState

from tlsearch.storage._journal import CrashTolerantJournalFile, QueuedJournalLock, open_journal


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


@pytest.mark.slow
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


def _journal_with_a_trial(tmp_path):
    path = tmp_path / "studies.journal"
    study = optuna.create_study(study_name="crash", storage=open_journal(str(path)))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    return path


def test_a_cut_off_last_line_is_ignored_with_a_warning_and_the_next_write_repairs_it(tmp_path, caplog):
    path = _journal_with_a_trial(tmp_path)
    with open(path, "ab") as f:
        f.write(b'{"op_code":4,"worker_id":"killed-mid-wr')  # a process killed while appending
    with caplog.at_level("WARNING", logger="tlsearch.storage._journal"):
        study = optuna.load_study(study_name="crash", storage=open_journal(str(path)))
        assert len(study.trials) == 1
    assert "cut-off last line" in caplog.text
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert path.read_bytes().endswith(b"\n") and b"killed-mid-wr" not in path.read_bytes()
    reread = optuna.load_study(study_name="crash", storage=open_journal(str(path)))
    assert [t.state for t in reread.trials] == [TrialState.COMPLETE] * 2


class _WantedLock(QueuedJournalLock):
    """The journal's lock, saying when this process first asks for it."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.wanted = threading.Event()

    def acquire(self) -> bool:
        self.wanted.set()
        return super().acquire()


def test_a_line_another_process_is_still_writing_is_read_once_written_without_a_warning(tmp_path, caplog):
    path = _journal_with_a_trial(tmp_path)
    copy = tmp_path / "copy.journal"
    copy.write_bytes(path.read_bytes())
    optuna.load_study(study_name="crash", storage=open_journal(str(copy))).set_user_attr("k", "v")
    line = copy.read_bytes()[len(path.read_bytes()) :]  # the operation a writer is appending
    reader_lock, half_written = _WantedLock(str(path)), threading.Event()

    def write_slowly() -> None:  # the second half once the reader waits for the lock (before this fix: never)
        writer = QueuedJournalLock(str(path))
        writer.acquire()
        with open(path, "ab") as f:
            f.write(line[:10])
        half_written.set()
        reader_lock.wanted.wait(30)
        with open(path, "ab") as f:
            f.write(line[10:])
        writer.release()

    thread = threading.Thread(target=write_slowly)
    thread.start()
    half_written.wait(30)
    with caplog.at_level("WARNING", logger="tlsearch.storage._journal"):
        storage = optuna.storages.JournalStorage(CrashTolerantJournalFile(str(path), lock_obj=reader_lock))
        optuna.load_study(study_name="crash", storage=storage)
    thread.join(30)
    assert "cut-off" not in caplog.text
    assert optuna.load_study(study_name="crash", storage=storage).user_attrs == {"k": "v"}  # read once whole


def test_garbage_in_the_middle_of_the_journal_names_the_file_and_line(tmp_path):
    from tlsearch.errors import JournalDamagedError

    path = _journal_with_a_trial(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], b"not json at all\n", *lines[2:]]))
    with pytest.raises(JournalDamagedError, match=rf"journal file {path} is damaged at line 3"):
        optuna.load_study(study_name="crash", storage=open_journal(str(path)))


class TestEmbeddedJournalConformance(StorageTestCase):
    """Optuna's storage suite (its pickle test included) on the embedded default's journal store."""

    @pytest.fixture
    def storage(self, tmp_path):
        return open_journal(str(tmp_path / "studies.journal"))


@pytest.mark.slow
def test_processes_append_through_a_pickled_journal_store_without_losing_a_record(tmp_path):
    # Optuna's test_concurrent_append_logs_for_multi_processes, on our backend and lock: every append goes
    # through a copy of the storage pickled into another process.
    storage = open_journal(str(tmp_path / "studies.journal"))
    backend = storage._backend
    record = {"op_code": 0, "key": "value"}
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(backend.append_logs, [[record] for _ in range(200)], timeout=120))
    logs = list(CrashTolerantJournalFile(str(tmp_path / "studies.journal")).read_logs(0))
    assert len(logs) == 200 and all(entry == record for entry in logs)


@pytest.mark.slow
def test_a_study_on_the_journal_store_optimizes_in_joblib_processes(tmp_path):
    import joblib

    storage = open_journal(str(tmp_path / "studies.journal"))
    optuna.create_study(study_name="pickled", storage=storage)

    joblib.Parallel(n_jobs=2, backend="loky")(joblib.delayed(_optimize_three)(storage) for _ in range(2))
    study = optuna.load_study(study_name="pickled", storage=open_journal(str(tmp_path / "studies.journal")))
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 6


def _optimize_three(storage) -> None:
    study = optuna.load_study(study_name="pickled", storage=storage)
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
