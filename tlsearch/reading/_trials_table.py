"""What a study found, as rows and text for the terminal and for scripts (`status`, `best`, `trials`)."""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
import shutil

import optuna
from optuna.trial import FrozenTrial, TrialState

from tlsearch._compat import optuna as compat
from tlsearch._files import write_file_with
from tlsearch._text import csv_cell, printable
from tlsearch.cv._pruners import describe as describe_prune_reason
from tlsearch.errors import TLSearchError
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.reading._pick import pick
from tlsearch.reading._summary import summarize_trials
from tlsearch.storage._slots import folds_claimed
from tlsearch.stores._stores import Stores

_SPLIT = re.compile(r"^split(\d+)_test_score$")
log = logging.getLogger(__name__)


def number_attr(trial: FrozenTrial, key: str, *, count: bool = False) -> float | int | None:
    """The user attribute `key` of `trial` when it is a number (`count`: an int >= 0); None when it is absent or,
    with a warning naming the trial and the field, when the store holds something else there."""
    value = trial.user_attrs.get(key)
    if value is None:
        return None
    if _is_number(value) and (not count or (isinstance(value, int) and value >= 0)):
        return value
    kind = "count (an integer >= 0)" if count else "number"
    log.warning("trial %d: %s is %s, not a %s: shown as missing", trial.number, key, printable(repr(value)[:80]), kind)
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def fold_scores(trial: FrozenTrial) -> dict[int, float]:
    """The trial's validation score per fold index, in fold order (a pruned trial lacks its later folds)."""
    folds = sorted(
        (int(m.group(1)), value)
        for key, value in trial.user_attrs.items()
        if (m := _SPLIT.match(key)) and _is_number(value)
    )
    return dict(folds)


# scikit-learn's cv_results_ order; the split columns go after these.
_CV_COLUMNS = (
    "rank_test_score",
    "mean_test_score",
    "std_test_score",
    "mean_fit_time",
    "std_fit_time",
    "mean_score_time",
    "std_score_time",
)
_WHY = ("prune_reason", "error")  # why a trial did not complete: last columns, left out when empty
_STD_OF_FOLDS = ("std_test_score", "std_fit_time", "std_score_time")


def results(
    name: str,
    *,
    mongo: str | None = None,
    database: str | None = None,
    home=None,
    states: tuple[TrialState, ...] | None = None,
    best: bool = False,
):
    """The trials of study `name` as a pandas DataFrame, one row per trial (what `tlsearch trials --format csv`
    writes). `best=True`: only the pick's row, with its estimate columns (what `tlsearch best --json` writes;
    the Pareto front's rows with several objectives)."""
    study = study_attrs.load(Stores.resolve(mongo, database, home), name)
    return best_frame(study).reset_index(drop=True) if best else trials_frame(study, states)


def trials_frame(
    study: optuna.Study,
    states: tuple[TrialState, ...] | None = None,
    *,
    columns: list[str] | None = None,
    sort: str | None = None,
    reverse: bool = False,
    top: int | None = None,
):
    """`study.trials_dataframe()` led by scikit-learn's cv_results_ columns, in this order: number,
    rank_test_score, mean/std_test_score, mean/std_fit_time, mean/std_score_time, split{k}_test_score,
    n_folds_run, value (values_{metric} per objective with several), state, datetime_start, datetime_complete,
    duration (seconds), params_* (sorted), the remaining user_attrs_* and the retry columns
    system_attrs_failed_trial / _retry_history, prune_reason (one line: why a pruned trial was stopped), error.
    A column empty in every trial of the study is left out (but number, state and the values), and so are the
    internal ones: the samplers' system attributes and the fold tasks' bookkeeping (user_attrs_fold_tasks,
    user_attrs_split{k}_worker). The columns depend only on the study, not on `states` or on which trial has
    which parameter.

    `columns`: exactly these, in this order, internal and empty ones included (a parameter may be named without
    `params_`); an unknown name raises a TLSearchError listing the valid ones. Rows are in trial number order,
    or by `sort` (ascending; a value column best first, complete trials first), `reverse` reversing it. `top`:
    only the `top` best complete trials by the objective (with several objectives, the one `sort` names).
    Ranks count complete trials only (1 = best; ties share the best rank). A pruned trial has NaN for the
    folds it did not run and for its standard deviations (they cover only the folds run)."""
    full = _full_frame(study)
    chosen = _chosen_columns(full, columns)
    rows = full if states is None else full[full["state"].isin([state.name for state in states])]
    rows = _ordered(rows, study, None if sort is None else _column(full, sort, "--sort"), reverse, top)
    return rows[chosen].reset_index(drop=True)


def _full_frame(study: optuna.Study):
    """Every trial, every column (internal and empty ones included), in `trials_frame`'s order."""
    import pandas as pd

    every = study.get_trials(deepcopy=False)
    if not every:
        return pd.DataFrame({column: [] for column in ("number", *value_names(study), "state")})
    frame = study.trials_dataframe(multi_index=False)
    frame = frame.rename(columns=dict(zip(_value_columns(frame), value_names(study))))
    frame["duration"] = pd.to_timedelta(frame["duration"]).dt.total_seconds()
    by_number = {t.number: t for t in every}
    n_folds = max(len(fold_scores(t)) for t in every)
    cv = pd.DataFrame(
        [_cv_columns(by_number[n], n_folds) for n in frame["number"]],
        columns=[*_CV_COLUMNS[1:], *(f"split{k}_test_score" for k in range(n_folds)), "n_folds_run", *_WHY],
    )
    cv["n_folds_run"] = cv["n_folds_run"].astype("Int64")  # NaN for a trial that failed before a fold ended
    frame = pd.concat([frame, cv], axis=1)
    frame.insert(1, "rank_test_score", _ranks(study, frame))
    frame = frame.drop(columns=[c for c in frame if c.startswith("user_attrs_") and c[11:] in cv.columns])
    first = ["number", *_CV_COLUMNS, *(f"split{k}_test_score" for k in range(n_folds)), "n_folds_run"]
    values = _value_columns(frame)
    times = ["state", "datetime_start", "datetime_complete", "duration"]
    params = sorted(c for c in frame if c.startswith("params_"))
    rest = sorted(c for c in frame if c not in {*first, *values, *times, *params, *_WHY})
    return frame[[*first, *values, *times, *params, *rest, *_WHY]]


def value_names(study: optuna.Study) -> list[str]:
    """The value columns, in objective order: `value`, or `values_{metric}` (`values_{i}` unnamed) with several."""
    if len(study.directions) == 1:
        return ["value"]
    return [f"values_{name}" for name in study.metric_names or range(len(study.directions))]


# The system attributes a user reads: a retried trial's first attempt and its attempts. The others are samplers'
# bookkeeping (TPE's relative params, a grid's id and space, CMA-ES and NSGA-II state), not results; so is which
# worker ran which fold task.
_SHOWN_SYSTEM_ATTRS = ("system_attrs_failed_trial", "system_attrs_retry_history")
_FOLD_TASK_ATTR = re.compile(r"^user_attrs_(fold_tasks|split\d+_worker)$")


def _is_internal(column: str) -> bool:
    if column.startswith("system_attrs_"):
        return column not in _SHOWN_SYSTEM_ATTRS
    return bool(_FOLD_TASK_ATTR.match(column))


def _chosen_columns(full, columns: list[str] | None) -> list[str]:
    if columns is not None:
        return list(dict.fromkeys(_column(full, name, "--columns") for name in columns))
    kept = ("number", "state", *_value_columns(full))
    return [c for c in full if not _is_internal(c) and (c in kept or full[c].notna().any())]


def _column(full, name: str, option: str) -> str:
    """The column `name` names: itself, or a parameter's name without `params_`."""
    for column in (name, f"params_{name}"):
        if column in full:
            return column
    valid = ", ".join(printable(c) for c in full)
    raise TLSearchError(f"{option}: no column {printable(repr(name))}; the columns of this study: {valid}")


def _ordered(rows, study: optuna.Study, sort: str | None, reverse: bool, top: int | None):
    values = value_names(study)
    if top is not None:
        if top < 1:
            raise TLSearchError(f"--top takes a number of trials of 1 or more, not {top}")
        objective = sort if sort in values else values[0] if len(values) == 1 else None
        if objective is None:
            raise TLSearchError(
                f"--top ranks the trials by one objective and this study has {len(values)}: add --sort with "
                f"one of {', '.join(values)} (tlsearch best shows the Pareto front)"
            )
        complete = rows[rows["state"] == TrialState.COMPLETE.name]
        best_first = [_minimised(study, objective), True]
        rows = complete.sort_values([objective, "number"], ascending=best_first, kind="stable").head(top)
        sort = sort or objective
    sort = sort or "number"
    ascending = _minimised(study, sort) if sort in values else True
    rows = _sorted(rows, sort, ascending != reverse)
    if sort in values:  # a pruned trial's value is its last report, not a score to rank with the complete ones
        rows = rows.sort_values("state", key=lambda state: state != TrialState.COMPLETE.name, kind="stable")
    return rows


def _minimised(study: optuna.Study, value_column: str) -> bool:
    index = value_names(study).index(value_column)
    return study.directions[index] == optuna.study.StudyDirection.MINIMIZE


def _sorted(rows, column: str, ascending: bool):
    try:
        return rows.sort_values(column, ascending=ascending, kind="stable", na_position="last")
    except TypeError:  # a categorical parameter whose choices mix types: by their text
        text = rows[column].map(lambda value: value if _missing(value) else str(value))
        order = text.sort_values(ascending=ascending, kind="stable", na_position="last").index
        return rows.loc[order]


def _cv_columns(trial: FrozenTrial, n_folds: int) -> list:
    attrs = trial.user_attrs
    pruned = trial.state == TrialState.PRUNED
    row = [math.nan if pruned and key in _STD_OF_FOLDS else _or_nan(number_attr(trial, key)) for key in _CV_COLUMNS[1:]]
    scores = fold_scores(trial)
    row += [scores.get(k, math.nan) for k in range(n_folds)]
    n_run = number_attr(trial, "n_folds_run", count=True) if "n_folds_run" in attrs else None
    row.append(n_run if n_run is not None else (len(scores) or math.nan))
    pruned_why = attrs.get("prune_reason") if pruned else None
    row.append(describe_prune_reason(pruned_why) if isinstance(pruned_why, dict) else None)
    failed = trial.state == TrialState.FAIL and "error_type" in attrs
    row.append(f"{attrs['error_type']}: {attrs.get('error_message', '')}" if failed else None)
    return row


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def _value_columns(frame) -> list[str]:
    """Optuna's value column(s), in objective order: value or values_{i}; value_{metric} or values_{metric}
    once the study names its metrics."""
    return [c for c in frame if c == "value" or c.startswith(("value_", "values_"))]


def _ranks(study: optuna.Study, frame):
    """rank_test_score: the complete trials ranked by the (first) objective, best first; others NaN."""
    complete = frame["state"] == TrialState.COMPLETE.name
    value = frame[_value_columns(frame)[0]].where(complete)
    ascending = study.directions[0] == optuna.study.StudyDirection.MINIMIZE
    return value.rank(method="min", ascending=ascending).astype("Int64")


def format_frame(frame, fmt: str = "table", path=None, *, raw_csv: bool = False) -> str | None:
    """A trials DataFrame as text (table, CSV, JSON records), or written to `path` as Parquet.

    CSV cells that a spreadsheet would run as a formula (text starting with `= + - @`, tab or CR) get a leading
    `'`, and their control characters are escaped, unless `raw_csv`; numbers stay numbers. JSON and Parquet hold
    the values exactly."""
    if fmt == "parquet":
        require_pyarrow()
        write_file_with(path, lambda tmp: frame.to_parquet(tmp, index=False))
        return None
    if fmt == "csv":
        return (frame if raw_csv else _neutralised(frame)).to_csv(index=False)
    if fmt == "json":
        return frame.to_json(orient="records", date_format="iso", indent=2)
    return format_table(frame, compact=False)


# When the table does not fit, a column past the view's fixed ones is cut to its values' width, its name to
# no fewer than 8 characters (enough to tell parameters apart), and neither past 12.
_CUT_NAME, _CUT = 8, 12


def format_table(frame, width: int | None = None, *, compact: bool = True) -> str:
    """A trials DataFrame as an aligned table whose every line fits `width` characters (default: the terminal's).

    `compact`: the default view, number, state, value(s), mean ± std (CV; ± std alone when the mean is the value),
    folds (n_folds_run), duration and the parameters; else the frame's columns. Parameters are named without
    `params_`; durations read like 12.3s or 4m05s. When the table is too wide, the columns past the view's fixed
    ones are narrowed, the widest first (names cut at their start, values at their end, with …), then the last columns left out, and a
    last line names them."""
    width = width or shutil.get_terminal_size().columns
    if frame.empty:
        return "(no trials)"
    columns, fixed = _compact_columns(frame) if compact else (_columns_as_text(frame), 0)
    names = [head for head, _ in columns]
    for index in sorted(range(fixed, len(columns)), key=lambda i: -_table_width(columns[i : i + 1])):
        if _table_width(columns) <= width:
            break
        columns[index] = _narrowed(columns[index])  # the widest first
    while _table_width(columns) > width and len(columns) > 1:
        columns.pop()
    if _table_width(columns) > width:  # one column left, still too wide: cut to the line
        columns = [(_cut(head, width), [_cut(cell, width) for cell in cells]) for head, cells in columns]
    widths = [max(len(head), *map(len, cells)) for head, cells in columns]
    rows = zip(*([head, *cells] for head, cells in columns))
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    hidden = names[len(columns) :]
    if hidden:
        s = "s" if len(hidden) > 1 else ""
        note = f"{len(hidden)} more column{s} (--columns to choose, --format csv for all): {', '.join(hidden)}"
        lines.append(_cut(note, width))
    return "\n".join(lines)


def _compact_columns(frame) -> tuple[list[tuple[str, list[str]]], int]:
    """The default view's (header, cells) columns, and how many lead it before the parameters."""
    values = _value_columns(frame)
    columns = [(c, [_cell(v) for v in frame[c]]) for c in ("number", "state", *values) if c in frame]
    if "mean_test_score" in frame:
        means = frame["mean_test_score"]
        stds = frame["std_test_score"] if "std_test_score" in frame else means * math.nan
        if values == ["value"] and _same(means, frame["value"]):  # the value is the CV mean: no need to repeat it
            columns.append(("± std", [_cell(std, digits=2) for std in stds]))
        else:
            columns.append(("mean ± std", [_mean_std(mean, std) for mean, std in zip(means, stds)]))
    if "n_folds_run" in frame:
        columns.append(("folds", [_cell(v) for v in frame["n_folds_run"]]))
    if "duration" in frame:
        columns.append(("duration", [human_duration(v) for v in frame["duration"]]))
    fixed = len(columns)
    params = sorted(c for c in frame if c.startswith("params_"))
    columns += [(printable(c[len("params_") :]), [_cell(v, digits=4) for v in frame[c]]) for c in params]
    return columns, fixed


def _same(means, values) -> bool:
    both = means.notna() & values.notna()
    return bool(((means[both] - values[both]).abs() <= 1e-12 * values[both].abs().clip(lower=1)).all())


def _narrowed(column: tuple[str, list[str]]) -> tuple[str, list[str]]:
    head, cells = column
    width = min(_CUT, max(_CUT_NAME, *map(len, cells)))
    return _cut_start(head, width), [_cut(cell, width) for cell in cells]


def _columns_as_text(frame) -> list[tuple[str, list[str]]]:
    def cell(column, value):
        return human_duration(value) if column == "duration" else _cell(value)

    return [(printable(c.removeprefix("params_")), [cell(c, v) for v in frame[c]]) for c in frame]


def _table_width(columns) -> int:
    return sum(max(len(head), *map(len, cells)) for head, cells in columns) + 2 * (len(columns) - 1)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _cut_start(name: str, width: int) -> str:
    """A column name cut from its start: nested parameters share theirs (`model.units`, `model.dropout`)."""
    return name if len(name) <= width else "…" + name[len(name) - width + 1 :]


def _mean_std(mean, std) -> str:
    if _missing(mean):
        return ""
    return f"{mean:.4g}" if _missing(std) else f"{mean:.4g} ± {std:.2g}"


def human_duration(seconds) -> str:
    """Seconds as a person reads them: 0.024s, 2.3s, 12.3s, 4m05s, 2h03m; empty when missing."""
    if _missing(seconds):
        return ""
    if seconds < 10:
        return f"{seconds:.2g}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _neutralised(frame):
    """`frame` with every text cell and column name passed through `csv_cell`."""
    frame = frame.rename(columns=csv_cell)
    from pandas.api.types import is_bool_dtype, is_datetime64_any_dtype, is_numeric_dtype

    kept = (is_numeric_dtype, is_bool_dtype, is_datetime64_any_dtype)  # no text in them
    text_columns = [column for column in frame if not any(is_kind(frame[column].dtype) for is_kind in kept)]
    return frame.assign(**{column: frame[column].map(csv_cell) for column in text_columns})


def require_pyarrow() -> None:
    """Raise a TLSearchError naming the extra unless pyarrow (Parquet) is installed."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise TLSearchError("--format parquet needs pyarrow: pip install 'tlsearch[parquet]'") from None


def _missing(value) -> bool:
    import pandas as pd

    return not isinstance(value, (list, dict, tuple)) and bool(pd.isna(value))


def format_rows(rows: list[dict], fmt: str = "table") -> str:
    """Rows as an aligned text table, CSV or JSON (NaN and infinities as JSON strings)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    if fmt == "json":
        return json.dumps([{k: _jsonable(v) for k, v in row.items()} for row in rows], indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([csv_cell(c) for c in columns])
        writer.writerows([csv_cell(row.get(c, "")) for c in columns] for row in rows)
        return out.getvalue()
    if not rows:
        return "(no trials)"
    columns_shown = [printable(c) for c in columns]
    cells = [[_text(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns_shown)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns_shown, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def best_summary(study: optuna.Study) -> str:
    """The best trial(s): params, mean ± std CV score, per-fold scores. One objective: the pick
    (`tlsearch.reading._pick`: the lowest-numbered of the best, read by the store with no trial loaded on MongoDB,
    unless the study was intensified), with its estimate over all its evaluations where it has several."""
    lines = []
    picked = None
    if len(study.directions) == 1:
        picked = pick(study)
        best = [] if picked is None else [picked.trial]
        if picked is not None and picked.estimate.n < 2:
            summary = summarize_trials(study)
            if summary.best_ties > 1:
                lines.append(f"{summary.best_ties} trials tie for the best value; showing the lowest-numbered")
    else:
        best = study.best_trials
    if not best:
        return f"study {printable(repr(study.study_name))}: no complete trial yet"
    for trial in best[:5]:
        values = ", ".join(_text(v) for v in trial.values)
        lines.append(f"best trial #{trial.number}: value {values}")
        if picked is not None and picked.estimate.n >= 2:
            lines.append(f"  estimate: {picked.estimate} (mean ± standard error over its CV repeats)")
        mean = number_attr(trial, "mean_test_score")
        if mean is not None:
            std = number_attr(trial, "std_test_score")
            lines.append(f"  CV score: {mean:.6g} ± {math.nan if std is None else std:.3g}")
        scores = fold_scores(trial)
        if scores:
            lines.append("  folds:    " + "  ".join(f"{s:.4g}" for s in scores.values()))
        for name, value in trial.params.items():
            lines.append(f"  {printable(name)} = {printable(repr(value))}")
    return "\n".join(lines)


def best_frame(study: optuna.Study):
    """`tlsearch best --json`'s rows: the pick's row of `trials_frame` (with `estimate_mean`,
    `estimate_standard_error` and `n_evaluations`), or the Pareto front's rows for several objectives."""
    frame = trials_frame(study)
    if len(study.directions) > 1:
        numbers = [t.number for t in study.best_trials]
        return frame[frame["number"].isin(numbers)]
    picked = pick(study)
    if picked is None:
        return frame.iloc[0:0]
    row = frame[frame["number"] == picked.trial.number].copy()
    row["estimate_mean"] = picked.estimate.mean
    row["estimate_standard_error"] = picked.estimate.standard_error
    row["n_evaluations"] = picked.estimate.n
    return row


def study_status(study: optuna.Study) -> dict:
    """Counts by state, folds used (trained, or claimed by running trials), best value, dataset, started and last
    activity (local time with its offset) of one study, read with no trial loaded on MongoDB."""
    summary = summarize_trials(study)
    counts = summary.counts
    return {
        "name": study.study_name,
        "directions": ", ".join(d.name.lower() for d in study.directions),
        "complete": counts.get("COMPLETE", 0),
        "pruned": counts.get("PRUNED", 0),
        "failed": counts.get("FAIL", 0),
        "running": counts.get("RUNNING", 0),
        "waiting": counts.get("WAITING", 0),
        "folds_used": folds_claimed(compat.storage_of(study), compat.study_id(study)),
        "best_value": summary.best_value,
        "best_trial": summary.best_number,
        "dataset": study_attrs.read(study).get(study_attrs.DATASET_REF),
        "started": _moment(summary.first_start),
        "last_activity": _moment(summary.last_activity),
    }


def _moment(moment) -> str | None:
    """A datetime Optuna keeps (naive, local) in ISO 8601 with the local offset."""
    return moment.astimezone().isoformat(timespec="seconds") if moment is not None else None


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _text(value) -> str:
    """One table cell: floats to 6 significant digits, control characters escaped."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return printable(value)


def _cell(value, digits: int = 6) -> str:
    """A trials table cell: floats to `digits` significant digits, a missing value (None, NaN, NA) empty."""
    if _missing(value):
        return ""
    return f"{value:.{digits}g}" if isinstance(value, float) else printable(value)
