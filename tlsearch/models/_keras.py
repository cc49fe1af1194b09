"""Keras adapter: build a compiled model per fold, fit it on the fold's rows, score it, free it with the trial.

Keras is imported here, on first use, so scikit-learn studies never pay for TensorFlow. Only the Keras 3
API is used, so KERAS_BACKEND (tensorflow by default, or jax) picks the backend; others are refused
(`_keras_backend.check_backend`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tlsearch.errors import NonFiniteLossError
from tlsearch.models import _keras_inputs as inputs
from tlsearch.models import _keras_reuse as reuse
from tlsearch.models._base import Fold, FoldResult, ModelKind, SpecView, is_class_labels
from tlsearch.models._checks import is_int, require
from tlsearch.models._keras_backend import (
    check_backend,
    clear_session,
    custom_gradient_names,
    forget_custom_gradients,
    forget_kernels,
    import_keras,
    requested_backend,
    set_random_seed,
)
from tlsearch.models._sklearn import resolve_scorer

# Training steps per call into the backend when a study leaves steps_per_execution at 1 and has no callbacks of
# its own (Keras calls batch-level callbacks once per call, so theirs would see fewer batches): a step of a
# small model is mostly Python overhead, and this made a warm 3-epoch fit of the digits MLP 2.7x faster.
STEPS_PER_EXECUTION = 32
HISTORY_EPOCHS = 50  # at most this many epochs of a fold's Keras history are kept on the trial (evenly spaced)


@dataclass(frozen=True)
class Target:
    """What y is: class labels (sorted, as in np.unique) or a continuous target (classes is None)."""

    classes: np.ndarray | None

    @property
    def n_classes(self) -> int | None:
        return None if self.classes is None else len(self.classes)

    def encode(self, y: np.ndarray) -> np.ndarray:
        """Labels as 0..n_classes-1 (int32) for classification; float32 values for regression."""
        if self.classes is None:
            return np.asarray(y, dtype="float32")
        return np.searchsorted(self.classes, np.asarray(y)).astype("int32")


def describe_target(y: np.ndarray, task: str | None) -> Target:
    if task is None:
        task = "classification" if is_class_labels(y) else "regression"
    return Target(classes=np.unique(y) if task == "classification" else None)


def _as_inputs(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.astype("float32") if x.dtype.kind in "fiub" and x.dtype != np.float32 else x


def _non_finite_loss_guard(keras: Any, x: np.ndarray, y: np.ndarray) -> Any:
    class NonFiniteLossGuard(keras.callbacks.Callback):
        """Stops training with NonFiniteLossError as soon as an epoch's loss is NaN or infinite."""

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            loss = (logs or {}).get("loss")
            if loss is not None and not np.isfinite(float(loss)):
                raise NonFiniteLossError(non_finite_loss_message(float(loss), epoch + 1, x, y))

    return NonFiniteLossGuard()


def non_finite_loss_message(loss: float, epoch: int, x: np.ndarray, y: np.ndarray) -> str:
    """What a NaN or infinite training loss says: its likely cause, the training rows' own non-finite values
    (a dataset pushed with allow_missing) when they have some, else a diverging training."""
    for what, values in (("features", x), ("labels", y)):
        values = np.asarray(values)
        bad = values.size - np.count_nonzero(np.isfinite(values)) if values.dtype.kind == "f" else 0
        if bad:
            return (
                f"training loss is {loss} at epoch {epoch}: the training {what} hold {bad} NaN or infinite values "
                "(a dataset pushed with allow_missing), which Keras cannot train on: impute them, or use a model "
                "that accepts NaN"
            )
    return (
        f"training loss is {loss} at epoch {epoch}: the training data is finite, so training diverged: lower the "
        "learning rate, scale the features or labels, or check that the loss suits the labels"
    )


def _numpy_reseeder(keras: Any, seed: int) -> Any:
    class NumpyReseeder(keras.callbacks.Callback):
        """Seeds NumPy's global stream again as training begins, after Keras' set-up in fit.

        Keras shuffles arrays with that stream on JAX (np.random.permutation each epoch), and the first fit of a
        model not yet built draws one permutation more, for the batch it builds the model on: without this, a
        reused model (see _reuse_trained) would see other shuffles than the fresh one it stands in for."""

        def on_train_begin(self, logs: dict | None = None) -> None:
            np.random.seed(seed)

    return NumpyReseeder()


class _KerasClassifierView:
    """Just enough of a scikit-learn classifier around a trained Keras model for scikit-learn scorers."""

    _estimator_type = "classifier"

    def __init__(self, model: Any, classes: np.ndarray, batch_size: int) -> None:
        self.model, self.classes_, self._batch_size = model, classes, batch_size

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import ClassifierTags, Tags, TargetTags

        return Tags(
            estimator_type="classifier", target_tags=TargetTags(required=True), classifier_tags=ClassifierTags()
        )

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        probabilities = np.asarray(self.model.predict(_as_inputs(X), batch_size=self._batch_size, verbose=0))
        if probabilities.ndim == 2 and probabilities.shape[1] == 1 and len(self.classes_) == 2:
            probabilities = np.hstack([1 - probabilities, probabilities])  # a single sigmoid unit
        return probabilities

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


class _KerasRegressorView:
    """Just enough of a scikit-learn regressor around a trained Keras model for scikit-learn scorers."""

    _estimator_type = "regressor"

    def __init__(self, model: Any, batch_size: int) -> None:
        self.model, self._batch_size = model, batch_size

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import RegressorTags, Tags, TargetTags

        return Tags(estimator_type="regressor", target_tags=TargetTags(required=True), regressor_tags=RegressorTags())

    def predict(self, X: np.ndarray) -> np.ndarray:
        predictions = np.asarray(self.model.predict(_as_inputs(X), batch_size=self._batch_size, verbose=0))
        return predictions[:, 0] if predictions.ndim == 2 and predictions.shape[1] == 1 else predictions


class KerasTrainer:
    """Runs `spec.model` (a KerasModel) on each fold.

    Later folds of a trial train the model of its first fold, reset to the initial state of a model
    freshly built (with the fold's seed) for that fold: the same scores as training the fresh model,
    without tracing the training functions again; so does the next trial on this worker whose model has
    the same structure (see `_keras_reuse.structure`: e.g. another learning rate). `close()` frees the trial's
    graphs; the worker keeps its last traced model only.

    A model compiled with the default steps_per_execution=1 runs STEPS_PER_EXECUTION steps per call unless the
    study has callbacks of its own: the same steps and scores, less overhead.

    Scores: "loss" and any metric the compiled model reports (model.evaluate) are taken from Keras;
    any other name is a scikit-learn scorer, applied to the model's predictions.
    """

    def __init__(self, spec: SpecView, input_shape: tuple[int, ...], target: Target) -> None:
        self._model_spec: KerasModel = spec.model
        self._metrics = spec.metrics
        self._input_shape = tuple(input_shape)
        self._target = target
        self._return_train_score = spec.return_train_score
        self._keep_predictions = spec.keep_predictions
        self._eval_batch_size = max(self._model_spec.batch_size, 256)
        self._trained: Any = None  # the trial's traced model, reused by its later folds; see _reuse_trained
        self._trained_structure: Any = None
        self._gradients_before: set[str] | None = None

    def run(self, params: dict, fold: Fold) -> FoldResult:
        keras = import_keras()
        if self._gradients_before is None:
            self._gradients_before = custom_gradient_names(keras)
        started = time.perf_counter()
        model, history = self._fit(
            keras,
            params,
            fold.x_train,
            fold.y_train,
            fold.sample_weight,
            fold.seed,
            self._user_callbacks(fold) + self._epoch_pruning(keras, fold),
            reuse=True,
        )
        fit_time = time.perf_counter() - started
        started = time.perf_counter()
        test_scores = self._score(model, fold.x_validation, fold.y_validation)
        score_time = time.perf_counter() - started
        train_scores = self._score(model, fold.x_train, fold.y_train) if self._return_train_score else None
        predictions = self._estimator_view(model).predict(fold.x_validation) if self._keep_predictions else None
        return FoldResult(
            test_scores=test_scores,
            fit_time=fit_time,
            score_time=score_time,
            train_scores=train_scores,
            n_epochs=len(history.epoch),
            history=self._compact_history(history),
            predictions=predictions,
        )

    def _compact_history(self, history: Any) -> dict[str, list]:
        """What Keras logged each epoch, small enough to keep on the trial: "epoch" (1-based) and "loss", the
        study's first metric when Keras logs it, and their "val_" twins (the early-stopping rows, never the fold's
        validation rows); at most HISTORY_EPOCHS epochs, evenly spaced, the last included; 5 significant digits."""
        first = self._metrics[0] if isinstance(self._metrics[0], str) else "loss"
        names = [n for n in dict.fromkeys(["loss", first, "val_loss", f"val_{first}"]) if n in history.history]
        n_epochs = len(history.epoch)
        kept = np.unique(np.linspace(0, n_epochs - 1, min(n_epochs, HISTORY_EPOCHS)).round().astype(int))
        compact: dict[str, list] = {"epoch": [int(i) + 1 for i in kept]}
        for name in names:
            values = [float(history.history[name][i]) for i in kept]
            compact[name] = [float(f"{v:.5g}") if np.isfinite(v) else None for v in values]
        return compact

    def close(self) -> None:
        """Free the trial's graphs and the models it built: a worker runs many trials and must not grow (it keeps
        one traced model only, for the next trial of the same structure)."""
        if self._trained is None and self._gradients_before is None:
            return
        keras = import_keras()
        kept = any(model is self._trained for model in reuse.kept_model.values())
        self._trained = None
        forget_custom_gradients(keras, self._gradients_before)
        self._gradients_before = None
        clear_session(keras, keep_kernels=kept)

    def fit_full(self, params: dict, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None, seed: int) -> Any:
        model, _ = self._fit(import_keras(), params, X, y, sample_weight, seed)
        return model

    def _user_callbacks(self, fold: Fold) -> list:
        """The study's own Keras callbacks for this fold: new ones from KerasModel.callbacks, or none."""
        factory = self._model_spec.callbacks
        return [] if factory is None else list(factory(fold.trial_number, fold.index))

    def _epoch_pruning(self, keras: Any, fold: Fold) -> list:
        """A callback that calls the fold's epoch_hook (pruning on epochs, scored on the validation rows), or none."""
        hook = fold.epoch_hook
        if hook is None:
            return []
        score = self._score

        class EpochPruningCallback(keras.callbacks.Callback):
            def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
                hook(
                    epoch + 1, self.params["epochs"], lambda: score(self.model, fold.x_validation, fold.y_validation)[0]
                )

        return [EpochPruningCallback()]

    def _fit(
        self,
        keras: Any,
        params: dict,
        x: np.ndarray,
        y: np.ndarray,
        sample_weight: np.ndarray | None,
        seed: int,
        user_callbacks: list = (),
        reuse: bool = False,
    ) -> tuple[Any, Any]:
        """The trained model and its keras.callbacks.History."""
        spec = self._model_spec
        set_random_seed(keras, seed)
        x, y = _as_inputs(x), self._target.encode(y)
        validation_data, early_stopping = None, []
        if spec.early_stopping is not None:
            # Early stopping watches rows held out of the training rows, never the fold's validation rows.
            order = np.random.default_rng(seed).permutation(len(x))
            n_held_out = max(1, round(spec.early_stopping_fraction * len(x)))
            held_out, kept = order[:n_held_out], np.sort(order[n_held_out:])
            validation_data = inputs.validation_data(keras, x[held_out], y[held_out], self._eval_batch_size)
            x, y = x[kept], y[kept]
            sample_weight = None if sample_weight is None else np.asarray(sample_weight)[kept]
            early_stopping.append(
                keras.callbacks.EarlyStopping(
                    monitor="val_loss", patience=spec.early_stopping, restore_best_weights=True
                )
            )
        reseed = _numpy_reseeder(keras, seed)
        callbacks = [reseed, _non_finite_loss_guard(keras, x, y), *early_stopping, *user_callbacks]
        model = self._build(keras, params)
        if spec.callbacks is None and model.steps_per_execution == 1:
            model.steps_per_execution = STEPS_PER_EXECUTION
        if reuse:
            model = self._reuse_trained(model)
        history = model.fit(
            **inputs.training(keras, x, y, sample_weight, spec.batch_size, seed, spec.fit_kwargs),
            epochs=spec.epochs,
            validation_data=validation_data,
            callbacks=callbacks,
            verbose=0,
            **spec.fit_kwargs,
        )
        return model, history

    def _build(self, keras: Any, params: dict) -> Any:
        model = self._model_spec.build(params, self._input_shape, self._target.n_classes)
        if not isinstance(model, keras.Model):
            raise TypeError(f"KerasModel.build returned {type(model).__name__}, not a keras.Model")
        if not getattr(model, "compiled", False):
            raise TypeError("KerasModel.build returned a model that is not compiled: call model.compile(...) in build")
        return model

    def _reuse_trained(self, fresh: Any) -> Any:
        """The model to train on this fold: the trial's model trained on an earlier fold, with `fresh`'s
        initial state copied in, when both have the same structure; else `fresh`, kept for the next fold.

        Rebuilding is cheap; the first fit of a model is not (Keras traces and builds its training and
        evaluation functions), so later folds of a trial, and later trials of the same structure on this
        worker, train the already traced model.
        """
        structure, portable = reuse.structure(fresh)
        if self._trained is None and portable and structure in reuse.kept_model:  # traced by an earlier trial
            self._trained, self._trained_structure = reuse.kept_model[structure], structure
        if (
            self._trained is not None
            and structure is not None
            and structure == self._trained_structure
            and reuse.load_initial_state(self._trained, fresh)
        ):
            return self._trained
        if self._trained is not None or reuse.kept_model:  # their traced functions are never called again
            forget_kernels(import_keras())
        self._trained, self._trained_structure = fresh, structure
        reuse.kept_model.clear()
        if portable:
            reuse.kept_model[structure] = fresh
        return fresh

    def score(self, model: Any, x: np.ndarray, y: np.ndarray) -> list[float]:
        """The study's metrics of a trained model on rows x, y."""
        return self._score(model, x, y)

    def _score(self, model: Any, x: np.ndarray, y: np.ndarray) -> list[float]:
        rows = inputs.evaluation(import_keras(), _as_inputs(x), self._target.encode(y), self._eval_batch_size)
        reported = model.evaluate(**rows, verbose=0, return_dict=True)
        scores = []
        for metric in self._metrics:
            name = "loss" if metric is None else metric
            if isinstance(name, str) and name in reported:
                scores.append(float(reported[name]))
                continue
            if isinstance(name, str):
                from sklearn.metrics import get_scorer_names

                if name not in get_scorer_names():
                    raise ValueError(
                        f"metric {name!r} is neither reported by the compiled model (it reports "
                        f"{', '.join(sorted(reported))}) nor a scikit-learn scorer name"
                    )
            scores.append(float(resolve_scorer(name)(self._estimator_view(model), x, y)))
        return scores

    def _estimator_view(self, model: Any) -> Any:
        if self._target.classes is None:
            return _KerasRegressorView(model, self._eval_batch_size)
        return _KerasClassifierView(model, self._target.classes, self._eval_batch_size)


@dataclass
class KerasModel(ModelKind):
    """A Keras model trained per fold: `build(params, input_shape, n_classes)` returns a compiled keras.Model.

    input_shape is `X.shape[1:]`; n_classes is the number of distinct labels when y holds class labels
    (integers, booleans or strings; encoded as 0..n_classes-1 for training) and None for a float y. `task` forces
    "classification" or "regression" instead of inferring it from y. `early_stopping` is a patience in
    epochs: it watches val_loss on `early_stopping_fraction` of the fold's training rows (never on the
    fold's validation rows, so the CV score stays honest) and restores the best weights.
    `fit_kwargs` go to `model.fit` unchanged (e.g. class_weight). `callbacks` is a function
    `(trial_number, fold_index) -> list of keras.callbacks.Callback`, called for each fold (callbacks hold
    state: return new ones each time); they run after tlsearch's own (NaN guard, early stopping).
    """

    build: Callable[..., Any]
    epochs: int = 10
    batch_size: int = 32
    early_stopping: int | None = None
    early_stopping_fraction: float = 0.1
    fit_kwargs: dict = field(default_factory=dict)
    task: str | None = None
    callbacks: Callable[[int, int], Sequence[Any]] | None = None

    def __post_init__(self) -> None:
        check_backend(requested_backend())  # refused where the study is declared, before any trial
        require(
            callable(self.build),
            "KerasModel.build",
            "must be a function (params, input_shape, n_classes) -> compiled keras.Model",
        )
        require(
            is_int(self.epochs) and self.epochs >= 1, "KerasModel.epochs", f"must be an int >= 1, got {self.epochs!r}"
        )
        require(
            is_int(self.batch_size) and self.batch_size >= 1,
            "KerasModel.batch_size",
            f"must be an int >= 1, got {self.batch_size!r}",
        )
        require(
            self.early_stopping is None or (is_int(self.early_stopping) and self.early_stopping >= 1),
            "KerasModel.early_stopping",
            f"must be a patience in epochs (int >= 1) or None, got {self.early_stopping!r}",
        )
        require(
            isinstance(self.early_stopping_fraction, (int, float)) and 0 < self.early_stopping_fraction < 1,
            "KerasModel.early_stopping_fraction",
            f"must be between 0 and 1, got {self.early_stopping_fraction!r}",
        )
        require(isinstance(self.fit_kwargs, Mapping), "KerasModel.fit_kwargs", "must be a dict")
        reserved = {"x", "y", "epochs", "batch_size", "validation_data", "sample_weight"} & set(self.fit_kwargs)
        require(not reserved, "KerasModel.fit_kwargs", f"must not set {sorted(reserved)}: tlsearch sets them per fold")
        require(
            "callbacks" not in self.fit_kwargs,
            "KerasModel.fit_kwargs",
            "must not set 'callbacks' (they would be shared by every fold): pass "
            "KerasModel(callbacks=lambda trial_number, fold_index: [...]) to get fresh ones per fold",
        )
        require(
            self.callbacks is None or callable(self.callbacks),
            "KerasModel.callbacks",
            f"must be a function (trial_number, fold_index) -> list of Keras callbacks, got {self.callbacks!r}",
        )
        require(
            self.task in (None, "classification", "regression"),
            "KerasModel.task",
            f"must be 'classification', 'regression' or None, got {self.task!r}",
        )

    default_metric = "loss"
    framework = "keras"

    def trainer(self, spec: SpecView, arrays: Mapping[str, np.ndarray]) -> KerasTrainer:
        """Reads the full y once, to find the classes."""
        return KerasTrainer(spec, tuple(arrays["X"].shape[1:]), describe_target(np.asarray(arrays["y"]), self.task))
