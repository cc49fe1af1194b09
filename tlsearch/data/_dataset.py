"""An open dataset of the host cache (`_cache.HostCache.open`): memory-mapped arrays, and its folds as views."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

import numpy as np

from tlsearch.data._fold_views import FoldArrays, FoldLayout, Folds, fold_views, gathered_fold
from tlsearch.data._folds import FoldPlan
from tlsearch.data._info import GROUPS, SAMPLE_WEIGHT, DatasetInfo
from tlsearch.data._locks import UseLock
from tlsearch.errors import FoldPlanMismatchError

# How a dataset gets a plan's fold layout, laid out once per host: the cache's, which owns the files.
OpenLayout = Callable[["Dataset", FoldPlan], tuple[FoldLayout, dict[str, np.ndarray]]]


class Dataset:
    """A cached dataset, open: read-only memory-mapped arrays shared with every process on the host.

    `dataset["X"]`, `dataset.arrays`, `dataset.info`; `dataset.fold(plan, index)` gives that fold's arrays without
    copying rows. While open, the dataset is not evicted from the cache; `close()` (or exit) releases it.
    """

    def __init__(
        self, info: DatasetInfo, arrays: dict[str, np.ndarray], path: Path, lock: UseLock, open_layout: OpenLayout
    ) -> None:
        self.info = info
        self.arrays: Mapping[str, np.ndarray] = MappingProxyType(arrays)
        self.path = path
        self._lock = lock
        self._open_layout = open_layout
        self._layouts: dict[str, tuple[FoldLayout, dict[str, np.ndarray]]] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __contains__(self, name: object) -> bool:
        return name in self.arrays

    def keys(self):
        return self.arrays.keys()

    @property
    def X(self) -> np.ndarray:  # noqa: N802 - the name every scikit-learn user expects
        return self.arrays["X"]

    @property
    def y(self) -> np.ndarray:
        return self.arrays["y"]

    @property
    def groups(self) -> np.ndarray | None:
        return self.arrays.get(GROUPS)

    @property
    def sample_weight(self) -> np.ndarray | None:
        return self.arrays.get(SAMPLE_WEIGHT)

    @property
    def n_rows(self) -> int:
        return self.info.n_rows

    def fold(self, plan: FoldPlan, index: int, *, layout: bool = True) -> FoldArrays:
        """The arrays of fold `index` of `plan` as read-only views (no rows copied); the first call per plan lays the rows out
        in this host's cache, once per host, taking about (2 - 1/n_splits) × the dataset on disk.

        `layout=False` gathers the fold's rows into new in-memory arrays instead (plan order, one copy per
        process), for datasets too large to lay out."""
        if not 0 <= index < plan.n_splits:
            raise IndexError(f"fold {index} out of range: the plan has {plan.n_splits} folds")
        if plan.dataset_hash != self.info.hash:
            raise FoldPlanMismatchError(
                f"fold plan {plan.hash[:12]} was made for content sha256 {plan.dataset_hash[:12]}, "
                f"not for {self.info.ref} (sha256 {self.info.hash[:12]})"
            )
        if not layout:
            return gathered_fold(index, self.arrays, *plan.folds[index])
        if plan.hash not in self._layouts:
            self._layouts[plan.hash] = self._open_layout(self, plan)
        layout, arrays = self._layouts[plan.hash]
        return fold_views(index, layout.spans[index], self.arrays, arrays, layout.order)

    def folds(self, plan: FoldPlan, *, layout: bool = True) -> Folds:
        """Every fold of `plan`, each made when read (see `fold`)."""
        return Folds(plan.n_splits, lambda index: self.fold(plan, index, layout=layout))

    def close(self) -> None:
        """Let the cache evict this dataset again (arrays already handed out stay readable)."""
        self._lock.release()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __reduce__(self):
        raise TypeError(
            "a Dataset maps this host's cache and is not sent between processes: "
            "send its ref and open it with HostCache().open(store, ref) where it is needed"
        )

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={tuple(v.shape)}" for k, v in self.arrays.items())
        return f"<Dataset {self.info.ref} sha256:{self.info.hash[:12]} {shapes}>"
