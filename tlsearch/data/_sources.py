"""Ways data comes in: .npz/.npy/CSV/Parquet files, pandas DataFrames, and scikit-learn's bundled datasets.

Each reader returns (arrays, metadata) ready for `DatasetStore.push`. Nothing is unpickled: .npy/.npz
files are read with allow_pickle=False, and object columns are refused or (labels, groups) encoded.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tlsearch.data._chunks import row_blocks
from tlsearch.data._info import FEATURES, GROUPS, LABELS, SAMPLE_WEIGHT, DatasetInfo
from tlsearch.data._store import DatasetStore, Progress
from tlsearch.data._validation import labels_for_task, task_note, task_of
from tlsearch.errors import DatasetExistsError, DatasetNotFoundError, DatasetValidationError

log = logging.getLogger(__name__)

BUILTIN_PREFIX = "sklearn:"
BUILTINS = ("digits", "wine", "breast_cancer", "iris")
FILE_SUFFIXES = (".npz", ".npy", ".csv", ".parquet", ".pq")

Columns = str | Sequence[str] | None


def load_builtin(name: str) -> tuple[dict[str, np.ndarray], dict]:
    """One of scikit-learn's bundled datasets (no download): digits, wine, breast_cancer or iris."""
    if name not in BUILTINS:
        raise DatasetValidationError(
            f"unknown built-in dataset {BUILTIN_PREFIX}{name}: choose one of "
            f"{', '.join(BUILTIN_PREFIX + b for b in BUILTINS)}"
        )
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, f"load_{name}")()
    metadata = {"source": f"{BUILTIN_PREFIX}{name}", "class_names": [str(c) for c in bunch.target_names]}
    if getattr(bunch, "feature_names", None) is not None:
        metadata["feature_names"] = [str(c) for c in bunch.feature_names]
    return {FEATURES: np.asarray(bunch.data), LABELS: np.asarray(bunch.target)}, metadata


def read_source(
    source: str | os.PathLike,
    *,
    features: Columns = None,
    label: str | None = None,
    groups: str | None = None,
    sample_weight: str | None = None,
) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays and metadata from "sklearn:NAME" or a .npz/.npy/.csv/.parquet file.

    Column choice: for CSV/Parquet, column names (default label: the last column; features: every other
    column); for a 2-D .npy table, column numbers (default label: -1); for .npz, the key of each array
    (default keys: X, y, groups, sample_weight).
    """
    text = str(source)
    if text.startswith(BUILTIN_PREFIX):
        if any(option is not None for option in (features, label, groups, sample_weight)):
            raise DatasetValidationError("column options do not apply to built-in datasets")
        return load_builtin(text[len(BUILTIN_PREFIX) :])
    path = Path(text).expanduser()
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise DatasetValidationError(
            f"cannot read {text!r}: expected {BUILTIN_PREFIX}NAME or a file ending in {', '.join(FILE_SUFFIXES)}"
        )
    if not path.is_file():
        raise DatasetNotFoundError(f"no such file: {path}")
    if suffix == ".npz":
        return _read_npz(path, features, label, groups, sample_weight)
    if suffix == ".npy":
        return _read_npy(path, features, label, groups, sample_weight)
    import pandas as pd

    try:
        frame = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    except (ValueError, OSError, pd.errors.ParserError) as error:
        raise DatasetValidationError(f"cannot read {path}: {error}") from None
    except ImportError:  # pandas reads Parquet through pyarrow, an extra
        raise DatasetValidationError(
            f"cannot read {path}: Parquet needs pyarrow: pip install 'tlsearch[parquet]'"
        ) from None
    return arrays_from_frame(
        frame, features=features, label=label, groups=groups, sample_weight=sample_weight, source=f"file:{path.name}"
    )


def arrays_from_frame(
    frame,
    *,
    features: Columns = None,
    label: str | None = None,
    groups: str | None = None,
    sample_weight: str | None = None,
    source: str = "DataFrame",
) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays and metadata from a pandas DataFrame: the label column (default: the last), feature columns
    (default: all others), optional groups and sample-weight columns.

    Feature columns must be numeric or bool. A non-numeric label or group column is encoded as integers
    (sorted values; the label's values are kept as class_names). Missing labels or groups are refused.
    """
    import pandas as pd

    by_name = {str(column): column for column in frame.columns}
    where = f" in {source.removeprefix('file:')}" if source != "DataFrame" else ""
    if len(frame) == 0:
        raise DatasetValidationError(f"the table{where} has 0 rows: nothing to train on; check the source file")

    def column(name: str, role: str):
        if name not in by_name:
            listed = ", ".join(list(by_name)[:20]) + (", ..." if len(by_name) > 20 else "")
            raise DatasetValidationError(f"no {role} column {name!r}{where} (columns: {listed})")
        return frame[by_name[name]]

    extra = {str(c) for c in (groups, sample_weight) if c is not None}
    if label is None:
        candidates = [name for name in by_name if name not in extra]
        if not candidates:
            raise DatasetValidationError(f"no columns{where} to use as the label")
        label = candidates[-1]
    for name, role in ((label, "label"), (groups, "groups"), (sample_weight, "sample weight")):
        if name is not None:
            column(name, role)
    feature_names = _column_list(features)
    if feature_names is None:
        feature_names = [name for name in by_name if name != label and name not in extra]
    if not feature_names:
        raise DatasetValidationError(f"no feature columns left{where}: pass the feature columns explicitly")
    for name, role in ((label, "label"), (groups, "groups"), (sample_weight, "sample weight")):
        if name in feature_names:
            raise DatasetValidationError(
                f"column {name!r} is both the {role} and a feature: leave it out of --features"
            )
    for name in feature_names:
        column(name, "feature")
    X = _feature_matrix(frame[[by_name[n] for n in feature_names]], where)
    metadata = {"source": source, "feature_names": feature_names, "label": label}
    y, class_names = _encoded(column(label, "label"), f"label column {label!r}")
    arrays = {FEATURES: X, LABELS: y}
    if class_names is not None:
        metadata["class_names"] = class_names
    if groups is not None:
        arrays[GROUPS], _ = _encoded(column(groups, "groups"), f"groups column {groups!r}")
        metadata["groups"] = groups
    if sample_weight is not None:
        weights = column(sample_weight, "sample weight")
        if not pd.api.types.is_numeric_dtype(weights):
            raise DatasetValidationError(f"sample weight column {sample_weight!r}{where} is not numeric")
        arrays[SAMPLE_WEIGHT] = weights.to_numpy(dtype=np.float64, na_value=np.nan)
        metadata["sample_weight"] = sample_weight
    return arrays, metadata


DATA_FORMS = "(X, y) arrays, a DataFrame (its last column the label), (DataFrame, 'label column') or {'X': .., 'y': ..}"


def is_data(value: object) -> bool:
    """Whether `value` has one of the forms of data held in Python that `arrays_from_data` reads."""
    return _is_frame(value) or isinstance(value, Mapping) or (isinstance(value, (tuple, list)) and len(value) == 2)


def arrays_from_data(
    data,
    *,
    features: Columns = None,
    label: str | None = None,
    groups=None,
    sample_weight=None,
) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays and metadata from data held in Python: (X, y), a DataFrame (as `arrays_from_frame`: `label`
    default its last column, `features` default every other), (DataFrame, label column) or a dict of arrays
    {"X", "y", "groups", "sample_weight"}.

    X may be a DataFrame (its columns are the features) and y a Series or list. Text labels are encoded as
    integers with their names kept, as for CSV files. `groups` and `sample_weight` are column names of a
    DataFrame, or one value per row.
    """
    if isinstance(data, (tuple, list)) and len(data) == 2 and _is_frame(data[0]) and isinstance(data[1], str):
        if label is not None:
            raise DatasetValidationError(f"the label column is given twice: as {data[1]!r} and label={label!r}")
        data, label = data[0], data[1]
    if _is_frame(data):
        columns = {role: c for role, c in ((GROUPS, groups), (SAMPLE_WEIGHT, sample_weight)) if isinstance(c, str)}
        arrays, metadata = arrays_from_frame(
            data, features=features, label=label, groups=columns.get(GROUPS), sample_weight=columns.get(SAMPLE_WEIGHT)
        )
        given = {
            role: values for role, values in ((GROUPS, groups), (SAMPLE_WEIGHT, sample_weight)) if role not in columns
        }
        return _with_row_arrays(arrays, given), metadata
    if features is not None or label is not None:
        raise DatasetValidationError(
            "features= and label= name columns of a DataFrame: with (X, y), select them yourself"
        )
    if isinstance(data, Mapping):
        unknown = sorted(set(map(str, data)) - {FEATURES, LABELS, GROUPS, SAMPLE_WEIGHT})
        if unknown or FEATURES not in data or LABELS not in data:
            raise DatasetValidationError(
                f"a dict of arrays holds 'X' and 'y', optionally 'groups' and 'sample_weight', not {sorted(map(str, data))}"
            )
        data = dict(data)
        groups = data.pop(GROUPS, groups)
        sample_weight = data.pop(SAMPLE_WEIGHT, sample_weight)
        X, y = data[FEATURES], data[LABELS]
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        X, y = data
    else:
        raise DatasetValidationError(f"data must be {DATA_FORMS}, not {type(data).__name__}")
    metadata: dict = {"source": "DataFrame" if _is_frame(X) else "arrays"}
    if _is_frame(X):
        metadata["feature_names"] = [str(c) for c in X.columns]
        X = _feature_matrix(X)
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(y, pandas.Series) and y.name is not None:
        metadata["label"] = str(y.name)
    y, class_names = _labels(y, "label array 'y'")
    if class_names is not None:
        metadata["class_names"] = class_names
    return _with_row_arrays({FEATURES: X, LABELS: y}, {GROUPS: groups, SAMPLE_WEIGHT: sample_weight}), metadata


def _with_row_arrays(arrays: dict, given: dict) -> dict:
    """`arrays` with the groups and sample weights given as one value per row (groups text encoded)."""
    for role, values in given.items():
        if values is not None:
            arrays[role] = _labels(values, "group array 'groups'")[0] if role == GROUPS else np.asarray(values)
    return arrays


def _labels(values, what: str) -> tuple[np.ndarray, list[str] | None]:
    """Labels or groups held in Python as numbers: numbers as they are, text encoded as `_encoded` does."""
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(values, pandas.Series):
        return _encoded(values, what)
    array = np.asarray(values)
    if array.dtype.kind in "OUS" and array.ndim == 1:
        import pandas as pd

        return _encoded(pd.Series(array), what)
    return array, None


def _is_frame(value: object) -> bool:
    pandas = sys.modules.get("pandas")  # a DataFrame exists only once pandas is imported
    return pandas is not None and isinstance(value, pandas.DataFrame)


def _feature_matrix(table, where: str = "") -> np.ndarray:
    """The numeric or bool columns of DataFrame `table` as one array (missing values of nullable dtypes: NaN)."""
    import pandas as pd

    not_numeric = [
        c
        for c in table.columns
        if not (pd.api.types.is_numeric_dtype(table[c]) or pd.api.types.is_bool_dtype(table[c]))
    ]
    if not_numeric:
        dtypes = ", ".join(f"{str(c)!r} ({table[c].dtype})" for c in not_numeric[:5])
        raise DatasetValidationError(
            f"feature column(s) {dtypes}{where} are not numeric: encode them, or leave them out by "
            "listing the feature columns (--features)"
        )
    X = table.to_numpy()
    if X.dtype.kind == "O":  # nullable pandas dtypes: missing values become NaN
        X = table.to_numpy(dtype=np.float64, na_value=np.nan)
    return X


def _encoded(series, what: str) -> tuple[np.ndarray, list[str] | None]:
    """A label or group column as numbers: numeric columns as they are, others encoded as sorted integers."""
    import pandas as pd

    missing = series.isna().to_numpy()
    if missing.any():
        raise DatasetValidationError(
            f"{what} has {int(missing.sum())} missing value(s) (first at row {int(np.argmax(missing))})"
        )
    if pd.api.types.is_bool_dtype(series) or pd.api.types.is_numeric_dtype(series):
        values = series.to_numpy()
        if values.dtype.kind == "O":
            values = series.to_numpy(dtype=np.float64)
        return values, None
    codes, uniques = pd.factorize(series, sort=True)
    return codes.astype(np.int64), [str(value) for value in uniques]


def _column_list(columns: Columns) -> list[str] | None:
    if columns is None:
        return None
    if isinstance(columns, str):
        return [c.strip() for c in columns.split(",") if c.strip()]
    return [str(c) for c in columns]


def _read_npz(path: Path, features, label, groups, sample_weight):
    keys = {FEATURES: _single(features, "X"), LABELS: label or "y", GROUPS: groups, SAMPLE_WEIGHT: sample_weight}
    arrays = {}
    with np.load(path, allow_pickle=False) as archive:
        available = list(archive.files)
        for role, key in keys.items():
            if key is None and role in (GROUPS, SAMPLE_WEIGHT):
                key = role if role in available else None
            if key is None:
                continue
            if key not in available:
                raise DatasetValidationError(
                    f"{path.name} has no array {key!r} (it has {', '.join(available) or 'none'}); name the "
                    f"arrays with --features KEY --label KEY"
                )
            try:
                arrays[role] = archive[key]
            except ValueError:
                raise DatasetValidationError(
                    f"array {key!r} in {path.name} is an object array: it would need pickle to load, so it is "
                    "refused; save it with a numeric dtype"
                ) from None
    return arrays, {
        "source": f"file:{path.name}",
        "npz_keys": {role: key for role, key in keys.items() if role in arrays},
    }


def _single(columns: Columns, default: str) -> str:
    names = _column_list(columns)
    if not names:
        return default
    if len(names) != 1:
        raise DatasetValidationError("for an .npz file, --features names the one array that holds the features")
    return names[0]


def _read_npy(path: Path, features, label, groups, sample_weight):
    try:
        table = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as error:
        raise DatasetValidationError(f"cannot read {path.name} without pickle: {error}") from None
    if table.ndim != 2:
        raise DatasetValidationError(
            f"{path.name} holds one array of shape {table.shape}: a .npy source is a 2-D table whose label is "
            "a column (--label NUMBER, default -1); save features and labels together in an .npz instead"
        )
    n_columns = table.shape[1]

    def index(spec, role):
        try:
            number = int(spec)
        except (TypeError, ValueError):
            raise DatasetValidationError(f"{role} of a .npy table is a column number, not {spec!r}") from None
        if not -n_columns <= number < n_columns:
            raise DatasetValidationError(f"{role} column {number} is outside the table's {n_columns} columns")
        return number % n_columns

    label_column = index(label if label is not None else -1, "label")
    extra = {
        role: index(spec, role) for role, spec in ((GROUPS, groups), (SAMPLE_WEIGHT, sample_weight)) if spec is not None
    }
    names = _column_list(features)
    feature_columns = (
        [index(c, "feature") for c in names]
        if names is not None
        else [c for c in range(n_columns) if c != label_column and c not in extra.values()]
    )
    arrays = {FEATURES: _columns(table, feature_columns), LABELS: _columns(table, [label_column])[:, 0]}
    for role, number in extra.items():
        arrays[role] = _columns(table, [number])[:, 0]
    return arrays, {"source": f"file:{path.name}", "feature_columns": feature_columns, "label_column": label_column}


def _columns(table: np.ndarray, columns: list[int]) -> np.ndarray:
    """Columns of a memory-mapped 2-D table. Evenly spaced feature columns (the usual case: all but a first or
    last label column) are a view of the mapping, which the push then reads a block of rows at a time; other
    columns are copied into memory, a block of rows at a time (so the rows read do not stay mapped)."""
    steps = set(np.diff(columns).tolist())
    if len(columns) > 1 and len(steps) == 1 and steps.pop() > 0:
        return table[:, columns[0] : columns[-1] + 1 : columns[1] - columns[0]]
    copy = np.empty((len(table), len(columns)), dtype=table.dtype)
    start = 0
    for block in row_blocks(table, 1 << 20):  # the whole rows of a block are mapped while it is read
        copy[start : start + len(block)] = block[:, columns]
        start += len(block)
    return copy


def name_for_path(path: str | os.PathLike) -> str:
    """The dataset name a file gets when a study names it as its source: its stem, cleaned."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(path).stem).lstrip("._-")[:100]
    return stem or "dataset"


def push_source(
    store: DatasetStore,
    name: str,
    source: str | os.PathLike,
    *,
    features: Columns = None,
    label: str | None = None,
    groups: str | None = None,
    sample_weight: str | None = None,
    task: str | None = None,
    allow_missing: bool = False,
    new_version: bool = False,
    progress: Progress | None = None,
) -> DatasetInfo:
    """Read `source` (see read_source) and push it as `name` (see push_arrays)."""
    arrays, metadata = read_source(source, features=features, label=label, groups=groups, sample_weight=sample_weight)
    return push_arrays(
        store,
        name,
        arrays,
        metadata,
        task=task,
        allow_missing=allow_missing,
        new_version=new_version,
        progress=progress,
    )


def push_arrays(
    store: DatasetStore,
    name: str | None,
    arrays: dict[str, np.ndarray],
    metadata: dict,
    *,
    task: str | None = None,
    allow_missing: bool = False,
    new_version: bool = False,
    progress: Progress | None = None,
) -> DatasetInfo:
    """Push what a reader returned as `name` (None: named after its content, see `DatasetStore.push`).

    `task` ("classification" or "regression") converts the labels to that task's dtype (None: the labels'
    dtype decides, see `task_of`); the task is kept in the metadata, and a warning is logged when the
    inferred one may be wrong (a float label of a few whole values). `allow_missing` accepts NaN features.
    """
    arrays = dict(arrays)
    arrays[LABELS] = labels_for_task(arrays[LABELS], task, encoded="class_names" in metadata)
    metadata = {**metadata, "task": task_of(arrays[LABELS])}
    info = store.push(
        name, arrays, metadata=metadata, new_version=new_version, allow_missing=allow_missing, progress=progress
    )
    note = task_note(arrays[LABELS], metadata.get("label", "y")) if task is None else None
    if note:
        log.warning("%s", note)
    return info


def ensure_dataset(store: DatasetStore, source: str) -> DatasetInfo:
    """The stored dataset for a study's `source`, pushing it first when needed (identical content is never
    transferred twice).

    `source` is "sklearn:NAME" (stored as NAME), a .npz/.npy/.csv/.parquet file (stored under its file
    name's stem, default columns), or a stored dataset ref ("NAME" or "NAME@VERSION").
    """
    text = str(source)
    if text.startswith(BUILTIN_PREFIX):
        arrays, metadata = load_builtin(text[len(BUILTIN_PREFIX) :])
        return _push_for_study(store, text[len(BUILTIN_PREFIX) :], text, arrays, metadata)
    looks_like_file = Path(text).suffix.lower() in FILE_SUFFIXES or os.sep in text or "/" in text
    if looks_like_file and Path(text).expanduser().is_file():
        arrays, metadata = read_source(text)
        return _push_for_study(store, name_for_path(text), text, arrays, metadata)
    try:
        return store.info(text)
    except (DatasetNotFoundError, DatasetValidationError):
        if looks_like_file:
            raise DatasetNotFoundError(f"no file {text!r}, and no dataset of that name in {store.describe()}") from None
        raise


def _push_for_study(store, name, source, arrays, metadata) -> DatasetInfo:
    try:
        return push_arrays(store, name, arrays, metadata)
    except DatasetExistsError:
        latest = store.info(name)
        raise DatasetExistsError(
            f"{source} differs from the stored dataset {latest.ref} it was pushed as: push it as a new version "
            f"(`tlsearch dataset push {name} {source} --new-version`) and name {name!r} in the study"
        ) from None
