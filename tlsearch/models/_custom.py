"""Custom-loop adapter: the user's function trains and scores one fold itself."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tlsearch.models._base import Fold, FoldResult, FoldTrainer, ModelKind, SpecView
from tlsearch.models._checks import require
from tlsearch.models._fold_random import seed_thread


class CustomLoopTrainer(FoldTrainer):
    """Calls `fn(params, fold, report)`; its whole run counts as fit time (scoring is not timed apart)."""

    def __init__(self, spec: SpecView) -> None:
        self._loop = spec.model
        self._n_metrics = len(spec.metrics)

    def run(self, params: dict, fold: Fold) -> FoldResult:
        curve: list[list[float]] = []

        def report(value: float, step: int) -> None:
            curve.append([int(step), float(value)])

        seed_thread(fold.seed)
        started = time.perf_counter()
        returned = self._loop.fn(params, fold, report)
        fit_time = time.perf_counter() - started
        scores = list(returned) if isinstance(returned, (list, tuple, np.ndarray)) else [returned]
        if len(scores) != self._n_metrics:
            raise ValueError(f"CustomLoop.fn returned {len(scores)} scores for {self._n_metrics} metrics")
        return FoldResult(
            test_scores=[float(score) for score in scores],
            fit_time=fit_time,
            score_time=0.0,
            n_epochs=len(curve) or None,
            curve=curve or None,
        )

    def fit_full(self, params: dict, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None, seed: int) -> Any:
        if self._loop.refit is None:
            raise TypeError(
                "this study's CustomLoop has no refit function: give CustomLoop(fn, refit=...) to train a final model"
            )
        seed_thread(seed)
        return self._loop.refit(params, X, y)


@dataclass
class CustomLoop(ModelKind):
    """Your own training loop: `fn(params, fold, report) -> score` (a list of scores when multi-objective).

    `fold` has x_train, y_train, x_validation, y_validation, index (the 0-based fold index), seed, sample_weight
    (the training rows' weights or None), and the fold's own generators `random` (a `random.Random`) and
    `numpy_random` (a NumPy `Generator`), seeded from its seed: draw from these, not from the global `random`
    or `np.random`, which are seeded per fold too but shared with other threads of a worker (Dask's among them). The arrays are read-only views of this host's dataset cache:
    copy them (`np.array(fold.x_train)`) before changing them in place. `report(value, step)` records a
    point of the fold's learning curve (kept as the trial's user attribute `split{index}_curve`). `refit(params, X, y)`, if given,
    trains a final model on all rows for `tlsearch.models.fit_full`.
    """

    fn: Callable[[dict, Fold, Callable[[float, int], None]], Any]
    refit: Callable[[dict, Any, Any], Any] | None = None

    def __post_init__(self) -> None:
        require(callable(self.fn), "CustomLoop.fn", "must be a function (params, fold, report) -> score")
        require(self.refit is None or callable(self.refit), "CustomLoop.refit", "must be a function or None")

    framework = "custom"

    def trainer(self, spec: SpecView, arrays: Mapping[str, np.ndarray]) -> CustomLoopTrainer:
        return CustomLoopTrainer(spec)
