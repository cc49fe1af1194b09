"""The report's page: its sections, rendered into one self-contained HTML page (plotly.js embedded once).

`report.py` decides what each section shows; this module knows how a section looks and what the page's header
says about the study: first the answer (the best trial, its parameters, its CV mean ± std and fold scores; the
Pareto front for several objectives), then the study's facts.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.reading._pick import pick
from tlsearch.reading._trials_table import fold_scores, number_attr

if TYPE_CHECKING:
    import plotly.graph_objects as go

_STATE_WORDS = {
    TrialState.COMPLETE: "complete",
    TrialState.PRUNED: "pruned",
    TrialState.FAIL: "failed",
    TrialState.RUNNING: "running",
    TrialState.WAITING: "waiting",
}


@dataclass
class Section:
    """One titled part of the page: figures, and/or a note (plain text), and/or trusted HTML built here.

    `drawings` make the PNGs: each call draws one Matplotlib figure with pyplot and returns what Optuna's
    `optuna.visualization.matplotlib` functions return (Axes, an array of Axes, or a Figure).
    """

    slug: str
    title: str
    figures: list[go.Figure] = field(default_factory=list)
    note: str | None = None
    body_html: str = ""
    drawings: list[Callable[[], Any]] = field(default_factory=list)
    pngs: list[Path] = field(default_factory=list)
    grid: bool = False  # small figures side by side, as many per row as the page width allows


def render_page(study: optuna.Study, trials: list[FrozenTrial], sections: list[Section]) -> str:
    """The whole page: a header about the study, a table of contents, then each section in order."""
    name = html.escape(study.study_name)
    parts = [
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Study {name} — tlsearch report</title><style>{_CSS}</style></head><body>",
        f"<h1>Study {name}</h1>",
        _render_answer(study, trials),
        _render_header(study, trials),
    ]
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
        if section.grid:
            parts.append('<div class="grid">')
        for i, figure in enumerate(section.figures):
            figure.update_layout(width=None, autosize=True)  # the page's width, never wider
            parts.append(
                figure.to_html(
                    full_html=False,
                    include_plotlyjs=not plotlyjs_included,
                    div_id=f"{section.slug}-{i + 1}",
                    default_height=f"{figure.layout.height or 560}px",
                    config={"displaylogo": False, "responsive": True},
                )
            )
            plotlyjs_included = True
        if section.grid:
            parts.append("</div>")
        if section.pngs:
            links = " ".join(
                f'<a href="{html.escape(urllib.parse.quote(p.name))}">{html.escape(p.name)}</a>' for p in section.pngs
            )
            parts.append(f'<p class="png">PNG: {links}</p>')
        parts.append(section.body_html + "</section>")
    parts.append(
        f"<footer>Written by tlsearch on {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}.</footer>"
        "</body></html>\n"
    )
    return "\n".join(parts)


def _render_header(study: optuna.Study, trials: list[FrozenTrial]) -> str:
    names = objective_names(study)
    directions = ", ".join(f"{n} ({d.name.lower()})" for n, d in zip(names, study.directions))
    counts = Counter(t.state for t in trials)
    states = ", ".join(f"{counts[s]} {word}" for s, word in _STATE_WORDS.items() if counts[s]) or "none"
    rows = [("Directions", directions), ("Trials", f"{len(trials)} ({states})")]
    for label, key in (("Dataset hash", study_attrs.DATASET_HASH), ("Fold plan hash", study_attrs.FOLD_PLAN)):
        value = _study_attr(study, key)
        rows.append((label, "—" if value is None else str(value)))
    return _facts_table(rows)


_PARETO_LISTED = 5


def _render_answer(study: optuna.Study, trials: list[FrozenTrial]) -> str:
    """What the study found, before any figure: the best trial (ties: the lowest-numbered, as `tlsearch best`
    shows), its CV mean ± std, its score on each fold and its parameters, and the runner-up; for several
    objectives, the Pareto front's size and its first trials by the first objective. Empty without a complete
    trial."""
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if not complete:
        return ""
    if is_multi_objective(study):
        return _render_pareto_answer(study)
    sign = 1 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1
    ranked = sorted(complete, key=lambda t: (sign * t.value, t.number))
    picked = pick(study)
    best = ranked[0] if picked is None else picked.trial
    name = objective_names(study)[0]
    ties = sum(t.value == best.value for t in ranked)
    facts = [(name, f"{fmt(best.value)} ({study.direction.name.lower()})")]
    if picked is not None and picked.estimate.n >= 2:
        facts.append(("Estimate", f"{picked.estimate}: mean ± standard error over its CV repeats (the pick)"))
    if number_attr(best, "mean_test_score") is not None:
        facts.append(("CV mean ± std", _mean_std(best, "score")))
    runner_up = next((t for t in ranked if t.value != best.value), None)
    if runner_up is not None:
        facts.append(("Runner-up", f"trial #{runner_up.number}: {_mean_std(runner_up, 'score', runner_up.value)}"))
    if ties > 1 and (picked is None or picked.estimate.n < 2):
        facts.append(("Ties", f"{ties} trials share the best value; this is the lowest-numbered"))
    scores = fold_scores(best)
    folds = html_table([f"fold {k}" for k in scores], [[fmt(v) for v in scores.values()]], "folds")
    return (
        f'<div class="answer"><h2 class="best">Best trial #{best.number}</h2>'
        f'<div class="facts">{_facts_table(facts)}{f"<div class=wide>{folds}</div>" if scores else ""}</div>'
        f"{_params_list(best)}</div>"
    )


def _render_pareto_answer(study: optuna.Study) -> str:
    names = objective_names(study)
    sign = 1 if study.directions[0] == optuna.study.StudyDirection.MINIMIZE else -1
    front = sorted(study.best_trials, key=lambda t: (sign * t.values[0], t.number))
    rows = [
        [f"#{t.number}", *(_mean_std(t, n, v) for n, v in zip(names, t.values)), _params_text(t)]
        for t in front[:_PARETO_LISTED]
    ]
    more = (
        f" The first {len(rows)} by {names[0]} are listed; Top trials below has more." if len(front) > len(rows) else ""
    )
    table = html_table(["Trial", *names, "Params"], rows, "pareto")
    return (
        f'<div class="answer"><h2 class="best">Pareto front: {len(front)} trial(s)</h2>'
        f'<p class="note">No other trial does better on one objective without doing worse on another.{html.escape(more)}</p>'
        f'<div class="wide">{table}</div></div>'
    )


def _mean_std(trial: FrozenTrial, suffix: str, value: float | None = None) -> str:
    """`mean_test_{suffix} ± std_test_{suffix}` over the folds, as the driver stores them (the std to 3 digits, as
    `tlsearch best` shows it); else `value`."""
    mean, std = number_attr(trial, f"mean_test_{suffix}"), number_attr(trial, f"std_test_{suffix}")
    if mean is None:
        return fmt(value)
    n_folds = number_attr(trial, "n_folds_run", count=True)
    spread = "" if std is None else f" ± {std:.3g}"
    return fmt(mean) + spread + ("" if n_folds is None else f" over {n_folds} folds")


def _params_text(trial: FrozenTrial) -> str:
    return ", ".join(f"{k} = {fmt(v)}" for k, v in trial.params.items()) or "—"


def _params_list(trial: FrozenTrial) -> str:
    """The parameters as name-value pairs in as many columns as the page width holds."""
    if not trial.params:
        return '<p class="note">No parameters.</p>'
    pairs = "".join(
        f"<div><dt>{html.escape(str(k))}</dt><dd>{html.escape(fmt(v))}</dd></div>" for k, v in trial.params.items()
    )
    return f'<dl class="params">{pairs}</dl>'


def _facts_table(rows: list[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="header">{cells}</table>'


def fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return str(value)


def fmt_duration(duration: dt.timedelta | None) -> str:
    if duration is None:
        return "—"
    seconds = duration.total_seconds()
    if seconds < 60:
        return f"{seconds:.3g} s"
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


def html_table(head: list[str], rows: list[list[str]], css_class: str) -> str:
    """An HTML table of plain-text cells (escaped here)."""
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f'<table class="trials {css_class}"><thead><tr>'
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + f"</tr></thead><tbody>{body}</tbody></table>"
    )


def is_multi_objective(study: optuna.Study) -> bool:
    return len(study.directions) > 1


def objective_names(study: optuna.Study) -> list[str]:
    names = study.metric_names
    if names:
        return list(names)
    return ["Value"] if not is_multi_objective(study) else [f"Objective {i}" for i in range(len(study.directions))]


def _study_attr(study: optuna.Study, key: str) -> Any:
    """A study user attribute, else the system attribute of that name (Optuna 5 exposes those only on storage)."""
    value = study.user_attrs.get(key)
    if value is None:
        value = study_attrs.read(study).get(key)
    return value


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { margin-bottom: .3em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; } th, td { padding: .3em .7em; text-align: left; vertical-align: top; }
table.header th { color: #555; font-weight: normal; } table.header td { font-family: ui-monospace, monospace; }
table.trials { font-size: .9em; } table.trials th { background: #f3f3f3; }
table.trials td, table.trials th { border: 1px solid #ddd; } table.trials td { font-variant-numeric: tabular-nums; }
div.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 0 1em; }
table.failures td:last-child { font-family: ui-monospace, monospace; font-size: .9em; word-break: break-word; }
div.answer { margin: 1em 0; padding: 0 1.2em 1em; background: #f6f8fb; border: 1px solid #dde3ec; border-radius: 6px; }
div.answer h2.best { border: none; margin: .6em 0 .2em; }
div.facts { display: flex; flex-wrap: wrap; gap: .4em 3em; align-items: flex-start; }
div.answer table.header td { font-family: inherit; font-variant-numeric: tabular-nums; }
div.answer table.trials { margin-top: .3em; background: #fff; } div.wide { overflow-x: auto; max-width: 100%; }
dl.params { display: grid; grid-template-columns: repeat(auto-fill, minmax(22em, 1fr)); gap: 0 2em; margin: .8em 0 0; }
dl.params div { display: flex; gap: .6em; padding: .25em 0; border-bottom: 1px solid #e3e8ef; }
dl.params dt { font-family: ui-monospace, monospace; color: #555; flex: 1; min-width: 0; }
dl.params dd { margin: 0; font-weight: 600; flex-shrink: 0; max-width: 60%; }
dl.params dt, dl.params dd, table.pareto td:last-child { word-break: break-word; }
nav ul { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .4em 1.2em; }
p.empty { font-size: 1.2em; } p.note, p.png, footer { color: #666; } footer { margin-top: 3em; font-size: .8em; }
"""
