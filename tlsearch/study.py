"""What a study is: the one object a study file defines (module variable `study`), and how to load it.

    study = tlsearch.StudySpec(name="digits-mlp", dataset="sklearn:digits", space=space,
                               model=tlsearch.KerasModel(build, epochs=8), metric="accuracy", n_trials=12)

Defaults (each can be overridden):
- cv: `tlsearch.cv.AutoKFold(5)`: shuffled (random_state=0) StratifiedKFold for class labels (an integer,
  boolean or string y), KFold for a float y, and their group-aware variants when the dataset has a
  "groups" array. An int n means
  `AutoKFold(n)`; any scikit-learn splitter is accepted.
- metric: None means the estimator's own `score` for SklearnModel (like cross_validate's scoring=None),
  the compiled loss ("loss") for KerasModel, and whatever the function returns ("score") for CustomLoop.
- direction: "minimize" for losses and errors ("loss", "*_loss", "*_error", "mse", "mae", ...; not the
  scikit-learn "neg_*" scorers), "maximize" for everything else. Set it explicitly when that guess is wrong.
- sampler: `optuna.samplers.TPESampler(seed=seed)`; pruner: `tlsearch.pruners.KFoldPruner()` (prunes between
  folds), or none for multi-objective studies, which Optuna cannot prune.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import logging
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from tlsearch import spaces
from tlsearch.errors import TLSearchError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from tlsearch.models import Fold

_MINIMIZED_NAMES = {"loss", "mse", "mae", "mape", "msle", "rmse", "hinge", "squared_hinge", "poisson",
                    "kld", "kl_divergence", "logcosh", "log_cosh", "huber", "crossentropy"}


class StudySpecError(TLSearchError, ValueError):
    """A StudySpec field with a bad value; the message names the field."""


class StudyFileError(TLSearchError):
    """A study file that is missing, fails to import, or defines no StudySpec named `study`."""


@dataclass
class KerasModel:
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
        _require(callable(self.build), "KerasModel.build",
                 "must be a function (params, input_shape, n_classes) -> compiled keras.Model")
        _require(_is_int(self.epochs) and self.epochs >= 1, "KerasModel.epochs",
                 f"must be an int >= 1, got {self.epochs!r}")
        _require(_is_int(self.batch_size) and self.batch_size >= 1, "KerasModel.batch_size",
                 f"must be an int >= 1, got {self.batch_size!r}")
        _require(self.early_stopping is None or (_is_int(self.early_stopping) and self.early_stopping >= 1),
                 "KerasModel.early_stopping",
                 f"must be a patience in epochs (int >= 1) or None, got {self.early_stopping!r}")
        _require(isinstance(self.early_stopping_fraction, (int, float)) and 0 < self.early_stopping_fraction < 1,
                 "KerasModel.early_stopping_fraction",
                 f"must be between 0 and 1, got {self.early_stopping_fraction!r}")
        _require(isinstance(self.fit_kwargs, Mapping), "KerasModel.fit_kwargs", "must be a dict")
        reserved = {"x", "y", "epochs", "batch_size", "validation_data", "sample_weight"} & set(self.fit_kwargs)
        _require(not reserved, "KerasModel.fit_kwargs", f"must not set {sorted(reserved)}: tlsearch sets them per fold")
        _require("callbacks" not in self.fit_kwargs, "KerasModel.fit_kwargs",
                 "must not set 'callbacks' (they would be shared by every fold): pass "
                 "KerasModel(callbacks=lambda trial_number, fold_index: [...]) to get fresh ones per fold")
        _require(self.callbacks is None or callable(self.callbacks), "KerasModel.callbacks",
                 f"must be a function (trial_number, fold_index) -> list of Keras callbacks, got {self.callbacks!r}")
        _require(self.task in (None, "classification", "regression"), "KerasModel.task",
                 f"must be 'classification', 'regression' or None, got {self.task!r}")


@dataclass
class SklearnModel:
    """A scikit-learn estimator per fold: `factory(params)` returns a fresh, unfitted estimator."""

    factory: Callable[[dict], Any]

    def __post_init__(self) -> None:
        _require(callable(self.factory), "SklearnModel.factory", "must be a function params -> scikit-learn estimator")


@dataclass
class CustomLoop:
    """Your own training loop: `fn(params, fold, report) -> score` (a list of scores when multi-objective).

    `fold` has x_train, y_train, x_valid, y_valid, index (0-based fold number), seed and sample_weight
    (the training rows' weights or None). The arrays are read-only views of this host's dataset cache:
    copy them (`np.array(fold.x_train)`) before changing them in place. `report(value, step)` records a
    point of the fold's learning curve (kept as the trial's user attribute `split{index}_curve`). `refit(params, X, y)`, if given,
    trains a final model on all rows for `tlsearch.models.fit_full`.
    """

    fn: Callable[[dict, Fold, Callable[[float, int], None]], Any]
    refit: Callable[[dict, Any, Any], Any] | None = None

    def __post_init__(self) -> None:
        _require(callable(self.fn), "CustomLoop.fn", "must be a function (params, fold, report) -> score")
        _require(self.refit is None or callable(self.refit), "CustomLoop.refit", "must be a function or None")


@dataclass
class StudySpec:
    """Everything a study declares. Validated on construction; see the module docstring for the defaults.

    n_trials is the total to reach, counting trials already in the study store; timeout is in seconds.
    retries is how many times the dispatcher re-runs a trial lost to an infrastructure failure.
    After construction `metrics` and `directions` are tuples (one entry per objective), `direction` is the
    single direction (None for multi-objective), `cv` is a splitter, and `sampler` and `pruner` are set.
    """

    name: str
    dataset: str
    space: spaces.Space
    model: KerasModel | SklearnModel | CustomLoop
    cv: Any = None
    metric: Any = None
    direction: str | Sequence[str] | None = None
    directions: Sequence[str] | None = None
    sampler: optuna.samplers.BaseSampler | None = None
    pruner: optuna.pruners.BasePruner | None = None
    n_trials: int | None = None
    timeout: float | None = None
    seed: int = 0
    retries: int = 2
    return_train_score: bool = False
    holdout: float | None = None
    keep_predictions: bool = False
    callbacks: Sequence[Callable[[optuna.Study, optuna.trial.FrozenTrial], None]] = ()
    metrics: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str) and self.name.strip() == self.name and self.name != "",
                 "StudySpec.name", f"must be a non-empty string without surrounding spaces, got {self.name!r}")
        _require(isinstance(self.dataset, str) and self.dataset.strip() != "", "StudySpec.dataset",
                 f"must be a dataset name or a source like 'sklearn:digits', got {self.dataset!r}")
        _require(callable(self.space) or isinstance(self.space, Mapping), "StudySpec.space",
                 f"must be a function of a trial or a dict of distributions, got {type(self.space).__name__}")
        _require(isinstance(self.model, (KerasModel, SklearnModel, CustomLoop)), "StudySpec.model",
                 f"must be a KerasModel, SklearnModel or CustomLoop, got {type(self.model).__name__}")
        _require(_is_int(self.seed), "StudySpec.seed", f"must be an int, got {self.seed!r}")
        _require(_is_int(self.retries) and self.retries >= 0, "StudySpec.retries",
                 f"must be an int >= 0, got {self.retries!r}")
        _require(self.n_trials is None or (_is_int(self.n_trials) and self.n_trials >= 1), "StudySpec.n_trials",
                 f"must be an int >= 1 or None, got {self.n_trials!r}")
        _require(self.timeout is None or (isinstance(self.timeout, (int, float)) and not isinstance(self.timeout, bool)
                                          and self.timeout > 0), "StudySpec.timeout",
                 f"must be a number of seconds > 0 or None, got {self.timeout!r}")
        _require(isinstance(self.return_train_score, bool), "StudySpec.return_train_score", "must be True or False")
        _require(isinstance(self.keep_predictions, bool), "StudySpec.keep_predictions", "must be True or False")
        _require(isinstance(self.callbacks, Sequence) and all(callable(c) for c in self.callbacks),
                 "StudySpec.callbacks",
                 f"must be a list of functions (study, frozen_trial) -> None, got {self.callbacks!r}")
        self.callbacks = tuple(self.callbacks)
        self.cv = _resolve_cv(self.cv)
        if self.holdout is not None:
            from tlsearch.cv import Holdout

            _require(isinstance(self.holdout, float) and 0 < self.holdout < 0.5, "StudySpec.holdout",
                     f"must be a fraction of the rows between 0 and 0.5, got {self.holdout!r}")
            self.cv = Holdout(self.cv, self.holdout, random_state=self.seed)
        self.metrics = _resolve_metrics(self.metric, self.model)
        self.directions = _resolve_directions(self.direction, self.directions, self.metrics, self.model)
        self.direction = self.directions[0] if len(self.directions) == 1 else None
        if self.sampler is None:
            self.sampler = optuna.samplers.TPESampler(seed=self.seed)
        _require(isinstance(self.sampler, optuna.samplers.BaseSampler), "StudySpec.sampler",
                 f"must be an Optuna sampler, got {type(self.sampler).__name__}")
        if self.pruner is None:
            from tlsearch.pruners import KFoldPruner

            self.pruner = KFoldPruner() if len(self.directions) == 1 else optuna.pruners.NopPruner()
        _require(isinstance(self.pruner, optuna.pruners.BasePruner), "StudySpec.pruner",
                 f"must be an Optuna pruner, got {type(self.pruner).__name__}")
        _require(len(self.directions) == 1 or isinstance(self.pruner, optuna.pruners.NopPruner), "StudySpec.pruner",
                 "Optuna cannot prune multi-objective studies: leave pruner unset or use NopPruner()")

    @property
    def metric_names(self) -> tuple[str, ...]:
        """One name per objective, used in user attributes (e.g. split0_test_accuracy)."""
        return tuple(_metric_name(metric, self.model) for metric in self.metrics)

    @property
    def is_multi_objective(self) -> bool:
        return len(self.directions) > 1

    def run_callbacks(self, study: optuna.Study, trial_id: int) -> None:
        """Call `callbacks` with the trial just recorded (its cv_results_ user attributes included), as
        `Study.optimize` does; a callback that raises is logged as a warning, and the study goes on."""
        if not self.callbacks:
            return
        trial = study._storage.get_trial(trial_id)
        for callback in self.callbacks:
            try:
                callback(study, trial)
            except Exception as error:  # noqa: BLE001 - a tracking server down must not stop the study
                log.warning("callback %s failed on trial %d: %s: %s", getattr(callback, "__name__", type(callback).__name__),
                            trial.number, type(error).__name__, error)

    def check(self) -> None:
        """Fail before any worker starts if the space cannot be sampled (raises spaces.InvalidSpaceError)."""
        spaces.check_space(self.space, self.name)

    def create_study(self, storage: str | optuna.storages.BaseStorage | None = None, *,
                     load_if_exists: bool = True) -> optuna.Study:
        """The Optuna study this spec describes (name, directions, sampler, pruner) in `storage`."""
        return optuna.create_study(storage=storage, study_name=self.name, directions=list(self.directions),
                                   sampler=self.sampler, pruner=self.pruner, load_if_exists=load_if_exists)


EXAMPLE_PREFIX = "example:"


def examples() -> dict[str, Path]:
    """The example study files shipped with tlsearch, by name (file stem)."""
    folder = Path(__file__).parent / "examples"
    return {file.stem: file for file in sorted(folder.glob("*.py")) if not file.name.startswith("_")}


def example_path(name: str) -> Path:
    """The file of example study `name`; a StudyFileError listing the examples when there is none."""
    shipped = examples()
    if name not in shipped:
        raise StudyFileError(f"no example study {name!r}: choose one of {', '.join(shipped) or '(none shipped)'} "
                             "(tlsearch examples lists them)")
    return shipped[name]


def load_study_file(path: str | Path) -> StudySpec:
    """Import the Python file at `path` (by path, not module name) and return its module variable `study`.
    `example:NAME` names an example study shipped with tlsearch (`tlsearch examples`).

    The module is registered for pickling by value with cloudpickle, so the functions it defines can be
    sent to Dask workers that do not have the file.
    """
    if str(path).startswith(EXAMPLE_PREFIX):
        path = example_path(str(path).removeprefix(EXAMPLE_PREFIX))
    path = Path(path).expanduser()
    if not path.is_file():
        raise StudyFileError(f"study file {str(path)!r} does not exist")
    resolved = path.resolve()
    module_name = "tlsearch_study_" + hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(module_name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise StudyFileError(f"study file {str(path)!r} is not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise StudyFileError(f"study file {str(path)!r} failed to import: {_where(exc, resolved)}"
                             f"{type(exc).__name__}: {exc}") from exc
    study = getattr(module, "study", None)
    if study is None:
        raise StudyFileError(f"study file {str(path)!r} defines no module variable `study` (a tlsearch.StudySpec)")
    if not isinstance(study, StudySpec):
        raise StudyFileError(f"`study` in {str(path)!r} is a {type(study).__name__}, not a tlsearch.StudySpec")
    try:
        import cloudpickle

        cloudpickle.register_pickle_by_value(module)
    except ImportError:  # pragma: no cover - cloudpickle comes with dask
        pass
    return study


def _where(exc: BaseException, path: Path) -> str:
    """'line N: ' for the deepest frame of the traceback that is in the study file, else ''."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == path:
            line = frame.lineno
    if line is None and isinstance(exc, SyntaxError) and exc.lineno:
        line = exc.lineno
    return f"line {line}: " if line else ""


def _require(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise StudySpecError(f"{field_name} {message}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _resolve_cv(cv: Any) -> Any:
    from tlsearch.cv import AutoKFold

    if cv is None:
        return AutoKFold(5)
    if _is_int(cv):
        _require(cv >= 2, "StudySpec.cv", f"needs at least 2 folds, got {cv}")
        return AutoKFold(cv)
    _require(callable(getattr(cv, "split", None)) and callable(getattr(cv, "get_n_splits", None)), "StudySpec.cv",
             f"must be a scikit-learn splitter (with split and get_n_splits) or a number of folds, got {cv!r}")
    return cv


def _resolve_metrics(metric: Any, model: Any) -> tuple:
    metrics = tuple(metric) if isinstance(metric, (list, tuple)) else (metric,)
    _require(len(metrics) >= 1, "StudySpec.metric", "must name at least one metric")
    for each in metrics:
        _require(each is None or isinstance(each, str) or callable(each), "StudySpec.metric",
                 f"entries must be metric names or scorer callables, got {each!r}")
    _require(len(metrics) == 1 or None not in metrics, "StudySpec.metric", "a multi-objective list cannot contain None")
    if isinstance(model, SklearnModel):
        from sklearn.metrics import get_scorer_names

        known = get_scorer_names()
        for each in metrics:
            if isinstance(each, str) and each not in known:
                close = difflib.get_close_matches(each, known, n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else " (see sklearn.metrics.get_scorer_names())"
                raise StudySpecError(f"StudySpec.metric {each!r} is not a scikit-learn scorer name{hint}")
    names = [_metric_name(each, model) for each in metrics]
    _require(len(set(names)) == len(names), "StudySpec.metric", f"names must be distinct, got {names}")
    return metrics


def _metric_name(metric: Any, model: Any) -> str:
    if metric is None:
        return "loss" if isinstance(model, KerasModel) else "score"
    if isinstance(metric, str):
        return metric
    score_func = getattr(metric, "_score_func", None)  # a scikit-learn scorer made by make_scorer
    return getattr(score_func or metric, "__name__", type(metric).__name__)


def _resolve_directions(direction: Any, directions: Any, metrics: tuple, model: Any) -> tuple[str, ...]:
    _require(direction is None or directions is None, "StudySpec.direction",
             "and StudySpec.directions are the same setting: give only one")
    given = direction if direction is not None else directions
    if given is None:
        return tuple(_default_direction(metric, model) for metric in metrics)
    given = (given,) if isinstance(given, str) else tuple(given)
    for each in given:
        _require(each in ("maximize", "minimize"), "StudySpec.direction",
                 f"entries must be 'maximize' or 'minimize', got {each!r}")
    _require(len(given) == len(metrics), "StudySpec.direction",
             f"has {len(given)} entries but StudySpec.metric has {len(metrics)}: give one direction per metric")
    return given


def _default_direction(metric: Any, model: Any) -> str:
    from sklearn.metrics import get_scorer_names

    name = _metric_name(metric, model).lower()
    if isinstance(model, SklearnModel) or not isinstance(metric, (str, type(None))) or name in get_scorer_names():
        return "maximize"  # scikit-learn scorers: greater is better
    minimized = (name in _MINIMIZED_NAMES or name.endswith(("_loss", "_error", "_crossentropy"))
                 or name.startswith("val_loss"))
    return "minimize" if minimized else "maximize"
