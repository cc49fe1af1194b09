"""Zero-copy fold arrays: each fold's train and validation rows as contiguous slices of memory-mapped files.

A fold's rows are scattered through the dataset, and gathering them (`X[train]`) copies them into every
process that trains on the fold. Instead the host cache lays the rows out once per fold plan, in an order
where every fold's train and validation rows are each one contiguous range:

- a fold whose rows already form ranges of the dataset (TimeSeriesSplit, unshuffled hold-out) uses the
  dataset's own arrays;
- folds whose validation sets partition the rows (KFold, StratifiedKFold, GroupKFold, each repetition of
  RepeatedStratifiedKFold, ...) share one circular layout: validation sets V0..Vm-1 are written in order,
  followed again by all but the last, so fold k's validation is Vk and its train is Vk+1..Vm-1,V0..Vk-1,
  one range. This costs (2 - 1/m) × the dataset, for all m folds together;
- any other fold gets its own train and validation rows written out.

Train rows then come in layout order, not sorted: `FoldArrays.train_index` says which dataset row each is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

Span = tuple[str, int, int]  # ("dataset" | "layout", start, stop)


@dataclass(frozen=True)
class FoldArrays:
    """One fold's arrays ("X", "y", and "groups"/"sample_weight" when the dataset has them), read-only views.

    `train_index[i]` is the dataset row of `train[...][i]` (same for validation); as sets they equal the plan's.
    """

    index: int
    train: Mapping[str, np.ndarray]
    validation: Mapping[str, np.ndarray]
    train_index: np.ndarray
    validation_index: np.ndarray


class Folds(Sequence[FoldArrays]):
    """The folds of one trial, each made when it is read (`make(index)`): gathered rows cost one fold's
    memory at a time, not all of them at once."""

    def __init__(self, count: int, make: Callable[[int], FoldArrays]) -> None:
        self._count, self._make = count, make

    @classmethod
    def gathered(cls, arrays: Mapping[str, np.ndarray], pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> Folds:
        """Folds from (train rows, validation rows) index pairs, as scikit-learn's splitters yield them."""
        return cls(len(pairs), lambda index: gathered_fold(index, arrays, *pairs[index]))

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):  # an int (a slice gives a list)
        if isinstance(index, slice):
            return [self[i] for i in range(self._count)[index]]
        if not -self._count <= index < self._count:
            raise IndexError(f"fold {index} out of range: there are {self._count} folds")
        return self._make(index % self._count)


def gathered_fold(
    index: int, arrays: Mapping[str, np.ndarray], train: np.ndarray, validation: np.ndarray
) -> FoldArrays:
    """The arrays of fold `index`, with its rows copied out of `arrays` in index order, as scikit-learn's cross_validate
    does (row order matters to bootstrap and SGD estimators)."""
    return FoldArrays(
        index,
        MappingProxyType({name: np.asarray(array[train]) for name, array in arrays.items()}),
        MappingProxyType({name: np.asarray(array[validation]) for name, array in arrays.items()}),
        np.asarray(train),
        np.asarray(validation),
    )


@dataclass(frozen=True)
class FoldLayout:
    """Where each fold's rows lie. `order[i]` is the dataset row stored at layout row i."""

    order: np.ndarray
    spans: list[tuple[Span, Span]]

    def to_document(self) -> dict:
        return {
            "rows": int(len(self.order)),
            "spans": [[list(train), list(validation)] for train, validation in self.spans],
        }

    @classmethod
    def from_document(cls, document: dict, order: np.ndarray) -> FoldLayout:
        spans = [(tuple(train), tuple(validation)) for train, validation in document["spans"]]
        return cls(order, spans)


def plan_layout(folds: list[tuple[np.ndarray, np.ndarray]], n_rows: int) -> FoldLayout:
    """The layout of a plan's folds (see the module docstring)."""
    segments: list[np.ndarray] = []
    spans: list[tuple[Span, Span]] = []
    position = 0
    k = 0
    while k < len(folds):
        train, validation = folds[k]
        train_range, validation_range = _as_range(train), _as_range(validation)
        if train_range and validation_range:
            spans.append((("dataset", *train_range), ("dataset", *validation_range)))
            k += 1
            continue
        size = _partition_size(folds, k, n_rows)
        if size:
            blocks = [folds[j][1] for j in range(k, k + size)]
            starts = np.concatenate([[0], np.cumsum([len(b) for b in blocks])]).tolist()
            segments += [np.concatenate(blocks), np.concatenate(blocks)[: n_rows - len(blocks[-1])]]
            for j, block in enumerate(blocks):
                train_start = position + starts[j + 1]
                spans.append(
                    (
                        ("layout", train_start, train_start + n_rows - len(block)),
                        ("layout", position + starts[j], position + starts[j + 1]),
                    )
                )
            position += 2 * n_rows - len(blocks[-1])
            k += size
            continue
        segments += [train, validation]
        spans.append(
            (
                ("layout", position, position + len(train)),
                ("layout", position + len(train), position + len(train) + len(validation)),
            )
        )
        position += len(train) + len(validation)
        k += 1
    order = np.concatenate(segments).astype(np.int64) if segments else np.zeros(0, np.int64)
    return FoldLayout(order, spans)


def _as_range(rows: np.ndarray) -> tuple[int, int] | None:
    """(start, stop) when `rows` is start, start+1, ..., stop-1 (an empty array is the range (0, 0))."""
    if len(rows) == 0:
        return (0, 0)
    start = int(rows[0])
    if int(rows[-1]) - start + 1 != len(rows) or (len(rows) > 1 and not (np.diff(rows) == 1).all()):
        return None
    return (start, start + len(rows))


def _partition_size(folds, first: int, n_rows: int) -> int:
    """How many folds from `first` on have validation sets that partition all rows, each with the rest as
    train; 0 when they do not."""
    covered = np.zeros(n_rows, dtype=bool)
    for k in range(first, len(folds)):
        train, validation = folds[k]
        if len(validation) == 0 or len(train) + len(validation) != n_rows:
            return 0
        mark = np.zeros(n_rows, dtype=bool)
        mark[validation] = True
        if int(mark.sum()) != len(validation) or covered[validation].any():
            return 0
        mark[train] = True
        if not mark.all():
            return 0
        covered[validation] = True
        if covered.all():
            return k - first + 1
    return 0


def fold_views(
    index: int,
    spans: tuple[Span, Span],
    dataset_arrays: Mapping[str, np.ndarray],
    layout_arrays: Mapping[str, np.ndarray],
    order: np.ndarray,
) -> FoldArrays:
    """The arrays of fold `index` as views into the dataset's or the layout's memory-mapped arrays."""
    parts = []
    for source, start, stop in spans:
        if source == "dataset":
            arrays, rows = dataset_arrays, np.arange(start, stop, dtype=np.int64)
        else:
            arrays, rows = layout_arrays, order[start:stop]
        parts.append((MappingProxyType({name: array[start:stop] for name, array in arrays.items()}), rows))
    (train, train_index), (validation, validation_index) = parts
    return FoldArrays(index, train, validation, train_index, validation_index)


def write_layout_rows(source: np.ndarray, order: np.ndarray, target: np.ndarray, max_bytes: int = 32 << 20) -> None:
    """target[i] = source[order[i]], gathered in pieces of at most `max_bytes` so memory stays bounded."""
    row_bytes = max(1, source.dtype.itemsize * int(np.prod(source.shape[1:], dtype=np.int64)))
    step = max(1, max_bytes // row_bytes)
    for start in range(0, len(order), step):
        target[start : start + step] = source[order[start : start + step]]
