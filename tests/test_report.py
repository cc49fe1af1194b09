"""The study report: sections, self-containment, escaping, and studies with nothing (or nothing good) in them."""

from __future__ import annotations

import html
import re
import warnings

import numpy as np
import optuna
import pytest

from tlsearch.report import write_report

SECTIONS = ["Optimisation history", "Parameter importances", "Parallel coordinates", "Slice plots",
            "Intermediate values per fold", "Fold scores of the top trials", "Top trials"]
HOSTILE = "<script>alert('x')</script>"


def _toy_objective(trial: optuna.Trial) -> float:
    """Five 'folds' of a noisy quadratic, reported and stored like tlsearch.cv does."""
    x = trial.suggest_float("x", -5, 5)
    units = trial.suggest_int("units", 8, 64, log=True)
    activation = trial.suggest_categorical("activation", ["relu", "tanh"])
    rng = np.random.default_rng(trial.number)
    scores = []
    for fold in range(5):
        score = 1 - (x - 1) ** 2 / 25 + 0.001 * units + (0.05 if activation == "relu" else 0) + rng.normal(0, 0.02)
        scores.append(score)
        trial.set_user_attr(f"split{fold}_test_score", score)
        trial.report(float(np.mean(scores)), fold)
    trial.set_user_attr("mean_test_score", float(np.mean(scores)))
    trial.set_user_attr("std_test_score", float(np.std(scores)))
    trial.set_user_attr("mean_fit_time", 0.01)
    return float(np.mean(scores))


def _study(name: str = "toy", **kwargs) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(study_name=name, sampler=optuna.samplers.RandomSampler(seed=0), **kwargs)


@pytest.fixture(scope="module")
def toy_study() -> optuna.Study:
    study = _study(direction="maximize")
    study.set_user_attr("dataset_hash", "d" * 64)
    study.set_user_attr("fold_plan_hash", "f" * 64)
    study.optimize(_toy_objective, n_trials=15)
    return study


def _write(study: optuna.Study, tmp_path, **kwargs) -> str:
    path = write_report(study, tmp_path / "report.html", png=False, **kwargs)
    assert path == tmp_path / "report.html"
    return path.read_text(encoding="utf-8")


def _assert_self_contained(page: str) -> None:
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I), "a script is loaded from elsewhere"
    assert not re.search(r"<link[^>]*\bhref\s*=\s*[\"']?https?:", page, re.I), "a stylesheet is loaded from elsewhere"
    assert page.count("* plotly.js v") <= 1, "plotly.js is embedded more than once"


def _h2(page: str) -> list[str]:
    return re.findall(r"<h2>(.*?)</h2>", page)


def test_report_of_a_small_study_has_every_section(toy_study, tmp_path):
    page = _write(toy_study, tmp_path)

    assert _h2(page) == SECTIONS
    assert "Study toy" in page
    assert "15 (15 complete)" in page
    assert "d" * 64 in page and "f" * 64 in page
    assert f"(trial #{toy_study.best_trial.number})" in page
    assert page.count("* plotly.js v") == 1
    _assert_self_contained(page)
    assert "Could not be drawn" not in page
    assert "±" in page and "fold 4" in page


def test_top_trials_table_is_ranked_and_bounded_by_top_k(toy_study, tmp_path):
    page = _write(toy_study, tmp_path, top_k=3)
    table = page[page.index('<table class="trials">'):]
    numbers = [int(n) for n in re.findall(r"<tr><td>#(\d+)</td>", table)]
    best = sorted(toy_study.trials, key=lambda t: -t.value)[:3]
    assert numbers == [t.number for t in best]


def test_png_export_works_or_is_skipped_with_one_warning(toy_study, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = write_report(toy_study, tmp_path / "report.html", png=True)
    pngs = sorted(tmp_path.glob("report-*.png"))
    skipped = [w for w in caught if "PNG export skipped" in str(w.message)]
    assert path.exists()
    if skipped:  # no kaleido, or kaleido without a Chrome/Chromium
        assert len(skipped) == 1
        assert "PNG:" not in path.read_text(encoding="utf-8")
    else:
        assert len(pngs) == len(SECTIONS) - 1  # every section but the table has one figure
        assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_empty_study_says_no_trials_yet(tmp_path):
    page = _write(_study("empty"), tmp_path)
    assert "No trials yet." in page
    assert _h2(page) == []
    assert "<script" not in page


def test_study_with_only_failed_trials(tmp_path):
    study = _study("broken")

    def objective(trial):
        trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        raise RuntimeError("out of memory")

    study.optimize(objective, n_trials=3, catch=(RuntimeError,))
    page = _write(study, tmp_path)
    assert "3 (3 failed)" in page
    assert "No completed trials yet" in page
    assert "<script" not in page


def test_study_with_only_pruned_trials_shows_their_fold_values(tmp_path):
    study = _study("pruned")

    def objective(trial):
        trial.report(trial.suggest_float("x", 0, 1), 0)
        raise optuna.TrialPruned()

    study.optimize(objective, n_trials=3)
    page = _write(study, tmp_path)
    assert "No completed trials yet" in page
    assert _h2(page) == ["Intermediate values per fold"]
    _assert_self_contained(page)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_multi_objective_study_shows_the_pareto_front(tmp_path):
    study = _study("two goals", directions=["minimize", "maximize"])
    study.set_metric_names(["loss", "accuracy"])
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)), n_trials=12)
    page = _write(study, tmp_path)
    assert _h2(page)[0] == "Pareto front"
    assert "Optimisation history" not in page
    assert "loss (minimize), accuracy (maximize)" in page
    assert "Pareto-optimal trials" in page
    assert "Could not be drawn" not in page
    _assert_self_contained(page)


def test_trials_without_fold_attributes(tmp_path):
    study = _study("plain")
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=5)
    page = _write(study, tmp_path)
    assert _h2(page) == SECTIONS
    assert "no per-fold scores" in page
    assert "No trial reported intermediate values." in page
    assert "Could not be drawn" not in page


def test_single_complete_trial_skips_importances(tmp_path):
    study = _study("one")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    page = _write(study, tmp_path)
    assert "Needs at least 2 complete trials" in page


def test_hashes_are_read_from_system_attrs_too(tmp_path):
    study = _study("sys")
    study._storage.set_study_system_attr(study._study_id, "dataset_hash", "abc123")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert "abc123" in _write(study, tmp_path)


def test_everything_from_the_study_is_escaped(tmp_path):
    study = _study(HOSTILE)
    study.set_user_attr("dataset_hash", HOSTILE)

    def objective(trial):
        trial.suggest_categorical(HOSTILE, [HOSTILE, "b"])
        trial.set_user_attr("split0_test_score", 0.5)
        return trial.suggest_float("x", 0, 1)

    study.optimize(objective, n_trials=4)
    page = _write(study, tmp_path)
    assert HOSTILE not in page
    assert html.escape(HOSTILE) in page


def test_top_k_must_be_positive(toy_study, tmp_path):
    with pytest.raises(ValueError, match="top_k"):
        write_report(toy_study, tmp_path / "r.html", top_k=0)
