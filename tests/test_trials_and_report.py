"""`tlsearch trials` and `tlsearch report` on a study made by `tlsearch run` with complete, pruned and failed
trials: the cv_results_ columns, the failures, pruned trials, figure widths, hashes and metric name."""

from __future__ import annotations

import csv
import io
import json
import re
import sys

import optuna
import pandas as pd
import pytest

import tlsearch
from tlsearch.cli import main
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.stores._stores import Stores

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# Six parameters (an old report drew them 300 px each in one figure); x < 0.25 fails, a first fold under 0.55
# is pruned, the rest completes; the parameter `extra` exists only on half the trials.
STUDY = """
import optuna
import tlsearch


def space(trial):
    params = {"x": trial.suggest_float("x", 0, 1)}
    for name in ("a", "b", "c", "d"):
        params[name] = trial.suggest_int(name, 1, 9)
    if params["a"] > 5:
        params["extra"] = trial.suggest_float("extra", 0, 1)
    return params


def fit(params, fold, report):
    if params["x"] < 0.25:
        raise ValueError(f"x={params['x']:.3f} is too small for this model")
    return params["x"] + 0.01 * fold.index


study = tlsearch.StudySpec(
    name="mixed", dataset="sklearn:iris", space=space, model=tlsearch.CustomLoop(fit),
    cv=3, metric="balanced_accuracy", direction="maximize", retries=0, n_trials=14,
    sampler=optuna.samplers.RandomSampler(seed=3), pruner=optuna.pruners.ThresholdPruner(lower=0.55))
"""


@pytest.fixture(scope="module")
def mixed_study(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mixed")
    (folder / "mixed.py").write_text(STUDY)
    home = folder / "home"
    assert main(["run", str(folder / "mixed.py"), "--home", str(home), "--workers", "1", "--progress", "off"]) == 0
    study = study_attrs.load(Stores.resolve(None, "tlsearch", home), "mixed")
    states = {t.state for t in study.trials}
    assert {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL} <= states
    return home, study


CV_COLUMNS = [
    "number",
    "rank_test_score",
    "mean_test_score",
    "std_test_score",
    "mean_fit_time",
    "std_fit_time",
    "mean_score_time",
    "std_score_time",
    "split0_test_score",
    "split1_test_score",
    "split2_test_score",
    "n_folds_run",
    "value",
    "state",
    "datetime_start",
    "datetime_complete",
    "duration",
]


def test_trials_table_has_cv_results_columns_in_scikit_learns_order(mixed_study, capsys):
    home, study = mixed_study
    assert main(["trials", "mixed", "--home", str(home), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    columns = list(rows[0])
    assert columns[: len(CV_COLUMNS)] == CV_COLUMNS
    params = [c for c in columns if c.startswith("params_")]
    assert params == sorted(params) == ["params_a", "params_b", "params_c", "params_d", "params_extra", "params_x"]
    assert columns.index("params_a") == len(CV_COLUMNS)  # params right after the times, conditional ones too
    assert columns[-1] == "error"
    by_state = {}
    for row in rows:
        by_state.setdefault(row["state"], []).append(row)
    for row in by_state["PRUNED"]:
        assert row["n_folds_run"] == "1" and row["split0_test_score"] != ""
        assert row["split1_test_score"] == row["split2_test_score"] == row["std_test_score"] == ""
        assert row["rank_test_score"] == ""
    for row in by_state["FAIL"]:
        assert row["error"].startswith("ValueError: x=") and row["rank_test_score"] == ""
    complete = sorted(by_state["COMPLETE"], key=lambda r: int(r["rank_test_score"]))
    assert [int(r["rank_test_score"]) for r in complete] == list(range(1, len(complete) + 1))
    values = [float(r["value"]) for r in complete]
    assert values == sorted(values, reverse=True)
    assert all(r["std_test_score"] != "" and r["mean_fit_time"] != "" for r in complete)


def test_results_api_json_and_parquet_give_the_same_table(mixed_study, capsys, tmp_path):
    home, study = mixed_study
    frame = tlsearch.results("mixed", home=home)
    assert isinstance(frame, pd.DataFrame) and list(frame.columns[: len(CV_COLUMNS)]) == CV_COLUMNS
    assert len(frame) == len(study.trials)

    assert main(["trials", "mixed", "--home", str(home), "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert list(records[0]) == list(frame.columns)
    pruned = next(r for r in records if r["state"] == "PRUNED")
    assert pruned["std_test_score"] is None and pruned["split2_test_score"] is None

    out = tmp_path / "trials.parquet"
    assert main(["trials", "mixed", "--home", str(home), "--format", "parquet", "-o", str(out)]) == 0
    read = pd.read_parquet(out)
    assert list(read.columns) == list(frame.columns)
    assert read["mean_test_score"].equals(frame["mean_test_score"])

    pruned_only = tlsearch.results("mixed", home=home, states=(optuna.trial.TrialState.PRUNED,))
    assert list(pruned_only.columns[: len(CV_COLUMNS)]) == CV_COLUMNS and set(pruned_only["state"]) == {"PRUNED"}


def test_parquet_without_pyarrow_names_the_extra(mixed_study, capsys, monkeypatch, tmp_path):
    home, _ = mixed_study
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    out = tmp_path / "t.parquet"
    assert main(["trials", "mixed", "--home", str(home), "--format", "parquet", "-o", str(out)]) == 1
    assert "pip install 'tlsearch[parquet]'" in capsys.readouterr().err and not out.exists()


def test_report_of_a_run_shows_failures_timeline_pruned_trials_hashes_and_metric(mixed_study, capsys):
    home, study = mixed_study
    path = home / "mixed.html"
    assert main(["report", "mixed", "--home", str(home), "-o", str(path)]) == 0
    page = path.read_text(encoding="utf-8")
    hashes = study_attrs.read(study)
    assert hashes[study_attrs.DATASET_HASH] in page and hashes[study_attrs.FOLD_PLAN] in page
    assert "balanced_accuracy (maximize)" in page

    # The answer before any figure: the best trial, its params, its CV mean ± std over its folds, each fold's score.
    answer = page[: page.index('class="plotly-graph-div"')]
    best = min(
        (t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: (-t.value, t.number)
    )
    attrs = best.user_attrs
    assert f"Best trial #{best.number}" in answer
    assert f"{attrs['mean_test_score']:.6g} ± {attrs['std_test_score']:.3g} over 3 folds" in answer
    assert "".join(f"<td>{attrs[f'split{k}_test_score']:.6g}</td>" for k in range(3)) in answer
    assert all(f"<dt>{name}</dt>" in answer for name in best.params)

    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings[0] == "Optimisation history" and headings[-2:] == ["Failures", "Pruned trials"]
    assert page.rindex('class="plotly-graph-div"') < page.index('<section id="failures">')
    failed = [t.number for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    failures = page[page.index('<section id="failures">') : page.index('<section id="pruned">')]
    assert f"<td>ValueError</td><td>{len(failed)}</td>" in failures
    assert ", ".join(f"#{n}" for n in failed) in failures and "is too small for this model" in failures
    assert page.count("Pruned (last reported value)") == 2  # history and per-fold values

    widths = [int(w) for w in re.findall(r'"width":\s*(\d+)', page)]
    assert not [w for w in widths if w > 1000], "a figure wider than the page"
    slices = page[page.index('<section id="slices">') : page.index('<section id="intermediate-values">')]
    assert slices.count('class="plotly-graph-div"') == 6 and '<div class="grid">' in slices


def test_png_without_matplotlib_names_the_extra(mixed_study, capsys, monkeypatch):
    home, _ = mixed_study
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert main(["report", "mixed", "--home", str(home), "-o", str(home / "p.html"), "--png"]) == 1
    assert "pip install 'tlsearch[png]'" in capsys.readouterr().err
