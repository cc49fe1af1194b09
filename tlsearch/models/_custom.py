"""Custom-loop adapter: the user's function trains and scores one fold itself."""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from tlsearch.models._base import Fold, FoldResult

if TYPE_CHECKING:
    from tlsearch.study import StudySpec


class CustomLoopTrainer:
    """Calls `fn(params, fold, report)`; its whole run counts as fit time (scoring is not timed apart)."""

    def __init__(self, spec: StudySpec) -> None:
        self._loop = spec.model
        self._n_metrics = len(spec.metrics)

    def run(self, params: dict, fold: Fold) -> FoldResult:
        curve: list[list[float]] = []

        def report(value: float, step: int) -> None:
            curve.append([int(step), float(value)])

        random.seed(fold.seed)
        np.random.seed(fold.seed)
        started = time.perf_counter()
        returned = self._loop.fn(params, fold, report)
        fit_time = time.perf_counter() - started
        scores = list(returned) if isinstance(returned, (list, tuple, np.ndarray)) else [returned]
        if len(scores) != self._n_metrics:
            raise ValueError(f"CustomLoop.fn returned {len(scores)} scores for {self._n_metrics} metrics")
        return FoldResult(test_scores=[float(score) for score in scores], fit_time=fit_time, score_time=0.0,
                          n_epochs=len(curve) or None, curve=curve or None)

    def fit_full(self, params: dict, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None,
                 seed: int) -> Any:
        if self._loop.refit is None:
            raise TypeError("this study's CustomLoop has no refit function: give CustomLoop(fn, refit=...) "
                            "to train a final model")
        random.seed(seed)
        np.random.seed(seed)
        return self._loop.refit(params, X, y)
