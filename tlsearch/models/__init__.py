"""The kinds of model a study trains, each with its trainer (fit one fold and score it, or fit all rows).

`spec.model.trainer(spec, arrays)` returns the trainer for the study's model; cv.evaluate calls its
`run(params, fold)` once per fold, refit its `fit_full(params, X, y, sample_weight, seed)`.
"""

from __future__ import annotations

from tlsearch.errors import NonFiniteLossError, NonFiniteScoreError
from tlsearch.models._base import Fold, FoldResult, FoldTrainer, ModelKind, SpecView, is_class_labels
from tlsearch.models._custom import CustomLoop
from tlsearch.models._keras import KerasModel, Target, describe_target
from tlsearch.models._keras_backend import import_keras, prepare_worker  # import keras only when called
from tlsearch.models._sklearn import SklearnModel

__all__ = [
    "CustomLoop",
    "Fold",
    "FoldResult",
    "FoldTrainer",
    "KerasModel",
    "ModelKind",
    "NonFiniteLossError",
    "NonFiniteScoreError",
    "SklearnModel",
    "SpecView",
    "Target",
    "describe_target",
    "import_keras",
    "is_class_labels",
    "prepare_worker",
]
