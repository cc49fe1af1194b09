"""Model adapters: fit one fold and score it (Keras, scikit-learn, or a custom loop), or fit all rows.

`trainer_for(spec, arrays)` returns the adapter for the study's model; cv.evaluate calls its `run(params,
fold)` once per fold. `fit_full(spec, params, X, y)` trains one model on all rows (for a later refit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tlsearch.models._base import (
    Fold,
    FoldResult,
    FoldTrainer,
    NonFiniteLossError,
    NonFiniteScoreError,
    is_class_labels,
)
from tlsearch.models._keras import (  # import keras only when called
    Target,
    describe_target,
    import_keras,
    prepare_worker,
)

if TYPE_CHECKING:
    from tlsearch.study import StudySpec

__all__ = ["Fold", "FoldResult", "FoldTrainer", "NonFiniteLossError", "NonFiniteScoreError", "Target",
           "derive_seed", "describe_target", "fit_full", "import_keras", "is_class_labels", "trainer_for",
           "prepare_worker"]


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed from any printable parts, the same in every process (unlike hash())."""
    digest = hashlib.sha256("/".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def trainer_for(spec: StudySpec, arrays: Mapping[str, np.ndarray]) -> FoldTrainer:
    """The adapter for `spec.model`; for Keras it reads the full y once, to find the classes."""
    from tlsearch.study import CustomLoop, KerasModel, SklearnModel

    if isinstance(spec.model, SklearnModel):
        from tlsearch.models._sklearn import SklearnTrainer

        return SklearnTrainer(spec)
    if isinstance(spec.model, KerasModel):
        from tlsearch.models._keras import KerasTrainer

        X, y = arrays["X"], arrays["y"]
        return KerasTrainer(spec, tuple(X.shape[1:]), describe_target(np.asarray(y), spec.model.task))
    if isinstance(spec.model, CustomLoop):
        from tlsearch.models._custom import CustomLoopTrainer

        return CustomLoopTrainer(spec)
    raise TypeError(f"unsupported model {type(spec.model).__name__}")


def fit_full(spec: StudySpec, params: dict, X: np.ndarray, y: np.ndarray, *,
             sample_weight: np.ndarray | None = None) -> Any:
    """Train one model with `params` on all rows of X, y and return it (a fitted estimator or keras.Model).

    Keras classification models are trained on labels encoded as indices into np.unique(y).
    """
    return trainer_for(spec, {"X": X, "y": y}).fit_full(params, X, y, sample_weight, full_fit_seed(spec))


def full_fit_seed(spec: StudySpec) -> int:
    """The seed of a final model trained on all rows (distinct from every fold's)."""
    return derive_seed(spec.seed, spec.name, "full")
