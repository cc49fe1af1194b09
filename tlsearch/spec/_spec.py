"""What a study is: the one object a study file defines (module variable `spec`), and how to load it.

    spec = tlsearch.StudySpec(name="digits-mlp", dataset="sklearn:digits", space=space,
                              model=tlsearch.KerasModel(build, epochs=8), metric="accuracy", n_trials=12)

Defaults (each can be overridden):
- cv: `tlsearch.cv.AutoKFold(5)`: shuffled (random_state=0) StratifiedKFold for class labels (an integer,
  boolean or string y), KFold for a float y, and their group-aware variants when the dataset has a
  "groups" array. An int n means
  `AutoKFold(n)`; any scikit-learn splitter is accepted.
- metric: None means the estimator's own `score` for SklearnModel (like cross_validate's scoring=None),
  the compiled loss ("loss") for KerasModel, and whatever the function returns ("score") for CustomLoop.
- direction: "minimize" for losses and errors ("loss", "*_loss", "*_error", "mse", "mae", ...; not the
  scikit-learn "neg_*" scorers), "maximize" for everything else; a Keras metric's comes from what it is
  (tlsearch.models._keras_metrics), and a Keras name it does not know must be given one. Set it explicitly when
  that guess is wrong.
- sampler: `optuna.samplers.TPESampler(seed=seed)`; a function `seed -> sampler` is called once with `seed`.
  Every trial samples with a copy of the study's sampler whose random state is seeded from `seed`, the study and
  the trial number (what the sampler built from its seed, e.g. a grid's order, is the study's); pruner: `tlsearch.cv.KFoldPruner()` (prunes between
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
from typing import Any

import optuna

from tlsearch import spaces
from tlsearch._text import name_problem
from tlsearch.cv._evaluate import AutoKFold, Holdout
from tlsearch.cv._pruners import KFoldPruner
from tlsearch.data import DATA_FORMS, is_data
from tlsearch.errors import StudyFileError, StudySpecError
from tlsearch.models import CustomLoop, KerasModel, ModelKind, SklearnModel
from tlsearch.models._checks import is_int, require
from tlsearch.models._keras_metrics import keras_metric_direction

__all__ = [
    "CustomLoop",
    "KerasModel",
    "SklearnModel",
    "StudyFileError",
    "StudySpec",
    "StudySpecError",
    "load_study_file",
]

log = logging.getLogger(__name__)

_MINIMIZED_NAMES = {
    "loss",
    "mse",
    "mae",
    "mape",
    "msle",
    "rmse",
    "hinge",
    "squared_hinge",
    "poisson",
    "kld",
    "kl_divergence",
    "logcosh",
    "log_cosh",
    "huber",
    "crossentropy",
}


@dataclass
class StudySpec:
    """Everything a study declares. Validated on construction; see the module docstring for the defaults.

    dataset is a stored dataset's name ("NAME" or "NAME@VERSION"), a source (`tlsearch.ensure_dataset`), or data
    held in Python (`tlsearch.push_dataset`'s forms, e.g. `(X, y)` or `(frame, "label")`), pushed by `tlsearch.run`
    under a name made of its content, so that workers receive the name, not the data, and a resume with the same
    data finds the same dataset.
    n_trials is the total to reach, counting trials already in the study store; timeout is in seconds.
    fold_budget is the folds to train in total, counting earlier runs' (see `tlsearch.run`): no trial starts
    unless its k folds fit in what is left.
    intensify is the most evaluations a leading trial earns (0: off, the default; see
    docs/guides/kfold-and-pruning.md): with N >= 2 the driver re-runs leading trials' CV on fresh seeds, up to N
    times each, and the pick (`tlsearch best`, the report, refit) is the noise-aware incumbent.
    trial_timeout (seconds) fails a trial that runs longer as TrialTimeout and restarts its worker.
    retries is how many times the dispatcher re-runs a trial lost to an infrastructure failure.
    fold_parallel="auto" runs a trial's folds as several tasks when workers would otherwise sit idle (fewer
    trials left in the budget than workers; see tlsearch.execution._fold_tasks); False always runs one task per trial.
    The fields keep what the study file gave (`dataclasses.replace(spec, n_trials=5)` is a new, checked spec);
    what they resolve to is computed once, on construction, into the attributes ending in `_`, as scikit-learn's
    fitted attributes: `cv_` the splitter (the holdout wrap included), `directions_` one direction per objective,
    `sampler_` and `pruner_` the study's; `metrics` holds one metric per objective.
    """

    name: str
    dataset: Any
    space: spaces.Space
    model: ModelKind
    cv: Any = None
    metric: Any = None
    direction: str | Sequence[str] | None = None
    directions: Sequence[str] | None = None
    sampler: optuna.samplers.BaseSampler | Callable[[int | None], optuna.samplers.BaseSampler] | None = None
    pruner: optuna.pruners.BasePruner | None = None
    n_trials: int | None = None
    timeout: float | None = None
    trial_timeout: float | None = None
    fold_budget: int | None = None
    intensify: int = 0
    seed: int = 0
    retries: int = 2
    return_train_score: bool = False
    holdout: float | None = None
    keep_predictions: bool = False
    fold_parallel: str | bool = "auto"
    callbacks: Sequence[Callable[[optuna.Study, optuna.trial.FrozenTrial], None]] = ()
    metrics: tuple = field(init=False, repr=False, compare=False)
    cv_: Any = field(init=False, repr=False, compare=False)
    directions_: tuple[str, ...] = field(init=False, repr=False, compare=False)
    sampler_: optuna.samplers.BaseSampler = field(init=False, repr=False, compare=False)
    pruner_: optuna.pruners.BasePruner = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = name_problem(self.name)
        require(problem is None, "StudySpec.name", f"{problem}, got {self.name!r}")
        given = (
            repr(self.dataset) if isinstance(self.dataset, str) or self.dataset is None else type(self.dataset).__name__
        )
        require(
            (isinstance(self.dataset, str) and self.dataset.strip() != "") or is_data(self.dataset),
            "StudySpec.dataset",
            f"must be a dataset name, a source like 'sklearn:digits', or data held in Python: {DATA_FORMS}; "
            f"got {given}",
        )
        require(
            callable(self.space) or isinstance(self.space, Mapping),
            "StudySpec.space",
            f"must be a function of a trial or a dict of distributions, got {type(self.space).__name__}",
        )
        require(
            isinstance(self.model, ModelKind),
            "StudySpec.model",
            f"must be a KerasModel, SklearnModel or CustomLoop, got {type(self.model).__name__}",
        )
        require(is_int(self.seed), "StudySpec.seed", f"must be an int, got {self.seed!r}")
        require(
            is_int(self.retries) and self.retries >= 0,
            "StudySpec.retries",
            f"must be an int >= 0, got {self.retries!r}",
        )
        require(
            self.n_trials is None or (is_int(self.n_trials) and self.n_trials >= 1),
            "StudySpec.n_trials",
            f"must be an int >= 1 or None, got {self.n_trials!r}",
        )
        require(
            self.fold_budget is None or (is_int(self.fold_budget) and self.fold_budget >= 1),
            "StudySpec.fold_budget",
            f"must be an int >= 1 (folds to train in total) or None, got {self.fold_budget!r}",
        )
        require(
            is_int(self.intensify) and (self.intensify == 0 or self.intensify >= 2),
            "StudySpec.intensify",
            f"must be 0 (off) or an int >= 2 (evaluations of a leading trial at most), got {self.intensify!r}",
        )
        require(
            self.timeout is None
            or (isinstance(self.timeout, (int, float)) and not isinstance(self.timeout, bool) and self.timeout > 0),
            "StudySpec.timeout",
            f"must be a number of seconds > 0 or None, got {self.timeout!r}",
        )
        require(
            self.trial_timeout is None
            or (
                isinstance(self.trial_timeout, (int, float))
                and not isinstance(self.trial_timeout, bool)
                and self.trial_timeout > 0
            ),
            "StudySpec.trial_timeout",
            f"must be a number of seconds > 0 or None, got {self.trial_timeout!r}",
        )
        require(isinstance(self.return_train_score, bool), "StudySpec.return_train_score", "must be True or False")
        require(isinstance(self.keep_predictions, bool), "StudySpec.keep_predictions", "must be True or False")
        require(
            self.fold_parallel == "auto" or self.fold_parallel is False,
            "StudySpec.fold_parallel",
            f"must be 'auto' (split a trial's folds over idle workers) or False (one task per trial), "
            f"got {self.fold_parallel!r}",
        )
        require(
            isinstance(self.callbacks, Sequence) and all(callable(c) for c in self.callbacks),
            "StudySpec.callbacks",
            f"must be a list of functions (study, frozen_trial) -> None, got {self.callbacks!r}",
        )
        self.cv_ = _resolve_cv(self.cv)
        if self.holdout is not None:
            require(
                isinstance(self.holdout, float) and 0 < self.holdout < 0.5,
                "StudySpec.holdout",
                f"must be a fraction of the rows between 0 and 0.5, got {self.holdout!r}",
            )
            self.cv_ = Holdout(self.cv_, self.holdout, random_state=self.seed)
        self.metrics = _resolve_metrics(self.metric, self.model)
        self.directions_ = _resolve_directions(self.direction, self.directions, self.metrics, self.model)
        self.sampler_ = _resolve_sampler(self.sampler, self.seed)
        self.pruner_ = self.pruner
        if self.pruner_ is None:
            self.pruner_ = KFoldPruner() if len(self.directions_) == 1 else optuna.pruners.NopPruner()
        require(
            isinstance(self.pruner_, optuna.pruners.BasePruner),
            "StudySpec.pruner",
            f"must be an Optuna pruner, got {type(self.pruner_).__name__}",
        )
        require(
            len(self.directions_) == 1 or isinstance(self.pruner_, optuna.pruners.NopPruner),
            "StudySpec.pruner",
            "Optuna cannot prune multi-objective studies: leave pruner unset or use NopPruner()",
        )
        require(
            len(self.directions_) == 1 or not self.intensify,
            "StudySpec.intensify",
            "a multi-objective study has no single pick to intensify: leave intensify at 0",
        )

    @property
    def metric_names(self) -> tuple[str, ...]:
        """One name per objective, used in user attributes (e.g. split0_test_accuracy)."""
        return tuple(_metric_name(metric, self.model) for metric in self.metrics)

    @property
    def is_multi_objective(self) -> bool:
        return len(self.directions_) > 1


EXAMPLE_PREFIX = "example:"


def examples() -> dict[str, Path]:
    """The example study files shipped with tlsearch, by name (file stem)."""
    folder = Path(__file__).parents[1] / "examples"  # tlsearch/examples
    return {file.stem: file for file in sorted(folder.glob("*.py")) if not file.name.startswith("_")}


def example_path(name: str) -> Path:
    """The file of example study `name`; a StudyFileError listing the examples when there is none."""
    shipped = examples()
    if name not in shipped:
        raise StudyFileError(
            f"no example study {name!r}: choose one of {', '.join(shipped) or '(none shipped)'} "
            "(tlsearch examples lists them)"
        )
    return shipped[name]


def study_file_path(path: str | Path) -> Path:
    """The file `path` names: `example:NAME` is an example study shipped with tlsearch."""
    if str(path).startswith(EXAMPLE_PREFIX):
        return example_path(str(path).removeprefix(EXAMPLE_PREFIX))
    return Path(path).expanduser()


def load_study_file(path: str | Path) -> StudySpec:
    """Import the Python file at `path` (by path, not module name) and return its module variable `spec`
    (`study`, the older name, is accepted too).
    `example:NAME` names an example study shipped with tlsearch (`tlsearch examples`).

    The module is registered for pickling by value with cloudpickle, so the functions it defines can be
    sent to Dask workers that do not have the file.
    """
    path = study_file_path(path)
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
    except (Exception, SystemExit) as exc:  # sys.exit() in a study file must not end `tlsearch` silently
        del sys.modules[module_name]
        raise StudyFileError(
            f"study file {str(path)!r} failed to import: {_where(exc, resolved)}{type(exc).__name__}: {exc}"
        ) from exc
    variable = "spec" if hasattr(module, "spec") else "study"
    spec = getattr(module, variable, None)
    if spec is None:
        raise StudyFileError(f"study file {str(path)!r} defines no module variable `spec` (a tlsearch.StudySpec)")
    if not isinstance(spec, StudySpec):
        raise StudyFileError(f"`{variable}` in {str(path)!r} is a {type(spec).__name__}, not a tlsearch.StudySpec")
    try:
        import cloudpickle

        cloudpickle.register_pickle_by_value(module)
    except ImportError:  # pragma: no cover - cloudpickle comes with dask
        pass
    return spec


def _where(exc: BaseException, path: Path) -> str:
    """'line N: ' for the deepest frame of the traceback that is in the study file, else ''."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == path:
            line = frame.lineno
    if line is None and isinstance(exc, SyntaxError) and exc.lineno:
        line = exc.lineno
    return f"line {line}: " if line else ""


def _resolve_cv(cv: Any) -> Any:
    if cv is None:
        return AutoKFold(5)
    if is_int(cv):
        require(cv >= 2, "StudySpec.cv", f"needs at least 2 folds, got {cv}")
        return AutoKFold(cv)
    require(
        callable(getattr(cv, "split", None)) and callable(getattr(cv, "get_n_splits", None)),
        "StudySpec.cv",
        f"must be a scikit-learn splitter (with split and get_n_splits) or a number of folds, got {cv!r}",
    )
    return cv


def _resolve_metrics(metric: Any, model: Any) -> tuple:
    metrics = tuple(metric) if isinstance(metric, (list, tuple)) else (metric,)
    require(len(metrics) >= 1, "StudySpec.metric", "must name at least one metric")
    for each in metrics:
        require(
            each is None or isinstance(each, str) or callable(each),
            "StudySpec.metric",
            f"entries must be metric names or scorer callables, got {each!r}",
        )
    require(len(metrics) == 1 or None not in metrics, "StudySpec.metric", "a multi-objective list cannot contain None")
    if model.metrics_are_scorers:
        from sklearn.metrics import get_scorer_names

        known = get_scorer_names()
        for each in metrics:
            if isinstance(each, str) and each not in known:
                close = difflib.get_close_matches(each, known, n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else " (see sklearn.metrics.get_scorer_names())"
                raise StudySpecError(f"StudySpec.metric {each!r} is not a scikit-learn scorer name{hint}")
    names = [_metric_name(each, model) for each in metrics]
    require(len(set(names)) == len(names), "StudySpec.metric", f"names must be distinct, got {names}")
    return metrics


def _metric_name(metric: Any, model: Any) -> str:
    if metric is None:
        return model.default_metric
    if isinstance(metric, str):
        return metric
    score_func = getattr(metric, "_score_func", None)  # a scikit-learn scorer made by make_scorer
    return getattr(score_func or metric, "__name__", type(metric).__name__)


def _resolve_sampler(sampler: Any, seed: int) -> optuna.samplers.BaseSampler:
    if sampler is None:
        sampler = optuna.samplers.TPESampler(seed=seed)
    elif callable(sampler) and not isinstance(sampler, optuna.samplers.BaseSampler):
        sampler = sampler(seed)
    require(
        isinstance(sampler, optuna.samplers.BaseSampler),
        "StudySpec.sampler",
        f"must be an Optuna sampler or a function seed -> sampler, got {type(sampler).__name__}",
    )
    return sampler


def _resolve_directions(direction: Any, directions: Any, metrics: tuple, model: Any) -> tuple[str, ...]:
    require(
        direction is None or directions is None,
        "StudySpec.direction",
        "and StudySpec.directions are the same setting: give only one",
    )
    given = direction if direction is not None else directions
    if given is None:
        return tuple(_default_direction(metric, model) for metric in metrics)
    given = (given,) if isinstance(given, str) else tuple(given)
    for each in given:
        require(
            each in ("maximize", "minimize"),
            "StudySpec.direction",
            f"entries must be 'maximize' or 'minimize', got {each!r}",
        )
    require(
        len(given) == len(metrics),
        "StudySpec.direction",
        f"has {len(given)} entries but StudySpec.metric has {len(metrics)}: give one direction per metric",
    )
    return given


def _default_direction(metric: Any, model: Any) -> str:
    from sklearn.metrics import get_scorer_names

    name = _metric_name(metric, model).lower()
    if model.metrics_are_scorers or not isinstance(metric, (str, type(None))) or name in get_scorer_names():
        return "maximize"  # scikit-learn scorers: greater is better
    if model.framework == "keras":
        return keras_metric_direction(name)
    minimized = (
        name in _MINIMIZED_NAMES or name.endswith(("_loss", "_error", "_crossentropy")) or name.startswith("val_loss")
    )
    return "minimize" if minimized else "maximize"
