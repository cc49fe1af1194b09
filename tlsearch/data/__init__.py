"""Where data lives: the dataset store (MongoDB GridFS or a local folder), the host-local cache, fold plans.

store = open_dataset_store(mongo_uri)               # or None: the local store under tlsearch's home
info = ensure_dataset(store, "sklearn:digits")      # or push_data(store, (X, y)), store.push("name", {"X": X, "y": y})
dataset = HostCache().open(store, info.ref)         # downloaded once per host, memory-mapped
plan = fold_plan_for(store, dataset, KFold(5, shuffle=True, random_state=0))
fold = dataset.fold(plan, 0)                        # fold.train["X"], fold.validation["y"], no copies
"""

from tlsearch.data._cache import CacheEntry, HostCache
from tlsearch.data._dataset import Dataset
from tlsearch.data._fold_views import FoldArrays, Folds
from tlsearch.data._folds import FoldPlan, describe_splitter
from tlsearch.data._hashing import hash_arrays
from tlsearch.data._info import ARRAY_NAMES, DatasetInfo, parse_ref
from tlsearch.data._open import open_dataset_store
from tlsearch.data._push import push_data, push_dataset
from tlsearch.data._sources import (
    BUILTINS,
    DATA_FORMS,
    arrays_from_data,
    arrays_from_frame,
    ensure_dataset,
    is_data,
    load_builtin,
    push_arrays,
    push_source,
    read_source,
)
from tlsearch.data._splitting import compute_fold_plan, fold_plan_for
from tlsearch.data._store import DatasetStore, TransferStats
from tlsearch.errors import (
    DatasetBusyError,
    DatasetCorruptedError,
    DatasetError,
    DatasetExistsError,
    DatasetNotFoundError,
    DatasetValidationError,
    FoldPlanMismatchError,
    FoldPlanNotFoundError,
)

__all__ = [
    "ARRAY_NAMES",
    "BUILTINS",
    "DATA_FORMS",
    "CacheEntry",
    "Dataset",
    "DatasetBusyError",
    "DatasetCorruptedError",
    "DatasetError",
    "DatasetExistsError",
    "DatasetInfo",
    "DatasetNotFoundError",
    "DatasetStore",
    "DatasetValidationError",
    "FoldArrays",
    "Folds",
    "FoldPlan",
    "FoldPlanMismatchError",
    "FoldPlanNotFoundError",
    "HostCache",
    "TransferStats",
    "arrays_from_data",
    "arrays_from_frame",
    "compute_fold_plan",
    "describe_splitter",
    "ensure_dataset",
    "fold_plan_for",
    "hash_arrays",
    "is_data",
    "load_builtin",
    "open_dataset_store",
    "parse_ref",
    "push_arrays",
    "push_data",
    "push_dataset",
    "push_source",
    "read_source",
]


def __getattr__(name: str):
    if name == "Fold":  # renamed: `tlsearch.models.Fold` is the fold a model trains on
        import warnings

        from tlsearch._renamed import REMOVED_IN

        warnings.warn(
            f"tlsearch.data.Fold is deprecated and removed in {REMOVED_IN}: use tlsearch.data.FoldArrays",
            DeprecationWarning,
            stacklevel=2,
        )
        return FoldArrays
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
