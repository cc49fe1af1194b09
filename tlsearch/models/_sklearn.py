"""scikit-learn adapter: a fresh estimator from the factory per fold, scored by scikit-learn scorers."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tlsearch.models._base import Fold, FoldResult, FoldTrainer, ModelKind, SpecView
from tlsearch.models._checks import require
from tlsearch.models._fold_random import seed_thread

Scorer = Callable[[Any, np.ndarray, np.ndarray], float]


def resolve_scorer(metric: Any) -> Scorer:
    """A scorer(estimator, X, y): a scorer name, a callable scorer, or None for the estimator's own score."""
    if metric is None:
        return lambda estimator, X, y: estimator.score(X, y)
    if isinstance(metric, str):
        from sklearn.metrics import get_scorer

        return get_scorer(metric)
    return metric


class SklearnTrainer(FoldTrainer):
    """Fits `spec.model.factory(params)` on each fold, like scikit-learn's cross_validate."""

    def __init__(self, spec: SpecView) -> None:
        self._factory = spec.model.factory
        self._scorers = [resolve_scorer(metric) for metric in spec.metrics]
        self._return_train_score = spec.return_train_score
        self._keep_predictions = spec.keep_predictions

    def _new_estimator(self, params: dict, seed: int) -> Any:
        # Estimators left with random_state=None draw from NumPy's global generator: seed it per fold.
        seed_thread(seed)
        estimator = self._factory(params)
        if not callable(getattr(estimator, "fit", None)):
            raise TypeError(f"SklearnModel.factory returned {type(estimator).__name__}, which has no fit method")
        return estimator

    def run(self, params: dict, fold: Fold) -> FoldResult:
        estimator = self._new_estimator(params, fold.seed)
        fit_params = {} if fold.sample_weight is None else {"sample_weight": fold.sample_weight}
        started = time.perf_counter()
        estimator.fit(fold.x_train, fold.y_train, **fit_params)
        fit_time = time.perf_counter() - started
        started = time.perf_counter()
        test_scores = [float(scorer(estimator, fold.x_validation, fold.y_validation)) for scorer in self._scorers]
        score_time = time.perf_counter() - started
        train_scores = None
        if self._return_train_score:
            train_scores = [float(scorer(estimator, fold.x_train, fold.y_train)) for scorer in self._scorers]
        predictions = estimator.predict(fold.x_validation) if self._keep_predictions else None
        return FoldResult(
            test_scores=test_scores,
            fit_time=fit_time,
            score_time=score_time,
            train_scores=train_scores,
            predictions=predictions,
        )

    def score(self, model: Any, x: np.ndarray, y: np.ndarray) -> list[float]:
        """The study's metrics of a fitted model on rows x, y."""
        return [float(scorer(model, x, y)) for scorer in self._scorers]

    def fit_full(self, params: dict, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None, seed: int) -> Any:
        estimator = self._new_estimator(params, seed)
        fit_params = {} if sample_weight is None else {"sample_weight": sample_weight}
        return estimator.fit(X, y, **fit_params)


@dataclass
class SklearnModel(ModelKind):
    """A scikit-learn estimator per fold: `factory(params)` returns a fresh, unfitted estimator."""

    factory: Callable[[dict], Any]

    def __post_init__(self) -> None:
        require(callable(self.factory), "SklearnModel.factory", "must be a function params -> scikit-learn estimator")

    metrics_are_scorers = True
    gathers_fold_rows = True
    framework = "sklearn"

    def trainer(self, spec: SpecView, arrays: Mapping[str, np.ndarray]) -> SklearnTrainer:
        return SklearnTrainer(spec)
