"""The study report: one self-contained HTML page that opens offline, and a PNG of each figure next to it.

`write_report(study, path)` reads the study's trials once, draws Optuna's standard figures plus the per-fold
views tlsearch adds (intermediate values by fold, fold-score spread of the top trials), and writes a page with
plotly.js embedded once. Per-trial results are read from user attributes named like scikit-learn's
`cv_results_`: `split{k}_test_score`, `mean_test_score`, `std_test_score`.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["write_report"]

_SPLIT_SCORE = re.compile(r"^split(\d+)_test_score$")
_STATE_WORDS = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed",
                TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}
_PNG_SIZE = (1100, 600)


@dataclass
class _Section:
    """One titled part of the page: figures, and/or a note (plain text), and/or trusted HTML built here."""

    slug: str
    title: str
    figures: list[go.Figure] = field(default_factory=list)
    note: str | None = None
    body_html: str = ""
    pngs: list[Path] = field(default_factory=list)


def write_report(study: optuna.Study, path: str | Path = "report.html", *, top_k: int = 10, png: bool = True) -> Path:
    """Write the report of `study` to `path` (HTML, self-contained) and return `path`.

    With `png`, each figure is also saved as `<stem>-<section>.png` beside the page when image export works
    (kaleido with a Chrome/Chromium); otherwise PNGs are skipped with one warning and the page is still written.
    `top_k` bounds the trials shown in the fold-score spread and in the table of top trials.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    path = Path(path)
    trials = study.get_trials(deepcopy=False)
    sections = _sections(study, trials, top_k)
    if png:
        _export_pngs(sections, path)
    page = _render_page(study, trials, sections)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(path)
    return path


# ---------------------------------------------------------------------------------------------- sections


def _sections(study: optuna.Study, trials: list[FrozenTrial], top_k: int) -> list[_Section]:
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if not complete:
        # Pruned or running trials may already have per-fold intermediate values worth seeing.
        return [_build(_intermediate_values_section, study, trials)] if _has_intermediate_values(trials) else []
    top = _top_trials(study, complete, top_k)
    builders: list[tuple[Callable[..., _Section], tuple[Any, ...]]] = [
        (_pareto_section if _is_multi_objective(study) else _history_section, (study,)),
        (_importances_section, (study, complete)),
        (_parallel_coordinates_section, (study, complete)),
        (_slice_section, (study, complete)),
        (_intermediate_values_section, (study, trials)),
        (_fold_spread_section, (study, top)),
        (_top_trials_section, (study, top)),
    ]
    return [_build(builder, *args) for builder, args in builders]


def _build(builder: Callable[..., _Section], *args: Any) -> _Section:
    try:
        return builder(*args)
    except Exception as error:  # noqa: BLE001 - one figure that cannot be drawn must not cost the whole report
        slug, title = _SECTION_TITLES[builder]
        return _Section(slug, title, note=f"Could not be drawn: {type(error).__name__}: {error}")


def _history_section(study: optuna.Study) -> _Section:
    figure = optuna.visualization.plot_optimization_history(study)
    return _Section(*_SECTION_TITLES[_history_section], figures=[figure])


def _pareto_section(study: optuna.Study) -> _Section:
    slug, title = _SECTION_TITLES[_pareto_section]
    if len(study.directions) > 3:
        return _Section(slug, title, note="Drawn for two or three objectives only.")
    figure = optuna.visualization.plot_pareto_front(study)
    return _Section(slug, title, figures=[figure])


def _importances_section(study: optuna.Study, complete: list[FrozenTrial]) -> _Section:
    slug, title = _SECTION_TITLES[_importances_section]
    if len(complete) < 2 or not _common_params(complete):
        return _Section(slug, title, note="Needs at least 2 complete trials sharing at least one parameter.")
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    figure = optuna.visualization.plot_param_importances(study, evaluator=evaluator)
    return _Section(slug, title, figures=[figure])


def _parallel_coordinates_section(study: optuna.Study, complete: list[FrozenTrial]) -> _Section:
    slug, title = _SECTION_TITLES[_parallel_coordinates_section]
    if not any(t.params for t in complete):
        return _Section(slug, title, note="The complete trials have no parameters.")
    figures = [optuna.visualization.plot_parallel_coordinate(study, target=target, target_name=name)
               for target, name in _targets(study)]
    return _Section(slug, title, figures=figures)


def _slice_section(study: optuna.Study, complete: list[FrozenTrial]) -> _Section:
    slug, title = _SECTION_TITLES[_slice_section]
    if not any(t.params for t in complete):
        return _Section(slug, title, note="The complete trials have no parameters.")
    figures = [optuna.visualization.plot_slice(study, target=target, target_name=name)
               for target, name in _targets(study)]
    return _Section(slug, title, figures=figures)


def _intermediate_values_section(study: optuna.Study, trials: list[FrozenTrial]) -> _Section:
    slug, title = _SECTION_TITLES[_intermediate_values_section]
    if not _has_intermediate_values(trials):
        return _Section(slug, title, note="No trial reported intermediate values.")
    figure = optuna.visualization.plot_intermediate_values(study)
    figure.update_layout(title="Score after each fold (one line per trial)", xaxis_title="Fold",
                         yaxis_title="Intermediate value")
    figure.update_xaxes(tick0=0, dtick=1)
    return _Section(slug, title, figures=[figure])


def _fold_spread_section(study: optuna.Study, top: list[FrozenTrial]) -> _Section:
    import plotly.graph_objects as go

    slug, title = _SECTION_TITLES[_fold_spread_section]
    with_folds = [(t, _fold_scores(t)) for t in top]
    with_folds = [(t, scores) for t, scores in with_folds if scores]
    if not with_folds:
        return _Section(slug, title, note="The top trials have no per-fold scores (split{k}_test_score).")
    figure = go.Figure()
    for trial, scores in with_folds:
        folds = sorted(scores)
        figure.add_trace(go.Box(
            y=[scores[k] for k in folds], name=f"#{trial.number}", boxpoints="all", pointpos=0, jitter=0.3,
            boxmean=True, text=[f"fold {k}" for k in folds],
            hovertemplate="trial " + str(trial.number) + ", %{text}: %{y}<extra></extra>",
        ))
    figure.update_layout(title=f"Test score of each fold. {_ranking(study)}",
                         xaxis_title="Trial", yaxis_title="Test score", showlegend=False)
    return _Section(slug, title, figures=[figure])


def _top_trials_section(study: optuna.Study, top: list[FrozenTrial]) -> _Section:
    slug, title = _SECTION_TITLES[_top_trials_section]
    n_folds = max((max(_fold_scores(t), default=-1) + 1 for t in top), default=0)
    value_names = _objective_names(study)
    head = ["Trial", *value_names, "mean ± std", *(f"fold {k}" for k in range(n_folds)), "Params", "Duration"]
    rows = []
    for trial in top:
        scores = _fold_scores(trial)
        mean, std = trial.user_attrs.get("mean_test_score"), trial.user_attrs.get("std_test_score")
        spread = "—" if mean is None else _fmt(mean) + ("" if std is None else f" ± {_fmt(std)}")
        params = "<br>".join(f"{html.escape(str(k))} = {html.escape(_fmt(v))}" for k, v in trial.params.items())
        cells = [html.escape(f"#{trial.number}"), *(html.escape(_fmt(v)) for v in trial.values),
                 html.escape(spread), *(html.escape(_fmt(scores.get(k))) for k in range(n_folds)),
                 params or "—", html.escape(_fmt_duration(trial.duration))]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    table = ('<table class="trials"><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
             + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
    return _Section(slug, title, note=f"{_ranking(study)} Showing {len(top)}.", body_html=table)


_SECTION_TITLES: dict[Callable[..., _Section], tuple[str, str]] = {
    _history_section: ("history", "Optimisation history"),
    _pareto_section: ("pareto-front", "Pareto front"),
    _importances_section: ("importances", "Parameter importances"),
    _parallel_coordinates_section: ("parallel-coordinates", "Parallel coordinates"),
    _slice_section: ("slices", "Slice plots"),
    _intermediate_values_section: ("intermediate-values", "Intermediate values per fold"),
    _fold_spread_section: ("fold-spread", "Fold scores of the top trials"),
    _top_trials_section: ("top-trials", "Top trials"),
}


# ---------------------------------------------------------------------------------------------- trials


def _is_multi_objective(study: optuna.Study) -> bool:
    return len(study.directions) > 1


def _objective_names(study: optuna.Study) -> list[str]:
    names = study.metric_names
    if names:
        return list(names)
    return ["Value"] if not _is_multi_objective(study) else [f"Objective {i}" for i in range(len(study.directions))]


def _targets(study: optuna.Study) -> list[tuple[Callable[[FrozenTrial], float] | None, str]]:
    """What the per-parameter figures plot: the value, or each objective in turn for multi-objective studies."""
    names = _objective_names(study)
    if not _is_multi_objective(study):
        return [(None, names[0])]
    return [(lambda t, i=i: t.values[i], name) for i, name in enumerate(names)]


def _top_trials(study: optuna.Study, complete: list[FrozenTrial], top_k: int) -> list[FrozenTrial]:
    """Best first: by value for one objective; the Pareto front, ordered by the first objective, for several."""
    candidates = study.best_trials if _is_multi_objective(study) else complete
    sign = 1 if study.directions[0] == optuna.study.StudyDirection.MINIMIZE else -1
    return sorted(candidates, key=lambda t: (sign * t.values[0], t.number))[:top_k]


def _ranking(study: optuna.Study) -> str:
    if _is_multi_objective(study):
        return f"Pareto-optimal trials, ordered by {_objective_names(study)[0]}."
    return "Complete trials, best first."


def _fold_scores(trial: FrozenTrial) -> dict[int, float]:
    scores = {}
    for key, value in trial.user_attrs.items():
        match = _SPLIT_SCORE.match(key)
        if match and isinstance(value, (int, float)):
            scores[int(match.group(1))] = value
    return scores


def _common_params(trials: list[FrozenTrial]) -> set[str]:
    return set.intersection(*(set(t.params) for t in trials)) if trials else set()


def _has_intermediate_values(trials: list[FrozenTrial]) -> bool:
    return any(t.intermediate_values for t in trials)


def _study_attr(study: optuna.Study, key: str) -> Any:
    """A study user attribute, else the system attribute of that name (Optuna 5 exposes those only on storage)."""
    value = study.user_attrs.get(key)
    if value is None:
        value = study._storage.get_study_system_attrs(study._study_id).get(key)
    return value


# ---------------------------------------------------------------------------------------------- output


def _export_pngs(sections: list[_Section], page: Path) -> None:
    """Save each figure as a PNG beside the page; on any export failure, warn once and keep none linked."""
    jobs = []
    for section in sections:
        for i, figure in enumerate(section.figures):
            suffix = f"-{i + 1}" if len(section.figures) > 1 else ""
            jobs.append((section, figure, page.with_name(f"{page.stem}-{section.slug}{suffix}.png")))
    if not jobs:
        return
    try:
        import plotly.io as pio

        page.parent.mkdir(parents=True, exist_ok=True)
        pio.write_images([figure for _, figure, _ in jobs], [file for _, _, file in jobs],
                         width=[figure.layout.width or _PNG_SIZE[0] for _, figure, _ in jobs],
                         height=[figure.layout.height or _PNG_SIZE[1] for _, figure, _ in jobs])
    except Exception as error:  # noqa: BLE001 - kaleido missing, no Chrome, a crashed browser: all just mean no PNGs
        reason = next((line.strip(" ,") for line in str(error).splitlines() if line.strip()), type(error).__name__)
        warnings.warn(f"PNG export skipped (the HTML report is complete): {reason}", RuntimeWarning, stacklevel=3)
        return
    for section, _, file in jobs:
        section.pngs.append(file)


def _render_page(study: optuna.Study, trials: list[FrozenTrial], sections: list[_Section]) -> str:
    name = html.escape(study.study_name)
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>Study {name} — tlsearch report</title><style>{_CSS}</style></head><body>",
             f"<h1>Study {name}</h1>", _render_header(study, trials)]
    if not trials:
        parts.append('<p class="empty">No trials yet.</p>')
    elif not any(t.state == TrialState.COMPLETE for t in trials):
        parts.append('<p class="empty">No completed trials yet: nothing to rank or plot against a value.</p>')
    if len(sections) > 1:
        links = "".join(f'<li><a href="#{s.slug}">{html.escape(s.title)}</a></li>' for s in sections)
        parts.append(f"<nav><ul>{links}</ul></nav>")
    plotlyjs_included = False
    for section in sections:
        parts.append(f'<section id="{section.slug}"><h2>{html.escape(section.title)}</h2>')
        if section.note:
            parts.append(f'<p class="note">{html.escape(section.note)}</p>')
        for i, figure in enumerate(section.figures):
            parts.append(figure.to_html(
                full_html=False, include_plotlyjs=not plotlyjs_included, div_id=f"{section.slug}-{i + 1}",
                default_height=f"{figure.layout.height or 560}px", config={"displaylogo": False, "responsive": True},
            ))
            plotlyjs_included = True
        if section.pngs:
            links = " ".join(f'<a href="{html.escape(p.name)}">{html.escape(p.name)}</a>' for p in section.pngs)
            parts.append(f'<p class="png">PNG: {links}</p>')
        parts.append(section.body_html + "</section>")
    parts.append(f"<footer>Written by tlsearch on {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}.</footer>"
                 "</body></html>\n")
    return "\n".join(parts)


def _render_header(study: optuna.Study, trials: list[FrozenTrial]) -> str:
    names = _objective_names(study)
    directions = ", ".join(f"{n} ({d.name.lower()})" for n, d in zip(names, study.directions))
    counts = Counter(t.state for t in trials)
    states = ", ".join(f"{counts[s]} {word}" for s, word in _STATE_WORDS.items() if counts[s]) or "none"
    rows = [("Directions", directions), ("Trials", f"{len(trials)} ({states})"), ("Best", _best_summary(study, trials))]
    for label, key in (("Dataset hash", "dataset_hash"), ("Fold plan hash", "fold_plan_hash")):
        value = _study_attr(study, key)
        rows.append((label, "—" if value is None else str(value)))
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="header">{cells}</table>'


def _best_summary(study: optuna.Study, trials: list[FrozenTrial]) -> str:
    if not any(t.state == TrialState.COMPLETE for t in trials):
        return "—"
    if _is_multi_objective(study):
        return f"{len(study.best_trials)} Pareto-optimal trials"
    best = study.best_trial
    return f"{_fmt(best.value)} (trial #{best.number})"


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return str(value)


def _fmt_duration(duration: dt.timedelta | None) -> str:
    if duration is None:
        return "—"
    seconds = duration.total_seconds()
    if seconds < 60:
        return f"{seconds:.3g} s"
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { margin-bottom: .3em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; } th, td { padding: .3em .7em; text-align: left; vertical-align: top; }
table.header th { color: #555; font-weight: normal; } table.header td { font-family: ui-monospace, monospace; }
table.trials { font-size: .9em; } table.trials th { background: #f3f3f3; }
table.trials td, table.trials th { border: 1px solid #ddd; } table.trials td { font-variant-numeric: tabular-nums; }
nav ul { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .4em 1.2em; }
p.empty { font-size: 1.2em; } p.note, p.png, footer { color: #666; } footer { margin-top: 3em; font-size: .8em; }
"""
