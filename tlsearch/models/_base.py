"""The data contract between cv.evaluate and the model adapters: one fold in, one fold's result out."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tlsearch._renamed import REMOVED_IN


def is_class_labels(y: np.ndarray) -> bool:
    """True when y holds class labels: integers, booleans or strings taking two or more values.

    A float y is a continuous target even when its values are whole numbers (counts, prices): give an
    explicit splitter or KerasModel(task="classification") for float-coded labels.
    """
    from sklearn.utils.multiclass import type_of_target

    return np.asarray(y).dtype.kind in "biuOSU" and type_of_target(y) in ("binary", "multiclass")


@dataclass
class Fold:
    """One fold's rows, already read from the dataset (only these rows are in memory).

    index is the fold's 0-based position in its plan; seed is the fold's seed, derived from (study seed, study name,
    trial number, index); random and numpy_random are the fold's own generators (a random.Random and a NumPy
    Generator seeded with it, unless given), which no other thread draws from; sample_weight holds the training rows' weights, or None; trial_number is the
    trial's number. epoch_hook, where the study prunes on epochs (tlsearch.cv.epoch_hook), is called by
    trainers that train in epochs after each epoch as `epoch_hook(epoch, max_epochs, score_now)`: epoch is
    1-based, score_now() returns the model's first metric on the validation rows now; it may raise
    optuna.TrialPruned.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_validation: np.ndarray
    y_validation: np.ndarray
    index: int
    seed: int
    sample_weight: np.ndarray | None = None
    trial_number: int | None = None
    epoch_hook: Callable[[int, int, Callable[[], float]], None] | None = None
    random: random.Random = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    numpy_random: np.random.Generator = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.random is None:
            self.random = random.Random(self.seed)
        if self.numpy_random is None:
            self.numpy_random = np.random.default_rng(self.seed)

    @property
    def x_valid(self) -> np.ndarray:
        """Deprecated name of `x_validation`."""
        warnings.warn(
            f"Fold.x_valid is deprecated and removed in {REMOVED_IN}: use Fold.x_validation",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.x_validation

    @property
    def y_valid(self) -> np.ndarray:
        """Deprecated name of `y_validation`."""
        warnings.warn(
            f"Fold.y_valid is deprecated and removed in {REMOVED_IN}: use Fold.y_validation",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.y_validation


@dataclass
class FoldResult:
    """Scores (one per metric, in the study's metric order) and timings of one fold, in seconds."""

    test_scores: list[float]
    fit_time: float
    score_time: float
    train_scores: list[float] | None = None
    n_epochs: int | None = None
    curve: list[list[float]] | None = None
    history: dict[str, list] | None = None  # per-epoch values as Keras logs them, keyed by name, plus "epoch"
    predictions: np.ndarray | None = None  # on the validation rows, when the study keeps them


class SpecView(Protocol):
    """What the trainers and `cv` read of a study's `tlsearch.StudySpec` (tlsearch.spec is a layer above)."""

    name: str
    seed: int
    model: ModelKind
    metrics: tuple
    return_train_score: bool
    keep_predictions: bool


class ModelKind:
    """A kind of model a study trains (KerasModel, SklearnModel, CustomLoop): its declaration, and the trainer
    that fits and scores it per fold (`trainer(spec, arrays)`), as KerasTuner's HyperModel owns build and fit."""

    default_metric = "score"  # the metric's name when the study gives none
    metrics_are_scorers = False  # metric names are scikit-learn scorer names (and greater is better)
    gathers_fold_rows = False  # folds are gathered rows in index order (cross_validate's), not cache views
    framework = ""  # "keras", "sklearn" or "custom": how a refit model is saved

    def trainer(self, spec: SpecView, arrays: Mapping[str, np.ndarray]) -> FoldTrainer:
        raise NotImplementedError


class FoldTrainer(Protocol):
    """Builds a fresh model for each fold, fits it on the fold's training rows and scores it; `close()` once
    the trial's folds are done (a trainer that keeps nothing across folds inherits this one)."""

    def run(self, params: dict, fold: Fold) -> FoldResult: ...

    def fit_full(
        self, params: dict, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None, seed: int
    ) -> Any: ...

    def close(self) -> None:
        """Free what the trainer keeps across the trial's folds (the Keras trainer: the trial's model)."""
