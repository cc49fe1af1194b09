"""Where data lives: the dataset store (MongoDB GridFS or a local folder) and fold plans."""

from tlsearch.data._errors import (DatasetBusyError, DatasetCorruptedError, DatasetError, DatasetExistsError,
                                   DatasetNotFoundError, DatasetValidationError, FoldPlanMismatchError,
                                   FoldPlanNotFoundError)
from tlsearch.data._folds import FoldPlan, compute_fold_plan, describe_splitter, fold_plan_for
from tlsearch.data._hashing import hash_arrays
from tlsearch.data._info import ARRAY_NAMES, DatasetInfo, parse_ref
from tlsearch.data._store import DatasetStore, TransferStats, open_dataset_store

__all__ = [
    "ARRAY_NAMES", "DatasetBusyError", "DatasetCorruptedError", "DatasetError", "DatasetExistsError", "DatasetInfo",
    "DatasetNotFoundError", "DatasetStore", "DatasetValidationError", "FoldPlan", "FoldPlanMismatchError",
    "FoldPlanNotFoundError", "TransferStats", "compute_fold_plan", "describe_splitter", "fold_plan_for",
    "hash_arrays", "open_dataset_store", "parse_ref",
]
