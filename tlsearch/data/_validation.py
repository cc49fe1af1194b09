"""Push-time checks: what a dataset's arrays and metadata must be before anything is written."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np

from tlsearch.data import _chunks
from tlsearch.data._info import ARRAY_NAMES, FEATURES, GROUPS, LABELS, REQUIRED_ARRAYS, SAMPLE_WEIGHT
from tlsearch.errors import DatasetValidationError

_NUMERIC_KINDS = "biuf"  # bool, signed and unsigned integers, floats
_KIND_WORDS = {
    "O": "object",
    "U": "strings",
    "S": "bytes",
    "V": "structured or raw records",
    "M": "datetimes",
    "m": "timedeltas",
    "c": "complex numbers",
}


def prepare_arrays(
    arrays: Mapping[str, object], *, allow_missing: bool = False, feature_names: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """Check and normalise a dataset's arrays: native byte order, numeric, one row per sample, finite features
    (NaN allowed with `allow_missing`; `feature_names` name the columns in messages). An array already in
    native byte order is kept as it is, not copied: a memory-mapped file stays mapped, and is checked, hashed
    and written a block of rows at a time, in C order.

    Raises DatasetValidationError naming the array and the problem; nothing is written before this passes.
    """
    if not isinstance(arrays, Mapping):
        raise DatasetValidationError("arrays must be a dict like {'X': features, 'y': labels}")
    unknown = sorted(set(arrays) - set(ARRAY_NAMES), key=str)
    if unknown:
        raise DatasetValidationError(
            f"unknown array name(s) {', '.join(map(repr, unknown))}: a dataset holds "
            f"{', '.join(map(repr, ARRAY_NAMES))}"
        )
    missing = [name for name in REQUIRED_ARRAYS if arrays.get(name) is None]
    if missing:
        raise DatasetValidationError(
            f"missing array(s) {', '.join(map(repr, missing))}: a dataset needs features 'X' and labels 'y'"
        )
    prepared = {}
    for name in ARRAY_NAMES:
        if arrays.get(name) is None:
            continue
        prepared[name] = _prepare_array(name, arrays[name])
    _check_rows(prepared)
    _check_features(prepared[FEATURES], allow_missing, feature_names)
    _check_finite(prepared[LABELS], "label array 'y'")
    _check_classes(prepared[LABELS])
    if SAMPLE_WEIGHT in prepared:
        weights = prepared[SAMPLE_WEIGHT]
        _check_ndim(SAMPLE_WEIGHT, weights, 1)
        _check_finite(weights, "sample weight array 'sample_weight'")
        if weights.size and (weights < 0).any():
            raise DatasetValidationError(
                f"sample weight array 'sample_weight' has {int((weights < 0).sum())} negative values "
                f"(first at row {int(np.argmax(weights < 0))}); weights must be >= 0"
            )
    if GROUPS in prepared:
        _check_ndim(GROUPS, prepared[GROUPS], 1)
        _check_finite(prepared[GROUPS], "group array 'groups'")
    return prepared


def _prepare_array(name: str, value: object) -> np.ndarray:
    if isinstance(value, np.ndarray):
        array = value
    else:
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as error:
            raise DatasetValidationError(f"array {name!r} cannot be read as a numpy array: {error}") from None
    kind = array.dtype.kind
    if kind not in _NUMERIC_KINDS:
        what = _KIND_WORDS.get(kind, f"dtype {array.dtype}")
        hint = (
            "object arrays are refused because storing them would need pickle"
            if kind == "O"
            else "only numeric and bool arrays are stored"
        )
        raise DatasetValidationError(
            f"array {name!r} holds {what} (dtype {array.dtype}): {hint}; convert it to a numeric dtype "
            "(encode categories and labels as integers)"
        )
    if array.ndim == 0:
        raise DatasetValidationError(f"array {name!r} is a scalar: it needs one row per sample")
    if array.dtype.byteorder not in "=|":
        return array.astype(array.dtype.newbyteorder("="))  # a copy in memory: such files are rare
    return array


TASKS = ("classification", "regression")
# A float label of this many whole values or fewer may be class labels; an integer label of more, a quantity.
_FEW_VALUES, _MANY_CLASSES = 20, 100


def task_of(y: np.ndarray) -> str:
    """What tlsearch does with labels `y`: classification for integers and booleans (strings are encoded as
    integers), regression for floats (`tlsearch.models.is_class_labels`, `AutoKFold`)."""
    return "classification" if np.asarray(y).dtype.kind in "biu" else "regression"


def labels_for_task(y: np.ndarray, task: str | None, encoded: bool = False) -> np.ndarray:
    """`y` as labels of `task`: "classification" makes whole-number floats integers, "regression" makes
    integers floats; None keeps `y`. `encoded`: y holds codes of text labels, which cannot be a quantity."""
    if task is None:
        return y
    if task not in TASKS:
        raise DatasetValidationError(f"task must be 'classification' or 'regression', not {task!r}")
    y = np.asarray(y)
    if task_of(y) == task or (y.dtype.kind == "f" and not np.isfinite(y).all()):
        return y  # NaN labels are refused by prepare_arrays, with their rows
    if task == "regression":
        if encoded:
            raise DatasetValidationError("the labels are text: they cannot be a regression target")
        return y.astype(np.float64)
    if not np.array_equal(y, np.round(y)):
        raise DatasetValidationError(
            "task 'classification' needs whole-number labels, and the float labels hold fractions: encode the "
            "classes as integers"
        )
    return y.astype(np.int64)


def task_note(y: np.ndarray, label: str = "y") -> str | None:
    """A line saying which task labels `y` were taken for, when that may be wrong, and how to change it."""
    y = np.asarray(y)
    if y.ndim != 1 or y.dtype.kind not in "fiu" or (y.dtype.kind == "f" and not np.isfinite(y).all()):
        return None
    values = np.unique(y)
    if y.dtype.kind == "f" and len(values) <= _FEW_VALUES and np.array_equal(values, np.round(values)):
        shown = ", ".join(str(v) for v in values[:5].tolist()) + (", ..." if len(values) > 5 else "")
        return (
            f"label {label!r} is float and holds only the whole numbers {shown}: it is treated as regression "
            "(KFold, a regression loss); to treat it as class labels, push it with --task classification "
            "(Python: push_dataset(..., task='classification'))"
        )
    if y.dtype.kind in "iu" and len(values) > _MANY_CLASSES:
        return (
            f"label {label!r} holds {len(values)} distinct integers: it is treated as classification "
            f"({len(values)} classes); if it is a quantity, push it with --task regression "
            "(Python: push_dataset(..., task='regression'))"
        )
    return None


# The metadata lives in one MongoDB document (16 MiB at most) with the dataset's record.
_METADATA_MAX_BYTES = 8 * 1024 * 1024


def _check_rows(arrays: dict[str, np.ndarray]) -> None:
    rows = len(arrays[FEATURES])
    if rows == 0:
        raise DatasetValidationError("the dataset has 0 rows: nothing to train on; check the source file")
    for name, array in arrays.items():
        if len(array) != rows:
            raise DatasetValidationError(
                f"arrays have different lengths: features 'X' has {rows} rows but {name!r} has {len(array)}"
            )


def _check_classes(y: np.ndarray) -> None:
    """An integer or bool label (classes) needs at least two distinct values to learn anything."""
    if y.dtype.kind in "biu" and y.ndim == 1 and not (y != y[0]).any():  # no sorted copy of y, as np.unique makes
        raise DatasetValidationError(
            f"the label array 'y' holds one class only ({y[0]!r} in all {len(y)} rows): a classifier needs at "
            "least two; check the label column (--label)"
        )


def _check_features(X: np.ndarray, allow_missing: bool, feature_names: Sequence[str] | None) -> None:
    """Refuse NaN (unless `allow_missing`) and infinite feature values, naming the columns and their counts."""
    if X.dtype.kind != "f" or X.size == 0:
        return
    columns = int(np.prod(X.shape[1:], dtype=np.int64))
    nan, inf = np.zeros(columns, np.int64), np.zeros(columns, np.int64)
    # A sixteenth of a push chunk of rows at a time (see row_blocks): the check's copy and its bool temporaries
    # then stay well under one chunk, mapped file or not.
    for block in _chunks.row_blocks(X, _chunks.CHUNK_BYTES // 16):
        rows = block.reshape(len(block), -1)
        nan += np.count_nonzero(np.isnan(rows), axis=0)  # not .sum(axis=0): no int64 copy of the mask
        inf += np.count_nonzero(np.isinf(rows), axis=0)
    if inf.any():
        raise DatasetValidationError(
            f"infinite feature values: {_counts(inf, X, feature_names)}; replace them (e.g. with np.nan_to_num "
            "or clipping) before pushing"
        )
    if nan.any() and not allow_missing:
        raise DatasetValidationError(
            f"missing feature values (NaN): {_counts(nan, X, feature_names)}; impute them, or push with "
            "--allow-missing (Python: allow_missing=True) for models that accept NaN, such as "
            "HistGradientBoostingClassifier"
        )


def _counts(per_column: np.ndarray, X: np.ndarray, feature_names: Sequence[str] | None, limit: int = 5) -> str:
    """ "'age' in 3 rows, 'income' in 1 row": the columns and their counts, by name when known."""
    if X.ndim != 2:
        total = int(per_column.sum())
        return f"{total} value{'s' if total > 1 else ''} of 'X'"
    names = feature_names if feature_names is not None and len(feature_names) == X.shape[1] else None
    columns = np.flatnonzero(per_column)
    shown = ", ".join(
        f"{repr(names[c]) if names else f'column {c}'} in {per_column[c]} row{'s' if per_column[c] > 1 else ''}"
        for c in columns[:limit]
    )
    return shown + (f", ... ({len(columns)} columns in all)" if len(columns) > limit else "")


def _check_ndim(name: str, array: np.ndarray, ndim: int) -> None:
    if array.ndim != ndim:
        raise DatasetValidationError(f"array {name!r} must be {ndim}-D (one value per row), not shape {array.shape}")


def _check_finite(array: np.ndarray, what: str) -> None:
    if array.dtype.kind != "f" or array.size == 0:
        return
    for problem, bad in (("NaN", np.isnan), ("infinite", np.isinf)):
        mask = bad(array)
        if mask.any():
            rows = mask.reshape(len(array), -1).any(axis=1)
            raise DatasetValidationError(
                f"{what} has {int(rows.sum())} row(s) with {problem} values (first at row {int(np.argmax(rows))}); "
                "it must be finite"
            )


def prepare_metadata(metadata: Mapping | None) -> dict:
    """A plain JSON-compatible document (str keys, no '$' prefix or '.' in keys, so MongoDB stores it as is)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise DatasetValidationError("metadata must be a dict")
    try:
        document = json.loads(json.dumps(dict(metadata), default=_plain))
    except (TypeError, ValueError) as error:
        raise DatasetValidationError(f"metadata is not a plain document: {error}") from None
    _check_keys(document, "metadata")
    size = len(json.dumps(document))
    if size > _METADATA_MAX_BYTES:
        raise DatasetValidationError(
            f"the dataset's metadata (column names and the like) takes {size / 2**20:.1f} MiB, over the "
            f"{_METADATA_MAX_BYTES // 2**20} MiB tlsearch keeps in one MongoDB document: shorten the column "
            "names, or save the table as .npy/.npz (no names stored)"
        )
    return document


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufU":
        return value.tolist()
    raise TypeError(f"{type(value).__name__} {value!r} is not a number, string, list or dict")


def _check_keys(value, path: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key.startswith("$") or "." in key or "\0" in key:
                raise DatasetValidationError(f"metadata key {path}[{key!r}] may not start with '$' or contain '.'")
            _check_keys(item, f"{path}[{key!r}]")
    elif isinstance(value, list):
        for item in value:
            _check_keys(item, path)
