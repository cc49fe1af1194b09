"""A run as a person or a script experiences it: Ctrl-C and SIGTERM to the whole process group, exit codes,
several drivers on one study (exact budgets, a driver killed), the main-guard error, bad budget options.

Drivers run as real processes (`tlsearch run`, or a script calling `tlsearch.run`) in their own session, on
real LocalClusters and the real MongoDB test server; trials are tiny CustomLoop functions on iris.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
from optuna.trial import TrialState

from tests.test_driver import _all_succeed, _driver, _kill_group, _wait_for_complete, count, write_study
from tlsearch import cli
from tlsearch.errors import TLSearchError
from tlsearch.execution import _stop_policy as stop_policy
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.stores._stores import Stores

pytestmark = pytest.mark.timeout(400)

# A script as a user writes it: tlsearch.run under the main guard (or not, with GUARD="").
DRIVER_SCRIPT = """
import sys
from pathlib import Path
import tlsearch
from tlsearch.stores._stores import Stores
from tlsearch.spec._spec import load_study_file

def main():
    study_file, home, mongo, database = sys.argv[1:5]
    stores = Stores(mongo or None, database, Path(home), heartbeat_interval=1, grace_period=2)
    tlsearch.run(load_study_file(study_file), stores=stores, n_workers=1, progress="log")

{guard}
    main()
"""


def _script(tmp_path, study_file, mongo="", database="tlsearch", guard='if __name__ == "__main__":'):
    path = tmp_path / "drive.py"
    path.write_text(DRIVER_SCRIPT.format(guard=guard or "if True:"))
    command = [sys.executable, str(path), str(study_file), str(tmp_path / "home"), mongo, database]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=tmp_path
    )


def ctrl_c_twice(process, stores, study="engine"):
    """Press Ctrl-C twice (a second apart) once `process`, a driver, has a trial running; (process, its output)."""
    try:
        _wait_for_running(lambda: study_attrs.load(stores, study), process)
        os.killpg(process.pid, signal.SIGINT)
        time.sleep(1)
        os.killpg(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    finally:
        _kill_group(process)
    return process, output


def _wait_for_running(load, process, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        with contextlib.suppress(TLSearchError):  # the study is not created yet
            if count(load(), TrialState.RUNNING):
                return
        time.sleep(0.2)
    raise AssertionError(f"no trial running after {timeout} s")


@pytest.mark.slow
@pytest.mark.parametrize("signum, exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_to_the_process_group_lets_running_trials_complete(tmp_path, signum, exit_code):
    study_file = write_study(tmp_path, n_trials=20, sleep=0.5)
    process = _driver(tmp_path, study_file)
    stores = Stores(home=tmp_path / "home")
    try:
        _wait_for_complete(lambda: study_attrs.load(stores, "engine"), 1, process)
        _wait_for_running(lambda: study_attrs.load(stores, "engine"), process)
        running = [t.number for t in study_attrs.load(stores, "engine").trials if t.state == TrialState.RUNNING]
        os.killpg(process.pid, signum)  # as a terminal (or `timeout`) does: the driver and its workers
        output, _ = process.communicate(timeout=120)
    finally:
        _kill_group(process)
    assert process.returncode == exit_code, output
    assert "Traceback" not in output, output
    assert "run ended: " in output.splitlines()[-1], output
    study = study_attrs.load(stores, "engine")
    assert count(study, TrialState.RUNNING) == 0
    assert count(study, TrialState.FAIL) == 0, output  # the workers did not die of the signal
    assert all(study.trials[number].state == TrialState.COMPLETE for number in running)


@pytest.mark.slow
def test_second_ctrl_c_fails_running_trials_as_interrupted_and_queues_retries(tmp_path):
    stores = Stores(home=tmp_path / "home")
    process, output = ctrl_c_twice(_driver(tmp_path, write_study(tmp_path, n_trials=20, sleep=3)), stores)
    assert process.returncode == 130, output
    assert "Traceback" not in output, output
    study = study_attrs.load(stores, "engine")
    interrupted = [t for t in study.trials if t.user_attrs.get("error_type") == "Interrupted"]
    assert interrupted, output
    assert all(t.state == TrialState.FAIL for t in interrupted)
    assert sum(line.startswith("trial ") and "Interrupted" in line for line in output.splitlines()) == len(interrupted)
    waiting = [t for t in study.trials if t.state == TrialState.WAITING]
    assert sorted(t.system_attrs["failed_trial"] for t in waiting) == sorted(t.number for t in interrupted)
    assert count(study, TrialState.RUNNING) == 0


@pytest.mark.slow
def test_a_study_whose_every_trial_fails_exits_non_zero(tmp_path, capsys):
    study_file = write_study(tmp_path, n_trials=3, body='raise ValueError("always")')
    code = cli.main(
        ["run", str(study_file), "--home", str(tmp_path / "home"), "--workers", "1", "--progress", "off", "--no-report"]
    )
    assert code == stop_policy.EXIT_CODES[stop_policy.CONSECUTIVE_FAILURES]
    assert "run ended: too many trials failed in a row" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("store", ["mongo", "local"])
def test_four_drivers_finish_exactly_n_trials(tmp_path, store, request):
    study_file = write_study(tmp_path, n_trials=12, sleep=0.1)
    mongo, database = ("", "tlsearch")
    if store == "mongo":
        mongo, database = request.getfixturevalue("mongo_uri"), request.getfixturevalue("mongo_db_name")
    drivers = [_script(tmp_path, study_file, mongo, database) for _ in range(4)]
    _all_succeed(drivers)
    study = study_attrs.load(Stores(mongo or None, database, tmp_path / "home"), "engine")
    assert count(study, TrialState.COMPLETE) + count(study, TrialState.PRUNED) == 12
    assert count(study, TrialState.RUNNING) == count(study, TrialState.WAITING) == 0


@pytest.mark.slow
def test_a_killed_drivers_trials_are_failed_and_retried_by_a_live_one(tmp_path, mongo_uri, mongo_db_name):
    study_file = write_study(tmp_path, n_trials=10, sleep=0.5)
    stores = Stores(mongo_uri, mongo_db_name, tmp_path / "home")
    doomed = _script(tmp_path, study_file, mongo_uri, mongo_db_name)
    survivor = None
    try:
        _wait_for_complete(lambda: study_attrs.load(stores, "engine"), 1, doomed)
        survivor = _script(tmp_path, study_file, mongo_uri, mongo_db_name)
        _wait_for_complete(lambda: study_attrs.load(stores, "engine"), 3, survivor)
        _wait_for_running(lambda: study_attrs.load(stores, "engine"), doomed)
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait()
        output, _ = survivor.communicate(timeout=300)
    finally:
        _kill_group(doomed)
        if survivor is not None:
            _kill_group(survivor)
    assert survivor.returncode == 0, output
    study = study_attrs.load(stores, "engine")
    lost = [t for t in study.trials if t.user_attrs.get("error_type") == "DriverLost"]
    assert lost, output
    retried = {t.system_attrs.get("failed_trial"): t.state for t in study.trials if "failed_trial" in t.system_attrs}
    assert all(retried.get(t.number) == TrialState.COMPLETE for t in lost), retried
    assert count(study, TrialState.COMPLETE) == 10
    assert count(study, TrialState.RUNNING) == count(study, TrialState.WAITING) == 0


@pytest.mark.slow
def test_run_without_the_main_guard_says_to_add_it(tmp_path):
    study_file = write_study(tmp_path, n_trials=2)
    process = _script(tmp_path, study_file, guard="")
    try:
        output, _ = process.communicate(timeout=120)
    finally:
        _kill_group(process)
    assert process.returncode == 1
    line = (tmp_path / "drive.py").read_text().splitlines().index("    main()") + 1
    # One line, before any worker process could import the script and say it again; no traceback.
    assert output.splitlines() == [
        f"tlsearch: error: tlsearch.run is called on line {line} of {tmp_path / 'drive.py'}, outside the main guard: "
        'put the call under `if __name__ == "__main__":`'
    ], output


@pytest.mark.parametrize(
    "option, value, field",
    [
        ("--n-trials", "0", "n_trials"),
        ("--n-trials", "-3", "n_trials"),
        ("--parallelism", "0", "parallelism"),
        ("--workers", "0", "n_workers"),  # --timeout 0 is refused by its argument type (tests/test_output_safety.py)
    ],
)
def test_bad_budget_options_are_refused_before_a_study_exists(tmp_path, capsys, option, value, field):
    study_file = write_study(tmp_path)
    code = cli.main(["run", str(study_file), "--home", str(tmp_path / "home"), option, value, "--no-report"])
    assert code == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and field in error[0] and option in error[0], error
    with pytest.raises(TLSearchError, match="no study named"):
        study_attrs.load(Stores(home=tmp_path / "home"), "engine")


def test_a_failed_start_leaves_no_empty_study(tmp_path, capsys):
    study_file = write_study(tmp_path)
    study_file.write_text(study_file.read_text().replace("sklearn:iris", "sklearn:no-such-dataset"))
    assert cli.main(["run", str(study_file), "--home", str(tmp_path / "home"), "--no-report"]) == 1
    assert "no-such-dataset" in capsys.readouterr().err
    with pytest.raises(TLSearchError, match="no study named"):
        study_attrs.load(Stores(home=tmp_path / "home"), "engine")


@pytest.mark.slow
def test_a_finished_study_has_nothing_to_do(tmp_path, capsys):
    study_file = write_study(tmp_path, n_trials=2)
    args = ["run", str(study_file), "--home", str(tmp_path / "home"), "--workers", "1", "--progress", "off"]
    assert cli.main([*args, "--no-report"]) == 0
    capsys.readouterr()
    assert cli.main(args) == 0
    captured = capsys.readouterr()
    assert "nothing to do: 2/2 trials finished" in captured.err
    assert "report:" not in captured.out and "dashboard" not in captured.err


@pytest.mark.slow
def test_tied_best_trials_print_one_and_say_how_many_tie(tmp_path, capsys):
    study_file = write_study(tmp_path, n_trials=3, body="return 1.0")
    assert (
        cli.main(
            [
                "run",
                str(study_file),
                "--home",
                str(tmp_path / "home"),
                "--workers",
                "1",
                "--progress",
                "off",
                "--no-report",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "3 trials tie for the best value" in out
    assert out.count("best trial #") == 1 and "best trial #0:" in out, out


def _store_args(store, request, tmp_path) -> tuple[list[str], Stores]:
    """`tlsearch run` options for the embedded default or the MongoDB test server, and the stores they name."""
    if store == "local":
        return ["--home", str(tmp_path / "home")], Stores(home=tmp_path / "home")
    uri, database = request.getfixturevalue("mongo_uri"), request.getfixturevalue("mongo_db_name")
    return ["--mongo", uri, "--database", database, "--home", str(tmp_path / "home")], Stores(
        uri, database, tmp_path / "home"
    )


def _run(study_file, *args) -> int:
    return cli.main(["run", str(study_file), "--progress", "log", "--no-report", *args])


def _attempts(study) -> dict[int, list]:
    """Each parameter set's attempts, in order, by the number of its first trial."""
    chains: dict[int, list] = {}
    for trial in study.trials:
        chains.setdefault(trial.system_attrs.get("failed_trial", trial.number), []).append(trial)
    return chains


# Parameters that kill their worker: trial 0's (so the study surely has some) and x > 8 (10 % of the space).
POISON = (
    "first = {first!r}\n"
    "    if fold.trial_number == 0 and not os.path.exists(first): open(first, 'w').write(repr(params['x']))\n"
    "    if params['x'] > 8 or os.path.exists(first) and open(first).read() == repr(params['x']): os._exit(3)"
)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", "mongo"])
def test_a_trial_that_kills_its_worker_is_retried_once_then_failed_and_the_others_are_unaffected(
    tmp_path, store, request, capsys
):
    args, stores = _store_args(store, request, tmp_path)
    study_file = write_study(tmp_path, n_trials=4, body=POISON.format(first=str(tmp_path / "first-x")))
    assert _run(study_file, "--workers", "2", *args) == 0, capsys.readouterr().err
    study = study_attrs.load(stores, "engine")
    assert count(study, TrialState.COMPLETE) == 4
    assert count(study, TrialState.RUNNING) == count(study, TrialState.WAITING) == 0
    first_x = float((tmp_path / "first-x").read_text())
    poisoned = {n: a for n, a in _attempts(study).items() if a[0].params["x"] > 8 or a[0].params["x"] == first_x}
    assert 0 in poisoned
    for attempts in _attempts(study).values():
        if attempts[0].number not in poisoned:  # not failed as collateral of a worker that another trial killed
            assert [t.state for t in attempts] == [TrialState.COMPLETE], [t.user_attrs for t in attempts]
            continue
        assert [t.state for t in attempts] == [TrialState.FAIL, TrialState.FAIL]  # once retried, then no more
        assert [t.user_attrs["error_type"] for t in attempts] == ["WorkerKilled"] * 2
        assert [t.user_attrs["error_message"] for t in attempts] == [
            "its worker died under it: exit code 3",
            "killed its worker twice: exit code 3",
        ]
        assert attempts[1].params == attempts[0].params


HANGS = "if {condition}: import threading; threading.Event().wait()  # never returns"


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", "mongo"])
def test_a_trial_over_its_time_limit_fails_as_trial_timeout_and_frees_its_worker(tmp_path, store, request, capsys):
    args, stores = _store_args(store, request, tmp_path)
    study_file = write_study(tmp_path, n_trials=3, body=HANGS.format(condition="fold.trial_number == 0"))
    # One worker: the study goes on only if the hung trial's worker is freed.
    assert _run(study_file, "--workers", "1", "--trial-timeout", "10", *args) == 0, capsys.readouterr().err
    study = study_attrs.load(stores, "engine")
    hung = study.trials[0]
    assert hung.state == TrialState.FAIL and hung.user_attrs["error_type"] == "TrialTimeout"
    assert hung.user_attrs["error_message"] == "ran longer than 10 s"
    assert not [t for t in study.trials if t.system_attrs.get("failed_trial") == 0], "a trial's own timeout"
    assert count(study, TrialState.COMPLETE) == 3 and count(study, TrialState.RUNNING) == 0


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", "mongo"])
def test_timeout_ends_a_run_whose_trials_never_return_and_loses_nothing(tmp_path, store, request, capsys, monkeypatch):
    monkeypatch.setattr(stop_policy, "STOP_GRACE", 2.0)
    args, stores = _store_args(store, request, tmp_path)
    study_file = write_study(tmp_path, n_trials=3, body=HANGS.format(condition="True"))
    code = _run(study_file, "--workers", "2", "--timeout", "1", *args)
    err = capsys.readouterr().err
    assert code == stop_policy.EXIT_CODES[stop_policy.NO_COMPLETE_TRIAL], err
    assert "still running 2 s after the run was told to stop (timeout reached)" in err
    _assert_interrupted_and_queued(study_attrs.load(stores, "engine"))


def _assert_interrupted_and_queued(study) -> None:
    """Every trial that was running is failed as Interrupted and its retry waits for the next resume."""
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert failed and all(t.user_attrs["error_type"] == "Interrupted" for t in failed)
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert sorted(t.system_attrs["failed_trial"] for t in waiting) == sorted(t.number for t in failed)
    assert count(study, TrialState.RUNNING) == 0


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", "mongo"])
def test_one_sigterm_ends_a_run_whose_trials_never_return_and_loses_nothing(tmp_path, store, request):
    args, stores = _store_args(store, request, tmp_path)
    study_file = write_study(tmp_path, n_trials=3, body=HANGS.format(condition="True"))
    process = _driver(tmp_path, study_file, *args)
    try:
        _wait_for_running(lambda: study_attrs.load(stores, "engine"), process)
        os.killpg(process.pid, signal.SIGTERM)  # once, as Kubernetes and systemd do (then SIGKILL after 30 s)
        output, _ = process.communicate(timeout=120)
    finally:
        _kill_group(process)
    assert process.returncode == 143, output
    assert f"still running {stop_policy.STOP_GRACE:g} s after the run was told to stop" in output, output
    assert "Traceback" not in output, output
    _assert_interrupted_and_queued(study_attrs.load(stores, "engine"))
