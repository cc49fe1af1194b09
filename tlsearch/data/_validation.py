"""Push-time checks: what a dataset's arrays and metadata must be before anything is written."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

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


def prepare_arrays(arrays: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Check and normalise a dataset's arrays: C-contiguous, native byte order, numeric, one row per sample.

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
    native = array.dtype.newbyteorder("=") if array.dtype.byteorder not in "=|" else array.dtype
    return np.ascontiguousarray(array, dtype=native)


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
    if y.dtype.kind in "biu" and y.ndim == 1 and len(np.unique(y)) < 2:
        raise DatasetValidationError(
            f"the label array 'y' holds one class only ({y[0]!r} in all {len(y)} rows): a classifier needs at "
            "least two; check the label column (--label)"
        )


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
