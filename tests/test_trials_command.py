"""`tlsearch trials` on studies whose trials ran as a worker runs them (tests.stored_study): the table fits the
terminal, --columns / --sort / --top choose and order the rows, CSV and JSON name the value as the docs do
(issue 27.6)."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import optuna
import pytest
from optuna.trial import TrialState

import tlsearch
from tests.stored_study import StoredStudy
from tlsearch.cli import main
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.stores import Stores

pytestmark = pytest.mark.timeout(300)

LONG = "subsample_fraction_of_the_training_rows"


def space(trial):
    params = {"learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-1, log=True)}
    for name in ("n_estimators", "max_depth", "min_samples_split", "min_samples_leaf", "max_leaf_nodes"):
        params[name] = trial.suggest_int(name, 1, 9)
    params["criterion"] = trial.suggest_categorical("criterion", ["gini", "entropy", "log_loss"])
    params[LONG] = trial.suggest_float(LONG, 0.1, 1)
    return params


def fit(params, fold, report):
    return params[LONG] + 0.01 * fold.index


def fit_two(params, fold, report):
    return [params[LONG], params["max_depth"] + fold.index]


def make_study(home, name, fit=fit, n_trials=12, **objectives):
    """Study `name` under `home`: eight parameters (one with a 39-character name), 3 folds, the trials whose
    first fold scores under 0.3 pruned (single objective); the default sampler, TPE, keeps its own system
    attributes."""
    spec = tlsearch.StudySpec(
        name=name,
        dataset="sklearn:iris",
        space=space,
        model=tlsearch.CustomLoop(fit),
        cv=3,
        retries=0,
        pruner=optuna.pruners.ThresholdPruner(lower=0.3) if "directions" not in objectives else None,
        **objectives,
    )
    stored = StoredStudy(spec, home)
    for _ in range(n_trials):
        stored.trial()
    return stored.study


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    home = tmp_path_factory.mktemp("trials") / "home"
    make_study(home, "wide", metric="balanced_accuracy", direction="maximize")
    make_study(home, "low", metric="balanced_accuracy", direction="minimize", n_trials=6)
    objectives = {"metric": ["accuracy", "depth"], "directions": ["maximize", "minimize"]}
    make_study(home, "two", fit=fit_two, n_trials=6, **objectives)
    return home


def trials(capsys, home, *argv) -> tuple[int, str, str]:
    code = main(["trials", *argv, "--home", str(home)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def csv_rows(capsys, home, *argv) -> list[dict]:
    code, out, err = trials(capsys, home, *argv, "--format", "csv")
    assert code == 0, err
    return list(csv.DictReader(io.StringIO(out)))


@pytest.mark.parametrize("width", [80, 60, 200])
def test_the_default_table_fits_the_terminal_and_says_what_it_left_out(studies, capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))  # what shutil.get_terminal_size() reads first
    code, out, _ = trials(capsys, studies, "wide")
    assert code == 0
    lines = out.splitlines()
    assert max(map(len, lines)) <= width, out
    assert lines[0].split()[:3] == ["number", "state", "value"]
    assert len(lines) == 1 + 12 + (width < 200)
    if width < 200:
        assert lines[-1].startswith(("6 more columns", "7 more columns", "8 more columns")), out
        assert "(--columns to choose, --format csv for all)" in lines[-1]
    else:
        assert f"{LONG}" in lines[0] and "more column" not in out
    start = lines[0].index("duration")  # the cells are aligned under their header
    durations = [line[start:].split()[0] for line in lines[1:13]]
    assert all(d.endswith("s") and "days" not in d for d in durations), durations


def test_csv_names_the_value_as_the_docs_do_and_has_no_empty_or_internal_column(studies, capsys):
    rows = csv_rows(capsys, studies, "wide")
    columns = list(rows[0])
    assert "value" in columns and not [c for c in columns if c.startswith("value_")]
    assert [c for c in columns if all(row[c] == "" for row in rows)] == []
    assert "error" not in columns  # no trial failed
    assert not [c for c in columns if c.startswith("system_attrs_") or re.fullmatch(r"user_attrs_split\d+_worker", c)]
    assert all(float(row["duration"]) >= 0 for row in rows)  # seconds, not "0 days 00:00:00.01"
    records = json.loads(trials(capsys, studies, "wide", "--format", "json")[1])
    assert all(isinstance(record["duration"], float) for record in records)
    assert [c for c in csv_rows(capsys, studies, "two")[0] if c.startswith("value")] == [
        "values_accuracy",
        "values_depth",
    ]


def test_columns_choose_and_order_the_columns_internal_ones_too(studies, capsys, monkeypatch):
    study = study_attrs.load(Stores(home=studies), "wide")
    internal = next(f"system_attrs_{key}" for trial in study.trials for key in trial.system_attrs)
    rows = csv_rows(capsys, studies, "wide", "--columns", f"number,max_depth,params_criterion,{internal}")
    assert list(rows[0]) == ["number", "params_max_depth", "params_criterion", internal]
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = trials(capsys, studies, "wide", "--columns", "number,duration,error")
    assert code == 0 and out.splitlines()[0].split() == ["number", "duration", "error"]


@pytest.mark.parametrize("option", ["--columns", "--sort"])
def test_an_unknown_column_is_one_line_listing_the_valid_ones(studies, capsys, option):
    code, out, err = trials(capsys, studies, "wide", option, "number,nope" if option == "--columns" else "nope")
    assert code == 1 and out == ""
    assert err.startswith(f"tlsearch: error: {option}: no column 'nope'") and err.count("\n") == 1
    assert "params_max_depth" in err and "value" in err


def _values(rows, column="value") -> list[float]:
    return [float(row[column]) for row in rows]


def test_sort_orders_the_rows_value_best_first_in_the_studys_direction(studies, capsys):
    rows = csv_rows(capsys, studies, "wide")
    assert [int(row["number"]) for row in rows] == list(range(12))
    by_duration = csv_rows(capsys, studies, "wide", "--sort", "duration")
    assert _values(by_duration, "duration") == sorted(_values(by_duration, "duration"))
    assert _values(csv_rows(capsys, studies, "wide", "--sort", "duration", "--reverse"), "duration") == sorted(
        _values(by_duration, "duration"), reverse=True
    )
    by_value = csv_rows(capsys, studies, "wide", "--sort", "value")
    states = [row["state"] for row in by_value]
    assert "PRUNED" in states and states == sorted(states)  # complete trials first: COMPLETE < PRUNED
    complete = [row for row in by_value if row["state"] == "COMPLETE"]
    assert _values(complete) == sorted(_values(complete), reverse=True)  # maximised: highest first
    low = [row for row in csv_rows(capsys, studies, "low", "--sort", "value") if row["state"] == "COMPLETE"]
    assert _values(low) == sorted(_values(low))  # minimised: lowest first


def test_top_keeps_the_best_complete_trials_in_the_studys_direction(studies, capsys):
    for name, best_first in (("wide", True), ("low", False)):
        study = study_attrs.load(Stores(home=studies), name)
        complete = study.get_trials(states=(TrialState.COMPLETE,))
        expected = sorted(complete, key=lambda t: -t.value if best_first else t.value)[:3]
        rows = csv_rows(capsys, studies, name, "--top", "3")
        assert [int(row["number"]) for row in rows] == [t.number for t in expected]
        assert all(math.isclose(float(row["value"]), t.value) for row, t in zip(rows, expected))
    best = [int(row["number"]) for row in csv_rows(capsys, studies, "wide", "--top", "3")]
    by_number = csv_rows(capsys, studies, "wide", "--top", "3", "--sort", "number")  # the same three, reordered
    assert [int(row["number"]) for row in by_number] == sorted(best)


def test_top_rejects_zero_and_asks_a_multi_objective_study_which_objective(studies, capsys):
    code, _, err = trials(capsys, studies, "wide", "--top", "0")
    assert code == 1 and err.count("\n") == 1 and "--top" in err
    code, _, err = trials(capsys, studies, "two", "--top", "2")
    assert code == 1 and err.count("\n") == 1
    assert "values_accuracy" in err and "values_depth" in err and "--sort" in err
    rows = csv_rows(capsys, studies, "two", "--top", "2", "--sort", "values_depth")
    depths = [float(row["values_depth"]) for row in csv_rows(capsys, studies, "two") if row["state"] == "COMPLETE"]
    assert _values(rows, "values_depth") == sorted(depths)[:2]  # minimised: lowest first


NESTED = [f"random_forest.{name}" for name in ("n_estimators", "max_depth", "min_samples_leaf", "max_leaf_nodes")]


def test_nested_parameter_names_cut_to_fit_keep_their_distinct_ends(tmp_path, capsys, monkeypatch):
    spec = tlsearch.StudySpec(
        name="nested", dataset="sklearn:iris", space=lambda t: {n: t.suggest_int(n, 1, 9) for n in NESTED}, cv=2,
        model=tlsearch.CustomLoop(lambda params, fold, report: params["random_forest.max_depth"] / 10), retries=0,
    )  # fmt: skip
    stored = StoredStudy(spec, tmp_path / "home")
    for _ in range(3):
        stored.trial()
    monkeypatch.setenv("COLUMNS", "72")
    code, out, _ = trials(capsys, tmp_path / "home", "nested")
    heads = [h for h in out.splitlines()[0].split() if h.startswith("…")]
    assert code == 0 and len(heads) >= 2 and len(set(heads)) == len(heads)  # not "random_…" for every one
    assert all(any(name.endswith(h[1:]) for name in NESTED) for h in heads)


@pytest.mark.slow
def test_a_reader_that_stops_early_ends_the_command_quietly(studies):
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # `tlsearch trials NAME | head`, head long gone: every write fails
    command = [sys.executable, "-m", "tlsearch", "trials", "wide", "--home", str(studies), "--format", "csv"]
    done = subprocess.run(command, stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    assert done.returncode == 141 and done.stderr == ""
