"""What a study found, as rows and text for the terminal and for scripts (`status`, `best`, `trials`)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import Counter

import optuna
from optuna.trial import FrozenTrial, TrialState

_SPLIT = re.compile(r"^split(\d+)_test_score$")


def fold_scores(trial: FrozenTrial) -> list[float]:
    """The trial's per-fold validation scores, in fold order."""
    folds = sorted((int(m.group(1)), value) for key, value in trial.user_attrs.items() if (m := _SPLIT.match(key)))
    return [value for _, value in folds]


def trial_row(trial: FrozenTrial) -> dict:
    """One trial as a flat dict: number, state, value(s), cv_results_-style scores, params, duration, error."""
    row = {"number": trial.number, "state": trial.state.name}
    if trial.values is not None and len(trial.values) > 1:
        row.update({f"value_{i}": v for i, v in enumerate(trial.values)})
    else:
        row["value"] = trial.value
    attrs = trial.user_attrs
    for key in ("mean_test_score", "std_test_score"):
        if key in attrs:
            row[key] = attrs[key]
    for k, score in enumerate(fold_scores(trial)):
        row[f"split{k}_test_score"] = score
    row.update({f"params_{name}": value for name, value in trial.params.items()})
    row["duration_s"] = trial.duration.total_seconds() if trial.duration else None
    if trial.state == TrialState.FAIL and "error_type" in attrs:
        row["error"] = f"{attrs['error_type']}: {attrs.get('error_message', '')}"
    return row


def trial_rows(study: optuna.Study, states: tuple[TrialState, ...] | None = None) -> list[dict]:
    return [trial_row(t) for t in study.get_trials(deepcopy=False, states=states)]


def format_rows(rows: list[dict], fmt: str = "table") -> str:
    """Rows as an aligned text table, CSV or JSON (NaN and infinities as JSON strings)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    if fmt == "json":
        return json.dumps([{k: _jsonable(v) for k, v in row.items()} for row in rows], indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    if not rows:
        return "(no trials)"
    cells = [[_text(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def best_summary(study: optuna.Study) -> str:
    """The best trial(s): params, mean ± std CV score, per-fold scores."""
    try:
        best = study.best_trials
    except ValueError:
        best = []
    if not best:
        return f"study {study.study_name!r}: no complete trial yet"
    lines = []
    if len(study.directions) == 1 and len(best) > 1:  # ties: one trial, the first to reach the value
        lines.append(f"{len(best)} trials tie for the best value; showing the lowest-numbered")
        best = [min(best, key=lambda trial: trial.number)]
    for trial in best[:5]:
        values = ", ".join(f"{v:.6g}" for v in trial.values)
        lines.append(f"best trial #{trial.number}: value {values}")
        attrs = trial.user_attrs
        if "mean_test_score" in attrs:
            lines.append(f"  CV score: {attrs['mean_test_score']:.6g} ± {attrs.get('std_test_score', float('nan')):.3g}")
        scores = fold_scores(trial)
        if scores:
            lines.append("  folds:    " + "  ".join(f"{s:.4g}" for s in scores))
        for name, value in trial.params.items():
            lines.append(f"  {name} = {value!r}")
    return "\n".join(lines)


def study_status(study_summary: optuna.study.StudySummary, study: optuna.Study) -> dict:
    """Counts by state, best value, dataset, started and last activity of one study."""
    from tlsearch.runner import ATTR_DATASET_REF, system_attrs

    trials = study.get_trials(deepcopy=False)
    counts = Counter(t.state.name for t in trials)
    times = [t for tr in trials for t in (tr.datetime_start, tr.datetime_complete) if t is not None]
    best = study_summary.best_trial
    return {
        "name": study_summary.study_name,
        "directions": [d.name.lower() for d in study_summary.directions],
        "complete": counts["COMPLETE"], "pruned": counts["PRUNED"], "failed": counts["FAIL"],
        "running": counts["RUNNING"], "waiting": counts["WAITING"],
        "best_value": best.value if best is not None and len(study_summary.directions) == 1 else None,
        "best_trial": best.number if best is not None else None,
        "dataset": system_attrs(study).get(ATTR_DATASET_REF),
        "started": min(times).isoformat(timespec="seconds") if times else None,
        "last_activity": max(times).isoformat(timespec="seconds") if times else None,
    }


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
