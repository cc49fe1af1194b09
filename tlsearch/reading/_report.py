"""The study report: one self-contained HTML page that opens offline, and optionally a PNG of each figure.

`write_report(study, path)` reads the study's trials once, draws Optuna's standard figures (timeline included)
plus what tlsearch adds (fold-score spread of the top trials, Keras learning curves, pruned trials marked,
intermediate values by fold, failures by error type), and writes a page with plotly.js embedded once; every
figure fits the page width. The page answers first (the best trial, see `_report_page`), then draws, then lists:
the figures come before the long tables, the failed and pruned trials last.
PNGs (`png=True`) are drawn again with Matplotlib, the `png` extra (Agg: no browser, no display needed).
Per-trial results are read from user attributes named like scikit-learn's `cv_results_`: `split{k}_test_score`,
`mean_test_score`, `std_test_score`; a Keras fold's learning curve from `split{k}_history`.
"""

from __future__ import annotations

import html
import importlib.util
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.importance import BaseImportanceEvaluator
from optuna.trial import FrozenTrial, TrialState

from tlsearch._files import write_file
from tlsearch.cv._pruners import describe as describe_prune_reason
from tlsearch.errors import TLSearchError
from tlsearch.reading._report_page import (
    Section,
    fmt,
    fmt_duration,
    html_table,
    is_multi_objective,
    objective_names,
    render_page,
)
from tlsearch.reading._report_png import export_pngs
from tlsearch.reading._report_trials import TrialsView, plotted
from tlsearch.reading._trials_table import fold_scores, number_attr

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["write_report"]

_SPLIT_SCORE = re.compile(r"^split(\d+)_test_score$")
_SPLIT_HISTORY = re.compile(r"^split(\d+)_history$")
_MAX_LEGEND_ENTRIES = 10
_MAX_TABLE_ROWS = 100  # the page's per-trial tables; `tlsearch trials` has every row
# pyplot keeps global state (open figures, rcParams): two reports written at once in one process take turns.


def write_report(study: optuna.Study, path: str | Path = "report.html", *, top_k: int = 10, png: bool = False) -> Path:
    """Write the report of `study` to `path` (HTML, self-contained) and return `path`.

    With `png`, each section that has a figure is also drawn with Matplotlib as `<stem>-<section>.png` beside
    the page (`<stem>-<section>-<n>.png` when it has one figure per objective), and the page links them; PNGs
    of sections with nothing to draw are not written, and stale ones of an earlier report are removed. A PNG
    that cannot be drawn costs one RuntimeWarning naming its section, never the page or the other PNGs.
    If the process has not chosen a Matplotlib backend yet, Agg is chosen; a backend already chosen (notebook,
    MPLBACKEND, a GUI) is kept. Figures are drawn with interactive mode off and closed once saved.
    `top_k` bounds the trials shown in the fold-score spread and in the table of top trials.
    PNGs need Matplotlib: without it, `png=True` raises TLSearchError naming the extra to install.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if png and importlib.util.find_spec("matplotlib") is None:
        raise TLSearchError(
            "PNG export needs Matplotlib: pip install 'tlsearch[png]' (or write the report without PNGs)"
        )
    path = Path(path)
    trials = study.get_trials(deepcopy=False)
    sections = _sections(study, trials, top_k)
    if png:
        export_pngs(sections, path, [slug for slug, _ in _SECTION_TITLES.values()])
    page = render_page(study, trials, sections)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_file(path, page)


# ---------------------------------------------------------------------------------------------- sections


def _sections(study: optuna.Study, trials: list[FrozenTrial], top_k: int) -> list[Section]:
    """Every section of the page. The figures draw `plotted`'s view of the study (all trials up to a bound, a
    sample past it, saying so); the importances, the rankings and the tables read every trial."""
    view = plotted(study, trials, best=top_k)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    builders: list[tuple[Callable[..., Section], tuple[Any, ...]]] = []
    if complete:
        top = _top_trials(study, complete, top_k)
        builders += [
            (_pareto_section, (view,)) if is_multi_objective(study) else (_history_section, (view, complete)),
            (_fold_spread_section, (study, top)),
        ]
        builders += [(_learning_curves_section, (study, top))] if any(_histories(t) for t in top) else []
        builders += [
            (_importances_section, (TrialsView(study, trials, len(trials)), complete)),
            (_parallel_coordinates_section, (view,)),
            (_slice_section, (view,)),
            (_intermediate_values_section, (view,)),
        ]
    elif _has_intermediate_values(trials):  # pruned or running trials may have per-fold values worth seeing
        builders.append((_intermediate_values_section, (view,)))
    builders += [(_timeline_section, (view,))] if trials else []
    builders += [(_top_trials_section, (study, top))] if complete else []
    # The long tables last: a study's first screen is its answer and its figures, not 100 pruned trials.
    builders += [(_failures_section, (trials,))] if any(t.state == TrialState.FAIL for t in trials) else []
    builders += [(_pruned_section, (trials,))] if any(t.state == TrialState.PRUNED for t in trials) else []
    return [_build(builder, *args) for builder, args in builders]


def _build(builder: Callable[..., Section], *args: Any) -> Section:
    try:
        return builder(*args)
    except Exception as error:  # noqa: BLE001 - one figure that cannot be drawn must not cost the whole report
        slug, title = _SECTION_TITLES[builder]
        return Section(slug, title, note=f"Could not be drawn: {type(error).__name__}: {error}")


def _failures_section(trials: list[FrozenTrial]) -> Section:
    """One row per error type: how many trials failed with it, which, and the first one's message."""
    by_type: dict[str, list[FrozenTrial]] = {}
    for trial in trials:
        if trial.state == TrialState.FAIL:
            by_type.setdefault(str(trial.user_attrs.get("error_type", "unknown")), []).append(trial)
    rows = []
    for error_type, failed in sorted(by_type.items(), key=lambda item: (-len(item[1]), item[0])):
        message = str(failed[0].user_attrs.get("error_message", "—")).strip().splitlines() or ["—"]
        numbers = ", ".join(f"#{t.number}" for t in failed[:_MAX_TABLE_ROWS])
        numbers += f" and {len(failed) - _MAX_TABLE_ROWS:,} more" if len(failed) > _MAX_TABLE_ROWS else ""
        rows.append([error_type, str(len(failed)), numbers, message[0][:500]])
    table = html_table(["Error type", "Trials", "Trial numbers", "First message"], rows, "failures")
    return Section(
        *_SECTION_TITLES[_failures_section],
        body_html=table,
        note=f"{sum(len(f) for f in by_type.values())} failed trial(s).",
    )


def _pruned_section(trials: list[FrozenTrial]) -> Section:
    """One row per pruned trial, the latest first (at most _MAX_TABLE_ROWS): after which fold, and why (its
    `prune_reason`)."""
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    rows = []
    for trial in pruned[::-1][:_MAX_TABLE_ROWS]:
        reason = trial.user_attrs.get("prune_reason")
        why = describe_prune_reason(reason) if isinstance(reason, dict) else "—"
        rows.append([f"#{trial.number}", str(trial.user_attrs.get("n_folds_run", "—")), why])
    table = html_table(["Trial", "Folds run", "Why it was pruned"], rows, "pruned")
    note = f"{len(pruned):,} pruned trial(s)."
    if len(pruned) > len(rows):
        note += f" The latest {len(rows)} are listed; tlsearch trials NAME --format csv lists them all."
    return Section(*_SECTION_TITLES[_pruned_section], body_html=table, note=note)


def _timeline_section(view: TrialsView) -> Section:
    figure = optuna.visualization.plot_timeline(view)
    return Section(
        *_SECTION_TITLES[_timeline_section],
        figures=[figure],
        drawings=[lambda: _mpl().plot_timeline(view)],
        note=view.sample_note(),
    )


def _history_section(view: TrialsView, complete: list[FrozenTrial]) -> Section:
    """Optuna's optimisation history, drawn here: Optuna's takes trial numbers for list positions, which a
    sampled view breaks. The drawn trials' values, and the best value so far over every complete trial."""
    import plotly.graph_objects as go

    name = objective_names(view)[0]
    drawn = view.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    steps = _best_so_far(view, complete)
    figure = go.Figure(
        [
            go.Scatter(x=[t.number for t in drawn], y=[t.value for t in drawn], mode="markers", name=name),
            go.Scatter(
                x=[x for x, _ in steps], y=[y for _, y in steps], mode="lines", line_shape="hv", name="Best Value"
            ),
        ],
        layout={"title": "Optimization History Plot", "xaxis_title": "Trial", "yaxis_title": name},
    )
    _mark_pruned(figure, [(t.number, _last_value(t)) for t in _pruned(view.get_trials(deepcopy=False))])
    return Section(
        *_SECTION_TITLES[_history_section],
        figures=[figure],
        drawings=[lambda: _draw_history(drawn, steps, name)],
        note=view.sample_note(),
    )


def _best_so_far(study: optuna.Study, complete: list[FrozenTrial]) -> list[tuple[int, float]]:
    """(trial number, best value so far) at each complete trial that improved it, and at the last one."""
    sign = 1 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1
    steps: list[tuple[int, float]] = []
    for trial in complete:
        if not steps or sign * trial.value < sign * steps[-1][1]:
            steps.append((trial.number, trial.value))
    if complete and steps[-1][0] != complete[-1].number:
        steps.append((complete[-1].number, steps[-1][1]))
    return steps


def _draw_history(drawn: list[FrozenTrial], steps: list[tuple[int, float]], name: str) -> Any:
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    ax.scatter([t.number for t in drawn], [t.value for t in drawn], s=12, label=name)
    ax.step([x for x, _ in steps], [y for _, y in steps], where="post", color="#d62728", label="Best Value")
    ax.set_title("Optimization History Plot")
    ax.set_xlabel("Trial")
    ax.set_ylabel(name)
    ax.legend()
    return ax


def _pruned(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in trials if t.state == TrialState.PRUNED and t.intermediate_values]


def _last_value(trial: FrozenTrial) -> float:
    return trial.intermediate_values[max(trial.intermediate_values)]


def _mark_pruned(figure: go.Figure, points: list[tuple[float, float]], label: str = "trial") -> None:
    """Add the pruned trials to `figure` as red crosses at (x, y): their last reported value."""
    import plotly.graph_objects as go

    if not points:
        return
    xs, ys = zip(*points)
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers",
            name="Pruned (last reported value)",
            marker={"symbol": "x", "size": 9, "color": "#d62728"},
            hovertemplate=label + " %{x}: pruned at %{y}<extra></extra>",
        )
    )


def _pareto_section(view: TrialsView) -> Section:
    slug, title = _SECTION_TITLES[_pareto_section]
    if len(view.directions) > 3:
        return Section(slug, title, note="Drawn for two or three objectives only.")
    figure = optuna.visualization.plot_pareto_front(view)
    return Section(
        slug, title, figures=[figure], drawings=[lambda: _mpl().plot_pareto_front(view)], note=view.sample_note()
    )


_IMPORTANCES_NOTE = (
    "PED-ANOVA (Optuna's PedAnovaImportanceEvaluator, as optuna-dashboard computes them) on all {n:,} complete "
    "trials: how much each parameter matters for reaching the best 10% of them. "
    "optuna.importance.get_param_importances defaults to fANOVA, the share of the value's variance each parameter "
    "explains, which can rank them otherwise."
)


def _importances_section(study: TrialsView, complete: list[FrozenTrial]) -> Section:
    slug, title = _SECTION_TITLES[_importances_section]
    if len(complete) < 2 or not _common_params(complete):
        return Section(slug, title, note="Needs at least 2 complete trials sharing at least one parameter.")
    evaluator = _RememberedImportances(optuna.importance.PedAnovaImportanceEvaluator())
    # One figure per objective (each objective's own ranking of the parameters), for the page and the PNGs.
    figures = [
        optuna.visualization.plot_param_importances(study, evaluator=evaluator, target=target, target_name=name)
        for target, name in _importance_targets(study)
    ]
    drawings = [
        lambda target=target, name=name: _mpl().plot_param_importances(
            study, evaluator=evaluator, target=target, target_name=name
        )
        for target, name in _importance_targets(study)
    ]
    return Section(slug, title, figures=figures, drawings=drawings, note=_IMPORTANCES_NOTE.format(n=len(complete)))


def _parallel_coordinates_section(view: TrialsView) -> Section:
    slug, title = _SECTION_TITLES[_parallel_coordinates_section]
    if not any(t.params for t in view.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))):
        return Section(slug, title, note="The complete trials have no parameters.")
    figures = [
        _full_axis_names(
            optuna.visualization.plot_parallel_coordinate(view, target=target, target_name=name), view, name
        )
        for target, name in _targets(view)
    ]
    drawings = [
        lambda target=target, name=name: _mpl().plot_parallel_coordinate(view, target=target, target_name=name)
        for target, name in _targets(view)
    ]
    return Section(slug, title, figures=figures, drawings=drawings, note=view.sample_note())


_AXIS_NAME_CHARS = 40


def _full_axis_names(figure: go.Figure, view: TrialsView, target_name: str) -> go.Figure:
    """Give each axis of Optuna's parallel-coordinate figure its full name back, and room to show it.

    Optuna cuts names to 17 characters ("optimizer.learnin..."), which can make two axes read the same; past
    _AXIS_NAME_CHARS a name keeps its start and its end. The names are tilted when they would overlap at the
    width of an 800 px page (the left margin then grows to hold the first one)."""
    labels = list(figure.layout.xaxis.ticktext or ())
    params = sorted({p for t in view.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) for p in t.params})
    names = [target_name, *params]  # Optuna's axes: the objective, then the parameters by name
    if len(labels) != len(names) or any(
        label != name and not (label.endswith("...") and name.startswith(label[:-3]))
        for label, name in zip(labels, names)
    ):
        return figure  # not the axes expected: leave Optuna's
    half = _AXIS_NAME_CHARS // 2
    names = [name if len(name) <= _AXIS_NAME_CHARS else f"{name[: half - 1]}…{name[-half:]}" for name in names]
    tilted = max(map(len, names)) * 7 > 650 / max(len(names) - 0.6, 1)  # ~7 px a character, ~650 px of plot
    figure.update_xaxes(ticktext=names, automargin=True)
    if tilted:  # else Plotly's own "auto" angle, which tilts them only if they collide at the width drawn
        figure.update_xaxes(tickangle=-30)
        figure.update_layout(margin={"l": max(80, 6 * len(names[0]))})
    return figure


def _slice_section(view: TrialsView) -> Section:
    slug, title = _SECTION_TITLES[_slice_section]
    complete = view.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not any(t.params for t in complete):
        return Section(slug, title, note="The complete trials have no parameters.")
    # A parameter every complete trial gives the same value has nothing to show: a slice of one point.
    values: dict[str, set[str]] = {}
    for trial in complete:
        for param, value in trial.params.items():
            values.setdefault(param, set()).add(repr(value))
    names = sorted(param for param, seen in values.items() if len(seen) > 1)
    constant = sorted(set(values) - set(names))
    notes = [view.sample_note()] if view.sampled else []
    notes += [f"Not drawn, one value in every complete trial: {', '.join(constant)}."] if constant else []
    if not names:
        return Section(slug, title, note=" ".join(notes))
    # One small figure per parameter, laid out in a grid: Optuna's single figure grows 300 px per parameter.
    figures = [
        optuna.visualization.plot_slice(view, params=[param], target=target, target_name=name).update_layout(
            title=f"{param}" + (f" ({name})" if is_multi_objective(view) else ""),
            width=None,
            height=360,
            showlegend=False,
        )
        for target, name in _targets(view)
        for param in names
    ]
    drawings = [
        lambda target=target, name=name: _mpl().plot_slice(view, params=names, target=target, target_name=name)
        for target, name in _targets(view)
    ]
    return Section(slug, title, figures=figures, drawings=drawings, grid=True, note=" ".join(notes) or None)


def _intermediate_values_section(view: TrialsView) -> Section:
    slug, title = _SECTION_TITLES[_intermediate_values_section]
    trials = view.get_trials(deepcopy=False)
    if not _has_intermediate_values(trials):
        return Section(slug, title, note="No trial reported intermediate values.")
    figure = optuna.visualization.plot_intermediate_values(view)
    figure.update_layout(title=_INTERMEDIATE_TITLE, xaxis_title="Fold", yaxis_title="Intermediate value")
    figure.update_xaxes(tick0=0, dtick=1)
    _mark_pruned(figure, [(max(t.intermediate_values), _last_value(t)) for t in _pruned(trials)], label="fold")
    return Section(
        slug, title, figures=[figure], drawings=[lambda: _draw_intermediate_values(view)], note=view.sample_note()
    )


_INTERMEDIATE_TITLE = "Score after each fold (one line per trial)"


def _draw_intermediate_values(study: optuna.Study) -> Any:
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator

    ax = _mpl().plot_intermediate_values(study)
    ax.set_title(_INTERMEDIATE_TITLE)
    ax.set_xlabel("Fold")
    ax.set_ylabel("Intermediate value")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    lines = ax.get_lines()
    legend = ax.get_legend()
    if legend is not None and len(lines) > _MAX_LEGEND_ENTRIES:
        legend.remove()  # one entry per trial: past a few, a PNG legend hides the plot and says nothing
    if len(lines) > 20:  # Optuna's 20 colours are used up: the rest would share one, so shade by trial order
        shades = colormaps["Blues"]
        for i, line in enumerate(lines):
            line.set_color(shades(0.3 + 0.7 * i / (len(lines) - 1)))
    return ax


_CURVE_TRIALS = 3


def _histories(trial: FrozenTrial) -> dict[int, dict[str, list]]:
    """The trial's per-fold Keras histories (`split{k}_history`) by fold index: "epoch" and each series of as
    many values, the others dropped."""
    histories = {}
    for key, value in trial.user_attrs.items():
        if (m := _SPLIT_HISTORY.match(key)) and isinstance(value, dict) and isinstance(value.get("epoch"), list):
            epochs = value["epoch"]
            series = {n: v for n, v in value.items() if n != "epoch" and isinstance(v, list) and len(v) == len(epochs)}
            if epochs and series:
                histories[int(m.group(1))] = {"epoch": epochs, **series}
    return dict(sorted(histories.items()))


def _learning_curves_section(study: optuna.Study, top: list[FrozenTrial]) -> Section:
    """The best few trials' Keras histories, one line per fold: loss, and the study's first metric when Keras
    logged it; solid on the rows early stopping holds out of the training rows, dotted on the training rows."""
    slug, title = _SECTION_TITLES[_learning_curves_section]
    drawn = [(t, h) for t in top if (h := _histories(t))][:_CURVE_TRIALS]
    metric = objective_names(study)[0]
    logged = {name for _, folds in drawn for history in folds.values() for name in history}
    names = ["loss"] + ([metric] if metric != "loss" and (metric in logged or f"val_{metric}" in logged) else [])
    held_out = any(f"val_{name}" in logged for name in names)
    rows = (
        ", solid on the rows early stopping holds out of them" if held_out else " (no early stopping: no rows held out)"
    )
    note = (
        f"{' and '.join(names).capitalize()} as Keras logged them each epoch, for the {len(drawn)} best trial(s), one "
        f"line per fold: dotted on the fold's training rows{rows}. The fold's validation rows are scored once, after "
        "training: Fold scores above."
    )
    return Section(
        slug,
        title,
        figures=[_curve_figure(drawn, name) for name in names],
        drawings=[lambda name=name: _draw_learning_curves(drawn, name) for name in names],
        grid=len(names) > 1,
        note=note,
    )


def _curve_lines(drawn: list[tuple[FrozenTrial, dict[int, dict[str, list]]]], name: str):
    """(trial index, trial, fold, epochs, values, held out?) for each line of `name`'s learning-curve figure."""
    for i, (trial, folds) in enumerate(drawn):
        for fold, history in folds.items():
            for key, held_out in ((f"val_{name}", True), (name, False)):
                if key in history:
                    yield i, trial, fold, history["epoch"], history[key], held_out


def _curve_figure(drawn: list[tuple[FrozenTrial, dict[int, dict[str, list]]]], name: str) -> go.Figure:
    import plotly.colors
    import plotly.graph_objects as go

    colors = plotly.colors.qualitative.Plotly
    figure = go.Figure()
    in_legend = set()
    for i, trial, fold, epochs, values, held_out in _curve_lines(drawn, name):
        rows = "held-out rows" if held_out else "training rows"
        figure.add_trace(
            go.Scatter(
                x=epochs,
                y=values,
                mode="lines",
                line={"color": colors[i % len(colors)], "dash": "solid" if held_out else "dot"},
                name=f"#{trial.number}",
                legendgroup=f"#{trial.number}",
                showlegend=trial.number not in in_legend,
                hovertemplate=f"trial {trial.number}, fold {fold}, {rows}, epoch %{{x}}: %{{y}}<extra></extra>",
            )
        )
        in_legend.add(trial.number)
    figure.update_layout(title=f"{name} per epoch", xaxis_title="Epoch", yaxis_title=name, height=420)
    return figure


def _draw_learning_curves(drawn: list[tuple[FrozenTrial, dict[int, dict[str, list]]]], name: str) -> Any:
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    in_legend = set()
    for i, trial, _fold, epochs, values, held_out in _curve_lines(drawn, name):
        label = None if trial.number in in_legend else f"#{trial.number}"
        values = [float("nan") if v is None else v for v in values]
        ax.plot(epochs, values, color=f"C{i % 10}", linestyle="-" if held_out else ":", label=label)
        in_legend.add(trial.number)
    ax.set_title(f"{name} per epoch")
    ax.set_xlabel("Epoch")
    ax.set_ylabel(name)
    ax.legend()
    return ax


def _fold_spread_section(study: optuna.Study, top: list[FrozenTrial]) -> Section:
    import plotly.graph_objects as go

    slug, title = _SECTION_TITLES[_fold_spread_section]
    with_folds = [(t, fold_scores(t)) for t in top]
    with_folds = [(t, scores) for t, scores in with_folds if scores]
    if not with_folds:
        return Section(slug, title, note="The top trials have no per-fold scores (split{k}_test_score).")
    figure = go.Figure()
    for trial, scores in with_folds:
        folds = sorted(scores)
        figure.add_trace(
            go.Box(
                y=[scores[k] for k in folds],
                name=f"#{trial.number}",
                boxpoints="all",
                pointpos=0,
                jitter=0.3,
                boxmean=True,
                text=[f"fold {k}" for k in folds],
                hovertemplate="trial " + str(trial.number) + ", %{text}: %{y}<extra></extra>",
            )
        )
    figure.update_layout(
        title=f"Test score of each fold. {_ranking(study)}",
        xaxis_title="Trial",
        yaxis_title="Test score",
        showlegend=False,
    )
    return Section(slug, title, figures=[figure], drawings=[lambda: _draw_fold_spread(study, with_folds)])


def _draw_fold_spread(study: optuna.Study, with_folds: list[tuple[FrozenTrial, dict[int, float]]]) -> Any:
    """Box (mean as a triangle) and every fold's score as a point, one column per trial, best first."""
    import matplotlib.pyplot as plt
    import numpy as np

    columns = [[scores[k] for k in sorted(scores)] for _, scores in with_folds]
    positions = range(1, len(columns) + 1)
    _, ax = plt.subplots()
    ax.boxplot(columns, positions=positions, widths=0.5, showmeans=True, showfliers=False)
    for x, scores in zip(positions, columns):
        ax.scatter(x + np.linspace(-0.15, 0.15, len(scores)), scores, s=16, alpha=0.7, zorder=3)
    ax.set_xticks(list(positions), [f"#{trial.number}" for trial, _ in with_folds])
    ax.set_title(f"Test score of each fold. {_ranking(study)}")
    ax.set_xlabel("Trial")
    ax.set_ylabel("Test score")
    return ax


def _top_trials_section(study: optuna.Study, top: list[FrozenTrial]) -> Section:
    slug, title = _SECTION_TITLES[_top_trials_section]
    n_folds = max((max(fold_scores(t), default=-1) + 1 for t in top), default=0)
    value_names = objective_names(study)
    head = ["Trial", *value_names, "mean ± std", *(f"fold {k}" for k in range(n_folds)), "Params", "Duration"]
    rows = []
    for trial in top:
        scores = fold_scores(trial)
        mean, std = number_attr(trial, "mean_test_score"), number_attr(trial, "std_test_score")
        spread = "—" if mean is None else fmt(mean) + ("" if std is None else f" ± {fmt(std)}")
        params = "<br>".join(f"{html.escape(str(k))} = {html.escape(fmt(v))}" for k, v in trial.params.items())
        cells = [
            html.escape(f"#{trial.number}"),
            *(html.escape(fmt(v)) for v in trial.values),
            html.escape(spread),
            *(html.escape(fmt(scores.get(k))) for k in range(n_folds)),
            params or "—",
            html.escape(fmt_duration(trial.duration)),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    table = (
        '<table class="trials"><thead><tr>'
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )
    return Section(slug, title, note=f"{_ranking(study)} Showing {len(top)}.", body_html=table)


_SECTION_TITLES: dict[Callable[..., Section], tuple[str, str]] = {  # in the page's order
    _history_section: ("history", "Optimisation history"),
    _pareto_section: ("pareto-front", "Pareto front"),
    _fold_spread_section: ("fold-spread", "Fold scores of the top trials"),
    _learning_curves_section: ("learning-curves", "Learning curves"),
    _importances_section: ("importances", "Parameter importances"),
    _parallel_coordinates_section: ("parallel-coordinates", "Parallel coordinates"),
    _slice_section: ("slices", "Slice plots"),
    _intermediate_values_section: ("intermediate-values", "Intermediate values per fold"),
    _timeline_section: ("timeline", "Timeline"),
    _top_trials_section: ("top-trials", "Top trials"),
    _failures_section: ("failures", "Failures"),
    _pruned_section: ("pruned", "Pruned trials"),
}


# ---------------------------------------------------------------------------------------------- trials


def _targets(study: optuna.Study) -> list[tuple[Callable[[FrozenTrial], float] | None, str]]:
    """What the per-parameter figures plot: the value, or each objective in turn for multi-objective studies."""
    names = objective_names(study)
    if not is_multi_objective(study):
        return [(None, names[0])]
    return [(lambda t, i=i: t.values[i], name) for i, name in enumerate(names)]


def _importance_targets(study: optuna.Study) -> list[tuple[Callable[[FrozenTrial], float] | None, str]]:
    """What PED-ANOVA ranks the parameters by, per objective. It counts low targets as good: a maximised
    objective is negated, as optuna-dashboard does, so both show the same importances."""
    names = objective_names(study)
    if not is_multi_objective(study):
        return [(None, names[0])]
    signs = [-1.0 if d == optuna.study.StudyDirection.MAXIMIZE else 1.0 for d in study.directions]
    return [(lambda t, i=i, sign=sign: sign * t.values[i], name) for i, (sign, name) in enumerate(zip(signs, names))]


def _top_trials(study: optuna.Study, complete: list[FrozenTrial], top_k: int) -> list[FrozenTrial]:
    """Best first: by value for one objective; the Pareto front, ordered by the first objective, for several."""
    candidates = study.best_trials if is_multi_objective(study) else complete
    sign = 1 if study.directions[0] == optuna.study.StudyDirection.MINIMIZE else -1
    return sorted(candidates, key=lambda t: (sign * t.values[0], t.number))[:top_k]


def _ranking(study: optuna.Study) -> str:
    if is_multi_objective(study):
        return f"Pareto-optimal trials, ordered by {objective_names(study)[0]}."
    return "Complete trials, best first."


def _common_params(trials: list[FrozenTrial]) -> set[str]:
    return set.intersection(*(set(t.params) for t in trials)) if trials else set()


def _has_intermediate_values(trials: list[FrozenTrial]) -> bool:
    return any(t.intermediate_values for t in trials)


class _RememberedImportances(BaseImportanceEvaluator):
    """Computes each importance once: the HTML and the PNG figure ask for the same."""

    def __init__(self, evaluator: BaseImportanceEvaluator) -> None:
        self._evaluator = evaluator
        self._known: dict[tuple[Any, ...], dict[str, float]] = {}

    def evaluate(
        self,
        study: optuna.Study,
        params: list[str] | None = None,
        *,
        target: Callable[[FrozenTrial], float] | None = None,
    ) -> dict[str, float]:
        # Keyed by what the target yields, not by the target: Optuna makes a new lambda per objective and call.
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        key = (
            None if params is None else tuple(params),
            tuple((t.number, tuple(t.values) if target is None else target(t)) for t in complete),
        )
        if key not in self._known:
            with warnings.catch_warnings():
                # PED-ANOVA's notes (a target counts low as good, few trials give equal importances) are for
                # whoever calls it; the report's note says what these importances are.
                warnings.simplefilter("ignore")
                self._known[key] = self._evaluator.evaluate(study, params, target=target)
        return dict(self._known[key])


# ---------------------------------------------------------------------------------------------- output


def _mpl() -> Any:
    import optuna.visualization.matplotlib

    return optuna.visualization.matplotlib
