"""Fold plans: a study's cross-validation split, computed once from the dataset and stored by content hash.

Every trial, worker and resume of a study reads the same stored plan instead of re-running the splitter,
so even a splitter with shuffle=True and no random_state gives every trial the same folds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tlsearch.data._hashing import hash_fold_plan
from tlsearch.data._paths import check_sha256
from tlsearch.errors import DatasetCorruptedError, DatasetValidationError, FoldPlanMismatchError


@dataclass(frozen=True, eq=False)
class FoldPlan:
    """The folds of one dataset under one splitter.

    `folds[k]` is (train rows, validation rows) as int64 arrays of row indices into the dataset;
    `hash` covers the dataset hash, the splitter description and every index.
    """

    hash: str
    dataset_hash: str
    splitter: str
    n_rows: int
    folds: list[tuple[np.ndarray, np.ndarray]]

    @property
    def n_splits(self) -> int:
        return len(self.folds)

    @classmethod
    def build(
        cls, dataset_hash: str, splitter: str, n_rows: int, folds: Sequence[tuple[Sequence[int], Sequence[int]]]
    ) -> FoldPlan:
        """A plan from index pairs; checks every index is a row of the dataset."""
        checked = []
        for k, (train, validation) in enumerate(folds):
            pair = []
            for part, rows in (("train", train), ("validation", validation)):
                rows = np.asarray(rows)
                if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
                    raise DatasetValidationError(
                        f"{splitter} gave fold {k} {part} rows that are not a 1-D integer array"
                    )
                rows = rows.astype(np.int64)
                if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
                    raise DatasetValidationError(f"{splitter} gave fold {k} {part} rows outside 0..{n_rows - 1}")
                rows.setflags(write=False)
                pair.append(rows)
            checked.append(tuple(pair))
        if not checked:
            raise DatasetValidationError(f"{splitter} gave no folds")
        return cls(
            hash_fold_plan(dataset_hash, splitter, n_rows, checked), dataset_hash, splitter, int(n_rows), checked
        )

    def check_matches(self, dataset_info, splitter) -> None:
        """`dataset_info` is a DatasetInfo or a Dataset (its `.info`). Raise FoldPlanMismatchError saying what changed when this plan was not made from that dataset
        content with that splitter (a resume must use the same data and split)."""
        info = getattr(dataset_info, "info", dataset_info)
        problems = []
        if info.hash != self.dataset_hash:
            problems.append(
                f"the dataset changed: the plan was made from content sha256 {self.dataset_hash[:12]} "
                f"({self.n_rows} rows), but {info.ref} is sha256 {info.hash[:12]} ({info.n_rows} rows)"
            )
        description = describe_splitter(splitter)
        if description != self.splitter:
            problems.append(f"the splitter changed: the plan was made with {self.splitter}, now it is {description}")
        if problems:
            raise FoldPlanMismatchError(
                f"fold plan {self.hash[:12]} does not match: {'; '.join(problems)}. Resume with the original "
                "dataset and splitter, or start a new study"
            )

    # -- storage form: a plain document plus one int64 array of all indices ----------------------------
    def to_document(self) -> dict:
        return {
            "hash": self.hash,
            "dataset_hash": self.dataset_hash,
            "splitter": self.splitter,
            "n_rows": self.n_rows,
            "sizes": [[len(t), len(v)] for t, v in self.folds],
        }

    def packed_indices(self) -> np.ndarray:
        """Every fold's train then validation indices, concatenated (int64)."""
        parts = [rows for pair in self.folds for rows in pair]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    @classmethod
    def from_stored(cls, document: dict, packed: np.ndarray, *, check: bool = True) -> FoldPlan:
        """The plan from its stored form; DatasetCorruptedError when the indices do not match its hash
        (`check=False` skips re-hashing, for copies already checked, like the host cache's)."""
        packed = np.asarray(packed)
        folds, start = [], 0
        try:
            for n_train, n_validation in document["sizes"]:
                train = packed[start : start + n_train]
                validation = packed[start + n_train : start + n_train + n_validation]
                start += n_train + n_validation
                folds.append((train, validation))
            complete = start == len(packed) and packed.dtype == np.int64
            actual = document["hash"]
            if check:
                actual = hash_fold_plan(document["dataset_hash"], document["splitter"], document["n_rows"], folds)
        except (KeyError, TypeError, ValueError):
            complete, actual = False, ""
        if not complete or actual != document.get("hash"):
            raise DatasetCorruptedError(
                f"stored fold plan {str(document.get('hash'))[:12]} is damaged (its indices do not match its hash)"
            )
        check_sha256(document["dataset_hash"], "fold plan's dataset hash")
        return cls(actual, document["dataset_hash"], document["splitter"], int(document["n_rows"]), folds)


def describe_splitter(splitter) -> str:
    """A deterministic description of a splitter, for the mismatch check: its repr without memory addresses
    (scikit-learn splitters list their parameters), or its class and public attributes."""
    if not callable(getattr(splitter, "split", None)):
        raise DatasetValidationError(
            f"{type(splitter).__name__} is not a splitter: it needs a split(X, y, groups) method "
            "(e.g. sklearn.model_selection.KFold)"
        )
    description = repr(splitter)
    if description.startswith("<"):  # the default object repr says nothing about the parameters
        fields = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(splitter).items()) if not k.startswith("_"))
        description = f"{type(splitter).__qualname__}({fields})"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", " ".join(description.split()))
