"""The driver on a real Dask LocalCluster: dispatch, distinct sampling, and the faults it must survive.

Trials here are tiny CustomLoop functions on iris, so what is tested is the engine, not the models.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from tlsearch.errors import TLSearchError
from tlsearch.execution import _driver as driver
from tlsearch.execution import _stop_policy as stop_policy
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.spec._spec import load_study_file
from tlsearch.stores._stores import Stores, require_shared

pytestmark = pytest.mark.timeout(300)

STUDY_FILE = """
import os, time
import numpy as np
import optuna
import tlsearch

def space(trial):
    return {{"x": trial.suggest_float("x", -10, 10), "y": trial.suggest_int("y", 0, 100)}}

def fit(params, fold, report):
    {body}
    time.sleep({sleep})
    report(float(fold.index), 0)
    return -(params["x"] - 2) ** 2 + fold.index * 0.01

study = tlsearch.StudySpec(
    name="engine", dataset="sklearn:iris", space=space, model=tlsearch.CustomLoop(fit),
    cv=3, direction="maximize", n_trials={n_trials}, retries=2,
    sampler=optuna.samplers.RandomSampler(seed=7), pruner=optuna.pruners.NopPruner())
"""


def write_study(tmp_path, n_trials=6, sleep=0.0, body="pass", name="study.py"):
    path = tmp_path / name
    path.write_text(STUDY_FILE.format(n_trials=n_trials, sleep=sleep, body=body))
    return path


def count(study, state):
    return len(study.get_trials(deepcopy=False, states=(state,)))


@pytest.mark.slow
def test_each_trial_line_shows_the_best_value_including_that_trial(tmp_path, capsys):
    import re

    spec = load_study_file(write_study(tmp_path, n_trials=4))
    study = driver.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=2, progress="log")
    lines = [line for line in capsys.readouterr().err.splitlines() if " COMPLETE " in line]
    assert len(lines) == 4
    for line in lines:
        value, best = re.search(r"COMPLETE (\S+) .*best (\S+),", line).groups()
        assert float(best) >= float(value), line  # maximize: the best so far counts this trial
    assert float(best) == pytest.approx(study.best_value, rel=1e-5)


@pytest.mark.slow
def test_a_run_without_progress_never_reads_the_best_value(tmp_path, monkeypatch):
    from tlsearch.execution._dispatcher import Dispatcher

    def refuse(self):
        raise AssertionError("the best value is read although nothing shows it")

    monkeypatch.setattr(Dispatcher, "_best", refuse)
    spec = load_study_file(write_study(tmp_path, n_trials=2))
    study = driver.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=1, progress="off")
    assert count(study, TrialState.COMPLETE) == 2


@pytest.mark.slow
def test_local_run_reaches_target_with_distinct_reproducible_params(tmp_path):
    spec = load_study_file(write_study(tmp_path, n_trials=8))
    first = driver.run(spec, stores=Stores(home=tmp_path / "a"), n_workers=2, progress="off")
    assert count(first, TrialState.COMPLETE) == 8
    params = [tuple(t.params.values()) for t in first.trials]
    assert len(set(params)) == 8, "concurrent workers drew the same parameters"
    trial = first.best_trial
    assert {f"split{k}_test_score" for k in range(3)} <= set(trial.user_attrs)

    again = driver.run(spec, stores=Stores(home=tmp_path / "b"), n_workers=2, progress="off")
    by_number = lambda study: {t.number: t.params for t in study.trials}
    assert by_number(again) == by_number(first), "the same study and seed must draw the same parameters"


@pytest.mark.slow
def test_rerun_counts_existing_trials_toward_the_target(tmp_path):
    spec = load_study_file(write_study(tmp_path, n_trials=3))
    stores = Stores(home=tmp_path)
    driver.run(spec, stores=stores, n_workers=1, progress="off")
    study = driver.run(spec, stores=stores, n_workers=1, n_trials=5, progress="off", resume=True)
    assert count(study, TrialState.COMPLETE) == 5
    assert [t.number for t in study.trials] == list(range(5))


@pytest.mark.slow
def test_a_run_past_its_timeout_ends_as_timeout_reached_with_nothing_left_running(tmp_path):
    """A study with a complete trial (so that the end is the timeout's, whatever the machine's speed) resumed
    with a budget it cannot spend in its 2 s: it ends as TIMEOUT_REACHED, exit 0, no trial left RUNNING."""
    spec = load_study_file(write_study(tmp_path, n_trials=1, sleep=0.1))
    stores = Stores(home=tmp_path / "home")
    assert driver.drive(spec, stores=stores, n_workers=1, progress="off").reason == stop_policy.BUDGET_REACHED
    result = driver.drive(spec, stores=stores, n_workers=1, n_trials=1000, timeout=2, resume=True, progress="off")
    assert (result.reason, result.exit_code) == (stop_policy.TIMEOUT_REACHED, 0), result.summary()
    assert count(result.study, TrialState.COMPLETE) >= 1 and count(result.study, TrialState.RUNNING) == 0


@pytest.mark.slow
def test_a_run_whose_every_trial_is_pruned_ends_as_no_complete_trial(tmp_path):
    spec = load_study_file(write_study(tmp_path, n_trials=2, body="raise optuna.TrialPruned()"))
    result = driver.drive(spec, stores=Stores(home=tmp_path / "home"), n_workers=1, progress="off")
    assert (result.reason, result.exit_code) == (stop_policy.NO_COMPLETE_TRIAL, 4), result.summary()
    assert result.detail == "2/2 trials finished, 0 failed"
    assert count(result.study, TrialState.PRUNED) == 2


@pytest.mark.slow
def test_mongo_run_and_stop_flag(tmp_path, mongo_uri, mongo_db_name):
    spec = load_study_file(write_study(tmp_path, n_trials=4))
    stores = Stores(mongo_uri, mongo_db_name, tmp_path)
    study = driver.run(spec, stores=stores, n_workers=2, progress="off")
    assert count(study, TrialState.COMPLETE) == 4
    study_attrs.request_stop(stores, "engine")
    study = driver.run(spec, stores=stores, n_workers=2, n_trials=6, progress="off")
    assert count(study, TrialState.COMPLETE) == 6, "a new run clears an earlier stop request"


@pytest.mark.slow
def test_worker_killed_mid_trial_is_failed_and_retried(tmp_path):
    marker = tmp_path / "killed-once"
    body = (
        f"if fold.index == 1 and not os.path.exists({str(marker)!r}):\n"
        f"        open({str(marker)!r}, 'w').close(); os.kill(os.getpid(), 9)"
    )
    spec = load_study_file(write_study(tmp_path, n_trials=5, body=body))
    study = driver.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=2, progress="off")
    assert marker.exists()
    assert count(study, TrialState.COMPLETE) == 5
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert len(failed) == 1 and failed[0].user_attrs["error_type"] == "WorkerKilled"
    assert failed[0].user_attrs["error_message"] == "its worker died under it: SIGKILL: out of memory?"
    retries = [t for t in study.trials if t.system_attrs.get("failed_trial") == failed[0].number]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].params == failed[0].params and "error_type" not in retries[0].user_attrs


@pytest.mark.slow
def test_user_error_fails_the_trial_with_its_message_and_the_study_goes_on(tmp_path):
    body = "if params['y'] % 2: raise ValueError('odd y is not allowed')"
    spec = load_study_file(write_study(tmp_path, n_trials=4, body=body))
    study = driver.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=2, progress="off")
    assert count(study, TrialState.COMPLETE) == 4
    for trial in study.get_trials(states=(TrialState.FAIL,)):
        assert trial.user_attrs["error_type"] == "ValueError"
        assert "odd y" in trial.user_attrs["error_message"]
        assert "failed_trial" not in trial.system_attrs  # a trial's own error is not retried


@pytest.mark.slow
def test_a_trial_that_raises_retryable_trial_error_is_retried_up_to_its_retries(tmp_path):
    body = "if params['y'] % 2: raise tlsearch.errors.RetryableTrialError('odd y: try again') from ValueError('x')"
    spec = load_study_file(write_study(tmp_path, n_trials=4, body=body))
    study = driver.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=2, progress="off")
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert count(study, TrialState.COMPLETE) == 4 and failed
    assert all(trial.user_attrs["error_type"] == "tlsearch.errors.RetryableTrialError" for trial in failed)
    originals = [trial for trial in failed if "failed_trial" not in trial.system_attrs]
    for original in originals:  # each odd y ran 1 + retries (2) times, all failed
        attempts = [t for t in failed if t.system_attrs.get("failed_trial", t.number) == original.number]
        assert len(attempts) == 3 and {t.params["y"] for t in attempts} == {original.params["y"]}


@pytest.mark.slow
def test_a_trial_that_raises_fatal_trial_error_is_not_retried_even_from_a_lost_connection(tmp_path):
    body = "if params['y'] % 2: raise tlsearch.errors.FatalTrialError('odd y: never') from ConnectionError('lost')"
    spec = load_study_file(write_study(tmp_path, n_trials=4, body=body))
    study = driver.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=2, progress="off")
    assert count(study, TrialState.COMPLETE) == 4
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert failed and all(trial.user_attrs["error_type"] == "tlsearch.errors.FatalTrialError" for trial in failed)
    assert all("failed_trial" not in trial.system_attrs for trial in failed)


def _driver(tmp_path, study_file, *args):
    command = [
        sys.executable,
        "-m",
        "tlsearch",
        "run",
        str(study_file),
        "--home",
        str(tmp_path / "home"),
        "--workers",
        "2",
        "--progress",
        "log",
        "--no-report",
        *args,
    ]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def _wait_for_complete(load, n, process, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        try:
            if count(load(), TrialState.COMPLETE) >= n:
                return
        except (KeyError, TLSearchError):
            pass
        time.sleep(0.3)
    raise AssertionError(f"fewer than {n} trials completed in {timeout} s")


def _kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _all_succeed(drivers, timeout: float = 300) -> None:
    """Wait for every driver process (each its own session, stdout piped), then kill what is left of their groups;
    each must have exited 0 (the assertion shows its output)."""
    try:
        outputs = [driver.communicate(timeout=timeout)[0] for driver in drivers]
    finally:
        for driver in drivers:
            _kill_group(driver)
    for driver, output in zip(drivers, outputs):
        assert driver.returncode == 0, output


@pytest.mark.slow
def test_driver_killed_then_resumed_reaches_target(tmp_path, mongo_uri, mongo_db_name):
    study_file = write_study(tmp_path, n_trials=8, sleep=0.4)
    process = _driver(tmp_path, study_file, "--mongo", mongo_uri, "--database", mongo_db_name)
    stores = Stores(mongo_uri, mongo_db_name, tmp_path / "home", heartbeat_interval=1, grace_period=2)
    try:
        _wait_for_complete(lambda: study_attrs.load(stores, "engine"), 2, process)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    finally:
        _kill_group(process)
    left_running = [t.number for t in study_attrs.load(stores, "engine").trials if t.state == TrialState.RUNNING]
    time.sleep(2.5)  # past the grace period
    study = driver.run(load_study_file(study_file), stores=stores, n_workers=2, progress="off", resume=True)
    assert count(study, TrialState.COMPLETE) == 8
    for number in left_running:
        assert study.trials[number].state == TrialState.FAIL
        assert study.trials[number].user_attrs["error_type"] == "DriverLost"


@pytest.mark.slow
def test_mongo_restart_mid_study_loses_and_duplicates_nothing(tmp_path, persistent_mongo_server):
    study_file = write_study(tmp_path, n_trials=6, sleep=0.3)
    uri = persistent_mongo_server.uri
    process = _driver(tmp_path, study_file, "--mongo", uri)
    stores = Stores(uri, "tlsearch", tmp_path / "home")
    try:
        _wait_for_complete(lambda: study_attrs.load(stores, "engine"), 2, process)
        persistent_mongo_server.restart()
        output, _ = process.communicate(timeout=180)
    finally:
        _kill_group(process)
    assert process.returncode == 0, output
    study = optuna.load_study(study_name="engine", storage=Stores(uri, "tlsearch", tmp_path).study_storage())
    assert count(study, TrialState.COMPLETE) >= 6
    assert [t.number for t in study.trials] == list(range(len(study.trials)))


@pytest.mark.slow
def test_ctrl_c_finishes_running_trials_and_the_study_resumes(tmp_path):
    study_file = write_study(tmp_path, n_trials=10, sleep=0.3)
    process = _driver(tmp_path, study_file)
    stores = Stores(home=tmp_path / "home")
    try:
        _wait_for_complete(lambda: study_attrs.load(stores, "engine"), 2, process)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    finally:
        _kill_group(process)
    assert process.returncode == 130, output  # EXIT_CODES[INTERRUPTED]
    assert "best trial" in output
    study = study_attrs.load(stores, "engine")
    assert count(study, TrialState.RUNNING) == 0
    assert count(study, TrialState.COMPLETE) < 10
    study = driver.run(load_study_file(study_file), stores=stores, n_workers=2, progress="off", resume=True)
    assert count(study, TrialState.COMPLETE) == 10


IN_MEMORY_STUDY = """
import numpy as np
import pandas as pd
import tlsearch
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

X, y = load_iris(return_X_y=True)
frame = pd.DataFrame(X, columns=["sepal_l", "sepal_w", "petal_l", "petal_w"])
frame["species"] = np.array(["setosa", "versicolor", "virginica"])[y]

spec = tlsearch.StudySpec(
    name="in-memory", dataset=(frame, "species"), space=lambda t: {"C": t.suggest_float("C", 0.1, 10, log=True)},
    model=tlsearch.SklearnModel(lambda p: LogisticRegression(C=p["C"], max_iter=500)), cv=3, metric="accuracy",
    n_trials=2)
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "mongo"])
def test_a_study_on_a_data_frame_pushes_it_once_and_its_workers_get_only_its_name(
    tmp_path, backend, request, monkeypatch
):
    import tlsearch
    from tlsearch.execution import _dispatcher
    from tlsearch.reading._refit import load_model, refit

    path = tmp_path / "study.py"
    path.write_text(IN_MEMORY_STUDY)
    stores = (
        Stores(home=tmp_path / "home")
        if backend == "local"
        else Stores(request.getfixturevalue("mongo_uri"), request.getfixturevalue("mongo_db_name"), tmp_path / "home")
    )
    sent = []
    pack_spec = _dispatcher.pack_spec
    monkeypatch.setattr(_dispatcher, "pack_spec", lambda spec: sent.append(spec.dataset) or pack_spec(spec))
    spec = load_study_file(path)
    study = tlsearch.run(spec, stores=stores, n_workers=1, progress="off")
    ref = study_attrs.read(study)[study_attrs.DATASET_REF]
    assert ref.startswith("data-") and sent == [ref], "workers get the dataset's name, never the data"
    assert count(study, TrialState.COMPLETE) == 2 and isinstance(spec.dataset, tuple)  # the caller's spec as given

    again = load_study_file(path)  # the file run again: equal data in new objects
    study = tlsearch.run(again, stores=stores, n_workers=1, n_trials=3, resume=True, progress="off")
    assert study_attrs.read(study)[study_attrs.DATASET_REF] == ref and count(study, TrialState.COMPLETE) == 3
    assert [info.ref for info in stores.dataset_store().list()] == [ref]
    info = stores.dataset_store().info(ref)
    assert info.metadata["class_names"] == ["setosa", "versicolor", "virginica"] and info.metadata["label"] == "species"

    refit("in-memory", stores=stores, spec=again)
    predicted = tlsearch.predict(load_model("in-memory", stores=stores), again.dataset[0].iloc[:, :4].to_numpy())
    assert set(predicted) <= {"setosa", "versicolor", "virginica"}


def test_local_store_with_remote_cluster_is_refused():
    with pytest.raises(TLSearchError, match="MongoDB"):
        require_shared(Stores(), remote_cluster=True)
    require_shared(Stores("mongodb://db:27017"), remote_cluster=True)


def test_resume_of_a_missing_study_says_so(tmp_path):
    spec = load_study_file(write_study(tmp_path))
    with pytest.raises(TLSearchError, match="no study named 'engine'"):
        driver.run(spec, stores=Stores(home=tmp_path), n_workers=1, progress="off", resume=True)


@pytest.mark.slow
def test_kept_validation_predictions_are_trial_artifacts(tmp_path):
    study_file = tmp_path / "tree.py"
    study_file.write_text("""
import tlsearch
from sklearn.tree import DecisionTreeClassifier
study = tlsearch.StudySpec(name="kept", dataset="sklearn:iris", cv=3, n_trials=2, keep_predictions=True,
                           space=lambda trial: {"depth": trial.suggest_int("depth", 1, 4)},
                           model=tlsearch.SklearnModel(lambda p: DecisionTreeClassifier(max_depth=p["depth"])))
""")
    stores = Stores(home=tmp_path / "home")
    study = driver.run(load_study_file(study_file), stores=stores, n_workers=1, progress="off")
    from optuna.artifacts import download_artifact, get_all_artifact_meta

    for number, trial in enumerate(study.get_trials(states=(TrialState.COMPLETE,))):
        [meta] = get_all_artifact_meta(trial, storage=study._storage)
        path = tmp_path / f"predictions-{number}.npz"
        download_artifact(artifact_store=stores.artifact_store(), file_path=str(path), artifact_id=meta.artifact_id)
        with np.load(path, allow_pickle=False) as kept:
            rows = np.concatenate([kept[f"fold{k}_index"] for k in range(3)])
            assert sorted(rows.tolist()) == list(range(150))  # every row predicted once, out of fold
            assert all(kept[f"fold{k}_predictions"].shape == kept[f"fold{k}_index"].shape for k in range(3))


# A driver killed between `ask` and its trial's first heartbeat: the hook is the first heartbeat itself.
KILLED_BEFORE_FIRST_BEAT = """
import os, signal, sys
if __name__ == "__main__":
    from tlsearch.execution._heartbeat import Heartbeat
    Heartbeat.soon = lambda self, trial_id: os.kill(os.getpid(), signal.SIGKILL)
    from tlsearch.cli import main
    sys.exit(main(sys.argv[1:]))
"""


def _killed_before_first_beat(tmp_path, study_file, *args) -> None:
    """Run `tlsearch run` in a driver that dies right after `ask`, leaving one RUNNING trial with no heartbeat."""
    script = tmp_path / "killed_driver.py"
    script.write_text(KILLED_BEFORE_FIRST_BEAT)
    command = [sys.executable, str(script), "run", str(study_file), "--home", str(tmp_path / "home")]
    process = subprocess.Popen(
        [*command, "--workers", "1", "--progress", "off", "--no-report", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=240)
        assert process.returncode == -signal.SIGKILL, output
    finally:
        _kill_group(process)


def _resumed_with_short_heartbeats(study_file, stores):
    study = driver.run(load_study_file(study_file), stores=stores, n_workers=1, progress="off", resume=True)
    [lost] = [t for t in study.trials if t.state == TrialState.FAIL]
    assert lost.user_attrs["error_type"] == "DriverLost"
    [retry] = [t for t in study.trials if t.system_attrs.get("failed_trial") == lost.number]
    assert retry.state == TrialState.COMPLETE  # it samples: the driver died before the trial had parameters
    assert count(study, TrialState.COMPLETE) == 2 and count(study, TrialState.RUNNING) == 0
    return study


@pytest.mark.slow
def test_a_driver_killed_before_its_first_heartbeat_leaves_a_trial_that_resume_fails_and_retries(
    tmp_path, mongo_uri, mongo_db_name
):
    study_file = write_study(tmp_path, n_trials=2)
    _killed_before_first_beat(tmp_path, study_file, "--mongo", mongo_uri, "--database", mongo_db_name)
    stores = Stores(mongo_uri, mongo_db_name, tmp_path / "home", heartbeat_interval=1, grace_period=2)
    [left] = study_attrs.load(stores, "engine").trials
    assert left.state == TrialState.RUNNING
    _resumed_with_short_heartbeats(study_file, stores)  # before: resume waited for it forever


@pytest.mark.slow
def test_a_running_trial_copied_to_mongodb_is_failed_and_retried_on_resume(tmp_path, mongo_uri, mongo_db_name):
    from tlsearch.cli import main

    study_file = write_study(tmp_path, n_trials=2)
    _killed_before_first_beat(tmp_path, study_file)
    local = Stores(home=tmp_path / "home")
    assert [t.state for t in study_attrs.load(local, "engine").trials] == [TrialState.RUNNING]
    target = ["--to", mongo_uri, "--to-database", mongo_db_name]
    assert main(["copy", "engine", "--home", str(tmp_path / "home"), *target]) == 0
    stores = Stores(mongo_uri, mongo_db_name, tmp_path / "home", heartbeat_interval=1, grace_period=2)
    _resumed_with_short_heartbeats(study_file, stores)


@pytest.mark.slow
def test_a_trial_that_calls_sys_exit_fails_as_its_own_error_and_its_worker_lives_on(tmp_path):
    body = "if fold.trial_number == 0: import sys; sys.exit(2)"
    spec = load_study_file(write_study(tmp_path, n_trials=3, body=body))
    study = driver.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=1, progress="off")
    exited = study.trials[0]
    assert exited.state == TrialState.FAIL and exited.user_attrs["error_type"] == "SystemExit"
    assert exited.user_attrs["error_message"].startswith("the trial called sys.exit(2)")
    assert count(study, TrialState.COMPLETE) == 3 and len(study.trials) == 4, "not retried"
    workers = {t.user_attrs["worker"] for t in study.trials[1:]}
    assert len(workers) == 1, f"the worker process was replaced: {workers}"
