"""The `tlsearch` command end to end: run, status, best, trials, report, stop, copy into MongoDB, resume."""

from __future__ import annotations

import csv
import io
import json
import socket

import pytest

from tlsearch import MongoStorage
from tlsearch.cli import main

pytestmark = pytest.mark.timeout(300)

STUDY = """
import tlsearch
from sklearn.tree import DecisionTreeClassifier

study = tlsearch.StudySpec(
    name="iris-tree", dataset="sklearn:iris",
    space=lambda trial: {"max_depth": trial.suggest_int("max_depth", 1, 6)},
    model=tlsearch.SklearnModel(lambda p: DecisionTreeClassifier(max_depth=p["max_depth"], random_state=0)),
    cv=3, metric="accuracy", n_trials=4)
"""


@pytest.fixture(scope="module")
def local_study(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    study_file = folder / "iris_tree.py"
    study_file.write_text(STUDY)
    home = folder / "home"
    assert main(["run", str(study_file), "--home", str(home), "--workers", "1", "--progress", "off"]) == 0
    return study_file, home


@pytest.mark.slow
def test_run_prints_the_best_trial_and_writes_the_report(local_study, capsys):
    study_file, home = local_study
    assert main(["report", "iris-tree", "--home", str(home), "-o", str(home / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "report:" in out and (home / "r.html").stat().st_size > 10_000
    assert (home / "reports" / "iris-tree.html").is_file()  # written by `run`


@pytest.mark.slow
def test_status_best_and_trials(local_study, capsys):
    _, home = local_study
    assert main(["status", "--home", str(home), "--json"]) == 0
    [status] = json.loads(capsys.readouterr().out)
    assert status["name"] == "iris-tree" and status["complete"] + status["pruned"] == 4
    assert status["dataset"] == "iris@1" and status["best_value"] > 0.8

    assert main(["best", "iris-tree", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "best trial #" in out and "folds:" in out and "max_depth = " in out

    assert main(["trials", "iris-tree", "--home", str(home), "--format", "csv", "--state", "complete"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows and {"split0_test_score", "split2_test_score", "mean_test_score", "params_max_depth"} <= set(rows[0])

    assert main(["best", "iris-tree", "--home", str(home), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert main(["trials", "iris-tree", "--home", str(home), "--format", "json"]) == 0
    by_number = {row["number"]: row for row in json.loads(capsys.readouterr().out)}
    estimate = {"estimate_mean", "estimate_standard_error", "n_evaluations"}
    assert best and all(set(row) - set(by_number[row["number"]]) == estimate for row in best)
    # the trial's own fields are the trials table's, named alike
    assert all({k: v for k, v in row.items() if k not in estimate} == by_number[row["number"]] for row in best)
    assert best[0]["n_evaluations"] == 1 and best[0]["estimate_mean"] == best[0]["value"]
    assert {"value", "duration", "mean_test_score", "params_max_depth"} <= set(best[0])
    assert isinstance(best[0]["duration"], float)  # seconds


@pytest.mark.slow
def test_errors_are_one_line_with_a_nonzero_exit(local_study, capsys):
    _, home = local_study
    assert main(["best", "no-such-study", "--home", str(home)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tlsearch: error: no study named 'no-such-study'") and err.count("\n") == 1
    assert main(["run", str(home / "missing.py"), "--home", str(home)]) == 1
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_status_and_best_on_mongodb_load_no_trial_and_agree_with_the_local_store(
    local_study, mongo_uri, mongo_db_name, capsys, monkeypatch
):
    _, home = local_study
    assert main(["copy", "iris-tree", "--home", str(home), "--to", mongo_uri, "--to-database", mongo_db_name]) == 0
    local, mongo = ["--home", str(home)], ["--mongo", mongo_uri, "--database", mongo_db_name, "--home", str(home)]
    outputs = {}
    for store, args in (("local", local), ("mongo", mongo)):
        if store == "mongo":  # counts, times and the best are the server's: a study of any size costs the same
            monkeypatch.setattr(MongoStorage, "get_all_trials", lambda *a, **k: pytest.fail("loaded the trials"))
        capsys.readouterr()
        assert main(["status", "iris-tree", *args, "--json"]) == 0
        [status] = json.loads(capsys.readouterr().out)
        assert main(["best", "iris-tree", *args]) == 0
        outputs[store] = status, capsys.readouterr().out
    assert outputs["mongo"] == outputs["local"]
    status, best = outputs["local"]
    assert status["directions"] == "maximize" and status["started"][-6] in "+-"  # an offset: the time is exact
    assert f"best trial #{status['best_trial']}: value {status['best_value']:.6g}" in best


@pytest.mark.slow
def test_copy_to_mongodb_then_resume_there(local_study, mongo_uri, mongo_db_name, capsys):
    study_file, home = local_study
    assert main(["copy", "iris-tree", "--home", str(home), "--to", mongo_uri, "--to-database", mongo_db_name]) == 0
    assert "copied study 'iris-tree'" in capsys.readouterr().out
    mongo = ["--mongo", mongo_uri, "--database", mongo_db_name, "--home", str(home)]
    assert main(["stop", "iris-tree", *mongo]) == 0  # a stale stop request is cleared by the next run
    assert (
        main(["resume", "iris-tree", *mongo, "--n-trials", "6", "--workers", "1", "--progress", "off", "--no-report"])
        == 0
    )
    capsys.readouterr()
    assert main(["status", "iris-tree", *mongo, "--json"]) == 0
    [status] = json.loads(capsys.readouterr().out)
    assert status["complete"] + status["pruned"] == 6 and status["dataset"] == "iris@1"


@pytest.mark.slow
def test_copy_says_so_when_the_source_is_the_destination(local_study, mongo_uri, mongo_db_name, capsys, monkeypatch):
    _, home = local_study
    to = ["--to", mongo_uri, "--to-database", mongo_db_name]
    assert main(["copy", "iris-tree", "--home", str(home), *to, "--to-name", "copied"]) == 0
    assert "A new study created" not in capsys.readouterr().err  # the store's info line, as Optuna's, only with -v
    monkeypatch.setenv("TLSEARCH_MONGO_URI", mongo_uri)  # the tutorial's order: export, then copy
    assert main(["copy", "copied", "--database", mongo_db_name, *to]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the source and the destination are both MongoDB" in err
    assert "unset TLSEARCH_MONGO_URI" in err
    monkeypatch.delenv("TLSEARCH_MONGO_URI")
    assert main(["copy", "iris-tree", "--home", str(home), *to, "--to-name", "copied"]) == 1
    assert "has a study named 'copied' already: give --to-name" in capsys.readouterr().err


def test_dashboard_on_a_busy_port_says_so_in_one_line(tmp_path, capsys):
    pytest.importorskip("optuna_dashboard")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["dashboard", "--home", str(tmp_path), "--port", str(port)]) == 1
    assert capsys.readouterr().err == f"tlsearch: error: port {port} is in use on 127.0.0.1: --port to choose another\n"
