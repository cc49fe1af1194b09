"""Fold-parallel trials: when workers outnumber the trials left, one trial's folds run as several tasks.

Driven through `tlsearch.run` and the CLI on real LocalClusters; the model is a deterministic scikit-learn
tree, so a split trial's scores must equal a sequential run's exactly.
"""

from __future__ import annotations

import csv
import io

import pytest
from optuna.trial import TrialState

import tlsearch
from tests.test_driver import _driver, count, write_study
from tests.test_lifecycle import ctrl_c_twice
from tlsearch.cli import main
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.spec._spec import load_study_file
from tlsearch.stores._stores import Stores

pytestmark = pytest.mark.timeout(300)

TREE_STUDY = """
import optuna
import tlsearch
from sklearn.tree import DecisionTreeClassifier

study = tlsearch.StudySpec(
    name="tree", dataset="sklearn:iris", cv=3, n_trials=1, fold_parallel={fold_parallel},
    space=lambda trial: {{"depth": trial.suggest_int("depth", 1, 4), "leaf": trial.suggest_int("leaf", 1, 20)}},
    model=tlsearch.SklearnModel(lambda p: DecisionTreeClassifier(max_depth=p["depth"], min_samples_leaf=p["leaf"],
                                                                 random_state=0)),
    sampler=optuna.samplers.RandomSampler(seed=3))
"""

FAILING_STUDY = """
import time
import tlsearch

def fit(params, fold, report):
    if fold.index == 1 and fold.trial_number == 0:
        raise ValueError("fold 1 cannot be trained")
    time.sleep(2 if fold.index == 2 else 0)
    return params["x"]

study = tlsearch.StudySpec(
    name="failing", dataset="sklearn:iris", cv=3, n_trials=1, direction="maximize",
    space=lambda trial: {"x": trial.suggest_float("x", 0, 1)}, model=tlsearch.CustomLoop(fit))
"""


def run_tree(tmp_path, fold_parallel, home_name):
    path = tmp_path / f"tree-{home_name}.py"
    path.write_text(TREE_STUDY.format(fold_parallel=fold_parallel))
    home = tmp_path / home_name
    study = tlsearch.run(load_study_file(path), stores=Stores(home=home), n_workers=3, progress="off")
    [trial] = study.trials
    return home, trial


@pytest.mark.slow
def test_a_lone_trial_runs_its_folds_as_tasks_on_idle_workers_with_the_sequential_scores(tmp_path):
    _, split = run_tree(tmp_path, '"auto"', "split")
    _, sequential = run_tree(tmp_path, "False", "sequential")

    assert split.state == sequential.state == TrialState.COMPLETE
    assert split.user_attrs["fold_tasks"] == 3
    workers = {split.user_attrs[f"split{k}_worker"] for k in range(3)}
    assert len(workers) >= 2, f"the three fold tasks all ran on {workers}"
    assert split.params == sequential.params, "the driver samples with the sampler the worker would use"
    scores = [f"split{k}_test_score" for k in range(3)] + ["mean_test_score", "std_test_score", "n_folds_run"]
    assert {name: split.user_attrs[name] for name in scores} == {name: sequential.user_attrs[name] for name in scores}
    assert split.value == sequential.value == split.user_attrs["mean_test_score"]
    assert split.intermediate_values == sequential.intermediate_values, "pruners see the same reports"
    assert {"mean_fit_time", "std_score_time", "dataset_hash", "fold_plan_hash"} <= set(split.user_attrs)
    assert split.user_attrs["n_splits"] == 3


@pytest.mark.slow
def test_with_fold_parallel_off_a_trial_is_one_task(tmp_path):
    _, trial = run_tree(tmp_path, "False", "off")
    assert "fold_tasks" not in trial.user_attrs and "split0_worker" not in trial.user_attrs
    assert trial.user_attrs["n_folds_run"] == 3


@pytest.mark.slow
def test_a_failing_fold_task_fails_the_whole_trial_with_its_error(tmp_path):
    path = tmp_path / "failing.py"
    path.write_text(FAILING_STUDY)
    study = tlsearch.run(load_study_file(path), stores=Stores(home=tmp_path / "home"), n_workers=3, progress="off")
    failed, complete = study.trials  # a trial's own error is not retried: the next trial takes its slot
    assert failed.state == TrialState.FAIL and complete.state == TrialState.COMPLETE
    assert failed.user_attrs["error_type"] == "ValueError"
    assert failed.user_attrs["error_message"] == "fold 1 cannot be trained"
    assert "evaluate_folds" in failed.user_attrs["error_traceback"], "the failed trial ran as fold tasks"
    assert "fold_tasks" not in failed.user_attrs and "mean_test_score" not in failed.user_attrs
    assert complete.user_attrs["fold_tasks"] == 3
    assert not study.get_trials(states=(TrialState.RUNNING,))


@pytest.mark.slow
def test_a_multi_objective_trial_runs_split_and_is_told_both_means(tmp_path):
    path = tmp_path / "two.py"
    path.write_text(
        TREE_STUDY.format(fold_parallel='"auto"').replace(
            "n_trials=1,", 'n_trials=1, metric=["accuracy", "balanced_accuracy"], directions=["maximize"] * 2,'
        )
    )
    study = tlsearch.run(load_study_file(path), stores=Stores(home=tmp_path / "home"), n_workers=2, progress="off")
    [trial] = study.trials
    assert trial.state == TrialState.COMPLETE and trial.user_attrs["fold_tasks"] == 2
    for value, metric in zip(trial.values, ("accuracy", "balanced_accuracy")):
        folds = [trial.user_attrs[f"split{k}_test_{metric}"] for k in range(3)]
        assert value == trial.user_attrs[f"mean_test_{metric}"] == pytest.approx(sum(folds) / 3)


@pytest.mark.slow
def test_the_trials_table_and_report_read_a_split_trial(tmp_path, capsys):
    home, trial = run_tree(tmp_path, '"auto"', "table")
    assert trial.user_attrs["fold_tasks"] == 3
    assert main(["trials", "tree", "--home", str(home), "--format", "csv"]) == 0
    [row] = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert row["state"] == "COMPLETE" and row["rank_test_score"] == "1"
    assert float(row["mean_test_score"]) == pytest.approx(trial.value)
    assert all(row[f"split{k}_test_score"] != "" for k in range(3))
    internal = [column for column in row if column.startswith("user_attrs_split") and column.endswith("_worker")]
    assert internal == [] and "user_attrs_fold_tasks" not in row and row["user_attrs_worker"] != ""
    columns = "number,user_attrs_split1_worker"
    assert main(["trials", "tree", "--home", str(home), "--format", "csv", "--columns", columns]) == 0
    [row] = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))  # internal, but there when asked for
    assert list(row) == ["number", "user_attrs_split1_worker"] and row["user_attrs_split1_worker"] != ""
    assert main(["report", "tree", "--home", str(home), "-o", str(home / "tree.html")]) == 0


@pytest.mark.slow
def test_a_worker_lost_under_one_fold_task_fails_the_trial_once_and_its_retry_completes(tmp_path):
    marker = tmp_path / "killed-once"
    body = (
        f"if fold.index == 1 and not os.path.exists({str(marker)!r}):\n"
        f"        open({str(marker)!r}, 'w').close(); os.kill(os.getpid(), 9)"
    )
    spec = load_study_file(write_study(tmp_path, n_trials=1, body=body))
    study = tlsearch.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=2, progress="off")
    assert marker.exists()
    failed, retry = study.trials
    assert failed.state == TrialState.FAIL and failed.user_attrs["error_type"] == "WorkerKilled"
    assert "split1_test_score" not in failed.user_attrs
    assert retry.state == TrialState.COMPLETE and retry.system_attrs["failed_trial"] == failed.number
    assert retry.params == failed.params and retry.user_attrs["fold_tasks"] == 2


@pytest.mark.slow
def test_second_ctrl_c_fails_a_split_trial_once(tmp_path):
    stores = Stores(home=tmp_path / "home")
    process, output = ctrl_c_twice(
        _driver(tmp_path, write_study(tmp_path, n_trials=1, sleep=3)), stores
    )  # 2 fold tasks
    assert process.returncode == 130, output
    study = study_attrs.load(stores, "engine")
    interrupted, retry = study.trials
    assert interrupted.state == TrialState.FAIL and interrupted.user_attrs["error_type"] == "Interrupted"
    assert sum(line.startswith("trial ") and "Interrupted" in line for line in output.splitlines()) == 1, output
    assert retry.state == TrialState.WAITING and retry.system_attrs["failed_trial"] == interrupted.number
    assert count(study, TrialState.RUNNING) == 0


SEEDED_STUDY = """
import random
import threading
import tlsearch

def fit(params, fold, report):
    # Another thread draws from Python's global stream while the fold draws from its own (as Dask's sizeof does).
    stop = threading.Event()
    def draw():
        while not stop.is_set():
            random.random()
    thread = threading.Thread(target=draw)
    thread.start()
    try:
        draws = [fold.random.random() + fold.numpy_random.random() for _ in range(20000)]
    finally:
        stop.set()
        thread.join()
    return params["x"] + sum(draws) / len(draws)

study = tlsearch.StudySpec(
    name="seeded", dataset="sklearn:iris", cv=3, n_trials=1, fold_parallel={fold_parallel}, direction="maximize",
    space=lambda trial: {{"x": trial.suggest_float("x", 0, 1)}}, model=tlsearch.CustomLoop(fit))
"""


@pytest.mark.slow
def test_a_custom_loop_draws_the_same_from_its_folds_generators_split_or_sequential_under_a_busy_thread(tmp_path):
    scores, tasks = {}, {}
    for fold_parallel in ('"auto"', "False"):
        path = tmp_path / f"seeded-{fold_parallel.strip(chr(34))}.py"
        path.write_text(SEEDED_STUDY.format(fold_parallel=fold_parallel))
        home = tmp_path / fold_parallel.strip('"')
        study = tlsearch.run(load_study_file(path), stores=Stores(home=home), n_workers=3, progress="off")
        [trial] = study.trials
        assert trial.state == TrialState.COMPLETE, trial.user_attrs.get("error_message")
        scores[fold_parallel] = [trial.user_attrs[f"split{k}_test_score"] for k in range(3)]
        tasks[fold_parallel] = trial.user_attrs.get("fold_tasks")
    assert tasks == {'"auto"': 3, "False": None}
    assert scores['"auto"'] == scores["False"]
    assert len(set(scores["False"])) == 3  # each fold has generators of its own
