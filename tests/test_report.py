"""The study report: sections, self-containment, escaping, studies with nothing (or nothing good) in them, PNGs."""

from __future__ import annotations

import html
import json
import re
import warnings

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.reading._report import write_report
from tlsearch.reading._study_attrs import DATASET_HASH as ATTR_DATASET_HASH

SECTIONS = [
    "Timeline",
    "Optimisation history",
    "Parameter importances",
    "Parallel coordinates",
    "Slice plots",
    "Intermediate values per fold",
    "Fold scores of the top trials",
    "Top trials",
]
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
    study.optimize(_toy_objective, n_trials=15)
    return study


def _pruned_only_study() -> optuna.Study:
    """Three trials, each pruned after reporting one fold."""
    study = _study("pruned")

    def objective(trial):
        trial.report(trial.suggest_float("x", 0, 1), 0)
        raise optuna.TrialPruned()

    study.optimize(objective, n_trials=3)
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
    assert f"(trial #{toy_study.best_trial.number})" in page
    assert page.count("* plotly.js v") == 1
    _assert_self_contained(page)
    assert "Could not be drawn" not in page
    assert "±" in page and "fold 4" in page


def test_top_trials_table_is_ranked_and_bounded_by_top_k(toy_study, tmp_path):
    page = _write(toy_study, tmp_path, top_k=3)
    table = page[page.index('<table class="trials">') :]
    numbers = [int(n) for n in re.findall(r"<tr><td>#(\d+)</td>", table)]
    best = sorted(toy_study.trials, key=lambda t: -t.value)[:3]
    assert numbers == [t.number for t in best]


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURE_SLUGS = [
    "timeline",
    "history",
    "importances",
    "parallel-coordinates",
    "slices",
    "intermediate-values",
    "fold-spread",
]


def _write_with_pngs(study: optuna.Study, tmp_path) -> tuple[str, dict[str, bytes]]:
    """Write the report with PNGs, failing on any warning; return the page and the PNGs by section slug."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = write_report(study, tmp_path / "report.html", png=True)
    pngs = {p.name.removeprefix("report-").removesuffix(".png"): p.read_bytes() for p in tmp_path.glob("*.png")}
    return path.read_text(encoding="utf-8"), pngs


def _assert_valid_pngs(pngs: dict[str, bytes]) -> None:
    for slug, data in pngs.items():
        assert data.startswith(PNG_MAGIC), slug
        assert len(data) > 5_000, f"{slug}: {len(data)} bytes is too little for a drawn figure"


def test_every_figure_is_also_a_png_linked_from_the_page(toy_study, tmp_path):
    style_before = matplotlib.rcParams["axes.facecolor"]
    page, pngs = _write_with_pngs(toy_study, tmp_path)

    assert sorted(pngs) == sorted(FIGURE_SLUGS)  # the top-trials table has no figure
    _assert_valid_pngs(pngs)
    for slug in FIGURE_SLUGS:
        assert f'<a href="report-{slug}.png">' in page
    assert not list(tmp_path.glob("*.partial"))
    assert plt.get_fignums() == [], "figures were left open"
    assert matplotlib.rcParams["axes.facecolor"] == style_before, "the caller's Matplotlib style was changed"


def test_sections_with_nothing_to_draw_get_no_png(tmp_path):
    study = _study("plain")
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=5)
    page, pngs = _write_with_pngs(study, tmp_path)
    assert sorted(pngs) == ["history", "importances", "parallel-coordinates", "slices", "timeline"]
    _assert_valid_pngs(pngs)
    assert "report-fold-spread.png" not in page and "report-intermediate-values.png" not in page


def test_empty_study_writes_no_png_and_no_warning(tmp_path):
    page, pngs = _write_with_pngs(_study("empty"), tmp_path)
    assert pngs == {}
    assert "No trials yet." in page and "PNG:" not in page


def test_only_pruned_trials_give_the_intermediate_values_png(tmp_path):
    study = _pruned_only_study()
    _, pngs = _write_with_pngs(study, tmp_path)
    assert sorted(pngs) == ["intermediate-values", "timeline"]
    _assert_valid_pngs(pngs)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # set_metric_names
def test_multi_objective_pngs_have_one_figure_per_objective(tmp_path):
    study = _study("two goals", directions=["minimize", "maximize"])
    study.set_metric_names(["loss", "accuracy"])
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)), n_trials=12)
    _, pngs = _write_with_pngs(study, tmp_path)
    assert sorted(pngs) == [
        "importances-1",
        "importances-2",
        "parallel-coordinates-1",
        "parallel-coordinates-2",
        "pareto-front",
        "slices-1",
        "slices-2",
        "timeline",
    ]
    _assert_valid_pngs(pngs)


def test_a_png_that_fails_costs_one_warning_naming_its_section(toy_study, tmp_path, monkeypatch):
    import optuna.visualization.matplotlib as optuna_matplotlib

    def broken_plot_slice(*args, **kwargs):
        plt.subplots()  # fails after opening a figure: it must be closed all the same
        raise RuntimeError("no slices today")

    monkeypatch.setattr(optuna_matplotlib, "plot_slice", broken_plot_slice)
    with pytest.warns(RuntimeWarning) as caught:
        path = write_report(toy_study, tmp_path / "report.html", png=True)
    assert len(caught) == 1
    assert "Slice plots" in str(caught[0].message) and "no slices today" in str(caught[0].message)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
        f"report-{slug}.png" for slug in FIGURE_SLUGS if slug != "slices"
    )
    page = path.read_text(encoding="utf-8")
    assert "report-slices.png" not in page and "report-history.png" in page
    assert _h2(page) == SECTIONS
    assert plt.get_fignums() == []


def test_pngs_of_an_earlier_report_are_not_left_behind(tmp_path):
    with_folds = _study("folds")
    with_folds.optimize(_toy_objective, n_trials=3)
    _write_with_pngs(with_folds, tmp_path)
    (tmp_path / "report-notes.png").write_bytes(b"not ours")
    without_folds = _study("plain")
    without_folds.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=3)
    _, pngs = _write_with_pngs(without_folds, tmp_path)
    assert sorted(pngs) == ["history", "importances", "notes", "parallel-coordinates", "slices", "timeline"]


def test_empty_study_says_no_trials_yet(tmp_path):
    page = _write(_study("empty"), tmp_path)
    assert "No trials yet." in page
    assert _h2(page) == []
    assert "<script" not in page


def test_study_with_only_failed_trials(tmp_path):
    study = _study("broken")

    def objective(trial):
        trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        trial.set_user_attr("error_type", "RuntimeError")  # what tlsearch's driver records for a failed trial
        trial.set_user_attr("error_message", "out of memory")
        raise RuntimeError("out of memory")

    study.optimize(objective, n_trials=3, catch=(RuntimeError,))
    page = _write(study, tmp_path)
    assert "3 (3 failed)" in page
    assert "No completed trials yet" in page
    assert _h2(page) == ["Failures", "Timeline"]
    assert "<td>RuntimeError</td><td>3</td><td>#0, #1, #2</td><td>out of memory</td>" in page


def test_study_with_only_pruned_trials_shows_their_fold_values(tmp_path):
    study = _pruned_only_study()
    page = _write(study, tmp_path)
    assert "No completed trials yet" in page
    assert _h2(page) == ["Pruned trials", "Timeline", "Intermediate values per fold"]
    assert "Pruned (last reported value)" in page
    _assert_self_contained(page)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_multi_objective_study_shows_the_pareto_front(tmp_path):
    study = _study("two goals", directions=["minimize", "maximize"])
    study.set_metric_names(["loss", "accuracy"])
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)), n_trials=12)
    page = _write(study, tmp_path)
    assert _h2(page)[:2] == ["Timeline", "Pareto front"]
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


def test_everything_from_the_study_is_escaped(tmp_path):
    study = _study(HOSTILE)
    study_attrs.write(study, ATTR_DATASET_HASH, HOSTILE)

    def objective(trial):
        trial.suggest_categorical(HOSTILE, [HOSTILE, "b"])
        trial.set_user_attr("split0_test_score", 0.5)
        if trial.number == 3:
            trial.set_user_attr("error_type", HOSTILE)
            trial.set_user_attr("error_message", HOSTILE)
            raise RuntimeError(HOSTILE)
        return trial.suggest_float("x", 0, 1)

    study.optimize(objective, n_trials=5, catch=(RuntimeError,))
    page = _write(study, tmp_path)
    assert HOSTILE not in page
    assert html.escape(HOSTILE) in page


def test_top_k_must_be_positive(toy_study, tmp_path):
    with pytest.raises(ValueError, match="top_k"):
        write_report(toy_study, tmp_path / "r.html", top_k=0)


def _figure(page: str, div_id: str) -> list[dict]:
    """The traces of the figure drawn in the page's `div_id` (plotly's newPlot call carries them as JSON)."""
    marker = f'"{div_id}",'
    traces, _ = json.JSONDecoder().raw_decode(page[page.index(marker) + len(marker) :].lstrip())
    return traces


def test_importances_are_the_ones_optuna_dashboard_shows_and_say_how_they_are_computed(toy_study, tmp_path):
    from tests.storage.test_storage_ecosystem import call

    optuna_dashboard = pytest.importorskip("optuna_dashboard")
    page = _write(toy_study, tmp_path)
    [bars] = [trace for trace in _figure(page, "importances-1") if trace["type"] == "bar"]
    in_report = dict(zip(bars["y"], bars["x"]))
    app = optuna_dashboard.wsgi(toy_study._storage)
    [shown] = call(app, f"/api/studies/{toy_study._study_id}/param_importances")["param_importances"]
    assert in_report == pytest.approx({entry["name"]: entry["importance"] for entry in shown}, abs=1e-9)
    assert set(in_report) == {"x", "units", "activation"}
    assert "PED-ANOVA (Optuna&#x27;s PedAnovaImportanceEvaluator, as optuna-dashboard computes them)" in page
    assert "on all 15 complete trials" in page


def _large_study(n_trials: int) -> optuna.Study:
    """`n_trials` trials made through Optuna's API, every fifth pruned after two folds."""
    study = _study("large", direction="maximize")
    distributions = {"x": FloatDistribution(-5, 5), "units": IntDistribution(8, 64)}
    rng = np.random.default_rng(0)
    trials = []
    for number in range(n_trials):
        params = {"x": float(rng.uniform(-5, 5)), "units": int(rng.integers(8, 65))}
        value = 1 - (params["x"] - 1) ** 2 / 25 + float(rng.normal(0, 0.02))
        if number % 5 == 4:
            trials.append(
                create_trial(
                    state=TrialState.PRUNED,
                    params=params,
                    distributions=distributions,
                    intermediate_values={0: value, 1: value},
                    user_attrs={"n_folds_run": 2},
                )
            )
        else:
            folds = {k: value for k in range(3)}
            trials.append(
                create_trial(value=value, params=params, distributions=distributions, intermediate_values=folds)
            )
    study.add_trials(trials)
    return study


@pytest.mark.slow
def test_a_study_larger_than_a_figure_draws_is_drawn_from_a_sample_that_keeps_every_new_best(tmp_path):
    study = _large_study(2_500)
    page = _write(study, tmp_path)
    assert "Could not be drawn" not in page
    assert page.count("Drawn from 2,000 of the study&#x27;s 2,500 trials") == 5  # every per-trial figure
    traces = {trace.get("name"): trace for trace in _figure(page, "history-1")}
    drawn, best_line = traces["Value"], traces["Best Value"]
    assert len(drawn["x"]) + len(traces["Pruned (last reported value)"]["x"]) <= 2_000
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    best_so_far = {t.number: max(c.value for c in complete if c.number <= t.number) for t in complete}
    assert best_line["y"] == pytest.approx([best_so_far[number] for number in best_line["x"]])
    assert best_line["y"][-1] == study.best_value
    assert "on all 2,000 complete trials" in page  # importances: every complete trial, not the sample
    assert "500 pruned trial(s). The latest 100 are listed" in page
    listed = re.findall(r"<tr><td>#(\d+)</td><td>2</td>", page)  # the pruned table's rows: number, folds run
    assert [int(n) for n in listed] == list(range(2499, 2000, -5))


def test_a_parameter_with_one_value_in_every_trial_gets_no_slice_plot(tmp_path):
    study = _study("constant")
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_float("fixed", 0.5, 0.5), n_trials=4)
    page = _write(study, tmp_path)
    assert "Not drawn, one value in every complete trial: fixed." in page
    assert len([trace for trace in _figure(page, "slices-1") if trace.get("x")]) == 1
    assert '"slices-2"' not in page
