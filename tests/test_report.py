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
    "Optimisation history",
    "Fold scores of the top trials",
    "Parameter importances",
    "Parallel coordinates",
    "Slice plots",
    "Intermediate values per fold",
    "Timeline",
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
    assert f"Best trial #{toy_study.best_trial.number}" in page
    assert page.count("* plotly.js v") == 1
    _assert_self_contained(page)
    assert "Could not be drawn" not in page
    assert "±" in page and "fold 4" in page


def test_the_first_screen_answers_before_any_figure(toy_study, tmp_path):
    page = _write(toy_study, tmp_path)
    answer = page[: page.index('class="plotly-graph-div"')]
    best = toy_study.best_trial
    assert f"Best trial #{best.number}" in answer
    for name, value in best.params.items():
        shown = f"{value:.6g}" if isinstance(value, float) else str(value)
        assert f"<dt>{name}</dt><dd>{shown}</dd>" in answer
    mean, std = best.user_attrs["mean_test_score"], best.user_attrs["std_test_score"]
    assert f"<td>{mean:.6g} ± {std:.3g}</td>" in answer
    folds = [best.user_attrs[f"split{k}_test_score"] for k in range(5)]
    assert "<tr>" + "".join(f"<td>{score:.6g}</td>" for score in folds) + "</tr>" in answer
    runner_up = sorted(toy_study.trials, key=lambda t: -t.value)[1]
    assert f"trial #{runner_up.number}: {runner_up.value:.6g} ±" in answer


def test_of_trials_tied_for_the_best_the_answer_is_the_lowest_numbered(tmp_path):
    study = _study("ties", direction="maximize")
    study.optimize(lambda t: round(t.suggest_float("x", 0, 1)) + 1.0, n_trials=8)
    first = min(t.number for t in study.trials if t.value == study.best_value)
    ties = sum(t.value == study.best_value for t in study.trials)
    page = _write(study, tmp_path)
    assert f"Best trial #{first}" in page
    assert f"{ties} trials share the best value; this is the lowest-numbered" in page


def test_the_failed_and_pruned_tables_come_after_every_figure(tmp_path):
    study = _study("mixed", direction="maximize")

    def objective(trial):
        if trial.number % 4 == 1:
            trial.report(trial.suggest_float("x", -5, 5), 0)
            raise optuna.TrialPruned()
        if trial.number % 4 == 2:
            trial.set_user_attr("error_type", "RuntimeError")
            raise RuntimeError("out of memory")
        return _toy_objective(trial)

    study.optimize(objective, n_trials=12, catch=(RuntimeError,))
    page = _write(study, tmp_path)
    assert _h2(page) == [*SECTIONS, "Failures", "Pruned trials"]
    last_figure = page.rindex('class="plotly-graph-div"')
    tables = [page.index(f'<section id="{slug}">') for slug in ("top-trials", "failures", "pruned")]
    assert last_figure < tables[0] < tables[1] < tables[2]


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
    assert _h2(page) == ["Timeline", "Failures"]
    assert "<td>RuntimeError</td><td>3</td><td>#0, #1, #2</td><td>out of memory</td>" in page


def test_study_with_only_pruned_trials_shows_their_fold_values(tmp_path):
    study = _pruned_only_study()
    page = _write(study, tmp_path)
    assert "No completed trials yet" in page
    assert _h2(page) == ["Intermediate values per fold", "Timeline", "Pruned trials"]
    assert "Pruned (last reported value)" in page
    _assert_self_contained(page)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_multi_objective_study_shows_the_pareto_front(tmp_path):
    study = _study("two goals", directions=["minimize", "maximize"])
    study.set_metric_names(["loss", "accuracy"])
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)), n_trials=12)
    page = _write(study, tmp_path)
    assert _h2(page)[0] == "Pareto front"
    assert "Optimisation history" not in page
    answer = page[: page.index('<section id="pareto-front">')]
    front = sorted(study.best_trials, key=lambda t: t.values[0])
    assert f"Pareto front: {len(front)} trial(s)" in answer
    listed = [int(n) for n in re.findall(r"<tr><td>#(\d+)</td>", answer)]
    assert listed == [t.number for t in front[:5]]
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


def _layout(page: str, div_id: str) -> dict:
    """The layout of the figure drawn in the page's `div_id` (the JSON after its traces in plotly's newPlot call)."""
    marker = f'"{div_id}",'
    decoder = json.JSONDecoder()
    rest = page[page.index(marker) + len(marker) :].lstrip()
    _, end = decoder.raw_decode(rest)
    layout, _ = decoder.raw_decode(rest[end:].lstrip(", \n"))
    return layout


def test_parallel_coordinate_axes_keep_names_that_optuna_would_cut(tmp_path):
    long = "a_parameter_name_long_enough_to_need_its_middle_left_out"
    study = _study("long names")
    study.optimize(
        lambda t: (
            t.suggest_float("optimizer.learning_rate", 1e-4, 0.1, log=True)
            + t.suggest_float("optimizer.learning_rate_decay", 0, 1)
            + t.suggest_float(long, 0, 1)
        ),
        n_trials=6,
    )
    page = _write(study, tmp_path)
    axis = _layout(page, "parallel-coordinates-1")["xaxis"]
    shortened = f"{long[:19]}…{long[-20:]}"  # past 40 characters, the start and the end
    assert axis["ticktext"] == ["Value", shortened, "optimizer.learning_rate", "optimizer.learning_rate_decay"]
    assert axis["tickangle"] == -30 and axis["automargin"] is True  # tilted: they would overlap at 800 px


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


def _keras_space(trial: optuna.Trial) -> dict:
    return {
        "mlp": {
            "units": [trial.suggest_categorical("units", [16, 32])],
            "dropout": 0.0,
            "activation": "relu",
            "batch_norm": False,
        },
        "optimizer": {"name": "adam", "learning_rate": trial.suggest_float("learning_rate", 1e-3, 0.1, log=True)},
    }


@pytest.mark.slow
def test_a_keras_studys_report_draws_the_best_trials_learning_curves(tmp_path):
    from tests.stored_study import StoredStudy
    from tests.test_models import build_mlp
    from tlsearch.spec._spec import KerasModel, StudySpec

    spec = StudySpec(
        name="keras-curves",
        dataset="sklearn:digits",
        space=_keras_space,
        model=KerasModel(build_mlp, epochs=3, batch_size=64, early_stopping=2),
        cv=2,
        metric="accuracy",
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    stored = StoredStudy(spec, tmp_path / "home")
    trials = [stored.trial() for _ in range(4)]
    history = trials[0].user_attrs["split1_history"]  # as the worker stored it
    assert set(history) == {"epoch", "loss", "accuracy", "val_loss", "val_accuracy"}
    assert history["epoch"] == list(range(1, trials[0].user_attrs["split1_n_epochs"] + 1))

    page, pngs = _write_with_pngs(stored.study, tmp_path)
    assert _h2(page)[:3] == ["Optimisation history", "Fold scores of the top trials", "Learning curves"]
    best_three = sorted(trials, key=lambda t: (-t.value, t.number))[:3]
    for figure, name in (("learning-curves-1", "loss"), ("learning-curves-2", "accuracy")):
        lines = _figure(page, figure)
        expected = [
            (t.number, h["epoch"], h[key])
            for t in best_three
            for h in (t.user_attrs[f"split{k}_history"] for k in range(2))
            for key in (f"val_{name}", name)
        ]
        assert [(int(line["name"][1:]), line["x"], line["y"]) for line in lines] == expected
        assert [line["line"]["dash"] for line in lines[:2]] == ["solid", "dot"]  # held-out rows, training rows
    assert "solid on the rows early stopping holds out of them" in page
    assert {"learning-curves-1", "learning-curves-2"} <= set(pngs)
    _assert_valid_pngs(pngs)


def test_a_parameter_with_one_value_in_every_trial_gets_no_slice_plot(tmp_path):
    study = _study("constant")
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_float("fixed", 0.5, 0.5), n_trials=4)
    page = _write(study, tmp_path)
    assert "Not drawn, one value in every complete trial: fixed." in page
    assert len([trace for trace in _figure(page, "slices-1") if trace.get("x")]) == 1
    assert '"slices-2"' not in page
