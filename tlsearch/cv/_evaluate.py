"""How one trial is evaluated: k folds, a report after each fold, pruning between folds, results as user attrs.

`evaluate` runs in the worker process. Per-fold results are stored on the trial as user attributes named
like scikit-learn's cv_results_ (single objective):
    split{k}_test_score, mean_test_score, std_test_score, split{k}_train_score, mean_train_score,
    std_train_score (with return_train_score), split{k}_fit_time, mean_fit_time, std_fit_time,
    split{k}_score_time, mean_score_time, std_score_time, split{k}_n_epochs (Keras, custom loops),
    split{k}_curve (custom loops), split{k}_history (Keras: what it logged each epoch, see KerasTrainer),
    n_splits, n_folds_run, dataset_hash, fold_plan_hash, and on a pruned trial
    prune_reason (a dict: the fold, the gap, the tolerance, the reference trial; see tlsearch.cv._pruners); a trial
    whose folds ran as several tasks (tlsearch.execution._fold_tasks) adds fold_tasks and split{k}_worker.
Multi-objective studies name scores by metric as scikit-learn's multi-metric cv_results_ does:
split{k}_test_{metric}, mean_test_{metric}, std_test_{metric}, ... Standard deviations use ddof=0, like
scikit-learn. A pruned trial keeps the attributes of the folds it ran; its means cover those folds.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import optuna
from sklearn.model_selection import GroupKFold, KFold, StratifiedGroupKFold, StratifiedKFold
from sklearn.model_selection._split import BaseCrossValidator

from tlsearch import spaces
from tlsearch._compat import optuna as compat
from tlsearch.cv import _pruners as pruners
from tlsearch.cv._intensify import REEVALUATES
from tlsearch.cv._pruners import describe as describe_pruning
from tlsearch.cv._pruners import prune_decision
from tlsearch.data import FoldArrays, Folds
from tlsearch.errors import FatalTrialError, NonFiniteScoreError, RetryableTrialError
from tlsearch.models import Fold, FoldResult, FoldTrainer, SpecView, is_class_labels
from tlsearch.seeds import derive_seed
from tlsearch.storage._extensions import BatchedUserAttrs, BatchedWrites

_INFRASTRUCTURE_ERRORS = {
    # the network, the study store, the cluster
    "ConnectionError",
    "TimeoutError",
    "AutoReconnect",
    "ConnectionFailure",
    "ServerSelectionTimeoutError",
    "NetworkTimeout",
    "StorageInternalError",
    "CommClosedError",
    "KilledWorker",
    "FutureCancelledError",
    # memory: host (MemoryError), TensorFlow (ResourceExhaustedError), PyTorch (OutOfMemoryError)
    "MemoryError",
    "ResourceExhaustedError",
    "OutOfMemoryError",
}
_OUT_OF_MEMORY_MESSAGES = ("resource_exhausted", "out of memory", "oom when allocating")


class AutoKFold(BaseCrossValidator):
    """The default splitter: shuffled k-fold that stratifies class labels and keeps groups together.

    StratifiedKFold when y holds class labels (integers, booleans or strings), KFold for a float y (a
    continuous target); with a groups array, StratifiedGroupKFold or GroupKFold instead. Shuffled with
    `random_state`.
    """

    def __init__(self, n_splits: int = 5, *, shuffle: bool = True, random_state: int | None = 0) -> None:
        self.n_splits = n_splits
        self.shuffle = shuffle
        self.random_state = random_state

    def get_n_splits(self, X: Any = None, y: Any = None, groups: Any = None) -> int:
        return self.n_splits

    def split(self, X: Any, y: Any = None, groups: Any = None):
        return self.splitter_for(y, groups).split(X, y, groups)

    def splitter_for(self, y: Any, groups: Any = None) -> BaseCrossValidator:
        """The concrete scikit-learn splitter used for this target and groups."""
        classes = y is not None and is_class_labels(y)
        options = {
            "n_splits": self.n_splits,
            "shuffle": self.shuffle,
            "random_state": self.random_state if self.shuffle else None,
        }
        if groups is not None:
            return StratifiedGroupKFold(**options) if classes else GroupKFold(**options)
        return StratifiedKFold(**options) if classes else KFold(**options)


class Holdout(BaseCrossValidator):
    """A test hold-out around a splitter: `fraction` of the rows (stratified for class labels, shuffled with
    `random_state`) never enter cross-validation; `cv` splits the other rows. `partition` gives both sets;
    the refit scores the final model on the held-out rows."""

    def __init__(self, cv: Any, fraction: float, *, random_state: int = 0) -> None:
        self.cv = cv
        self.fraction = fraction
        self.random_state = random_state

    def get_n_splits(self, X: Any = None, y: Any = None, groups: Any = None) -> int:
        return self.cv.get_n_splits(X, y, groups)

    def partition(self, X: Any, y: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """(cross-validation rows, held-out rows), each sorted."""
        from sklearn.model_selection import train_test_split

        rows = np.arange(len(X))
        stratify = y if y is not None and is_class_labels(y) else None
        kept, held_out = train_test_split(
            rows, test_size=self.fraction, random_state=self.random_state, stratify=stratify
        )
        return np.sort(kept), np.sort(held_out)

    def split(self, X: Any, y: Any = None, groups: Any = None):
        kept, _ = self.partition(X, y)
        subset = lambda array: None if array is None else np.asarray(array)[kept]
        for train, valid in self.cv.split(np.asarray(X)[kept], subset(y), subset(groups)):
            yield kept[train], kept[valid]


def evaluate(
    trial: optuna.Trial,
    spec: SpecView,
    arrays: Mapping[str, np.ndarray],
    folds: Folds | Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    dataset_hash: str = "",
    fold_plan_hash: str = "",
    artifact_store: Any = None,
    placement: Mapping[str, str] | None = None,
) -> float | list[float]:
    """Sample the trial's params, then train and score each fold; return the mean score (one per objective).

    `arrays` holds "X", "y" and optionally "groups" and "sample_weight" (read-only, memory-mapped: only
    the rows of one fold are read at a time); `folds` are the trial's folds (`tlsearch.data.Folds`: the host
    cache's views, or rows gathered when read), or (train rows, validation rows) index pairs as scikit-learn's
    splitters yield them, gathered in index order as cross_validate does. After fold k the trial reports, at
    step k, the running mean of
    the first k+1 fold scores (the fold score itself when the study's pruner is Optuna's WilcoxonPruner),
    then asks the study's pruner and, if told to, stores why as `prune_reason` (tlsearch.cv.prune_decision)
    and raises optuna.TrialPruned; a KFoldPruner with an epoch schedule may also stop a Keras trial inside a
    fold (tlsearch.cv.epoch_hook), its partial fold then left out of the results. Multi-objective trials report
    nothing (Optuna cannot prune them). Errors from the space, the model or training propagate unchanged.
    With `spec.keep_predictions` and an `artifact_store`, each fold's validation predictions are kept as a
    trial artifact `predictions.npz` (`fold{k}_index`: dataset rows, `fold{k}_predictions`).
    `placement` (where the trial runs: `worker`, and `gpu` on a GPU worker) is stored with the first fold.
    """
    params = _sample_params(trial, spec)
    if not isinstance(folds, Folds):
        folds = Folds.gathered(arrays, folds)
    trainer = spec.model.trainer(spec, arrays)
    recorder = _ResultRecorder(
        trial, spec, {**first_attrs(dataset_hash, fold_plan_hash, len(folds)), **(placement or {})}
    )
    try:
        return _run_folds(trial, spec, arrays, folds, params, trainer, recorder, artifact_store)
    finally:
        trainer.close()


def first_attrs(dataset_hash: str, fold_plan_hash: str, n_splits: int) -> dict[str, Any]:
    """The attributes a trial's first fold stores with its own: what it was evaluated on, and its number of folds."""
    return {"dataset_hash": dataset_hash, "fold_plan_hash": fold_plan_hash, "n_splits": n_splits}


def evaluate_folds(
    trial: optuna.Trial,
    spec: SpecView,
    arrays: Mapping[str, np.ndarray],
    folds: Sequence[Any],
    indices: Sequence[int],
    *,
    worker: str = "",
    placement: dict[str, str] | None = None,
) -> dict[int, FoldResult]:
    """Train and score only the folds at `indices`, for a trial that runs its folds as several tasks (its
    params already fixed by the driver, so sampling returns them): each fold's split{k}_* attributes and
    split{k}_worker are stored as it finishes; nothing is reported and nothing pruned. The results by fold
    index, for `combine_folds`. `placement` is stored with the first fold, as `evaluate` does (the last
    task to write it wins)."""
    params = _sample_params(trial, spec)
    trainer = spec.model.trainer(spec, arrays)
    recorder = _ResultRecorder(trial, spec, dict(placement or {}))
    results: dict[int, FoldResult] = {}
    try:
        for index in indices:
            fold = read_fold(folds[index], _fold_seed(spec, trial, index), trial.number)
            results[index] = trainer.run(params, fold)
            recorder.add(index, results[index])
            recorder.note({f"split{index}_worker": worker})
            recorder.write()
    finally:
        trainer.close()
    return results


def combine_folds(
    trial: optuna.Trial, spec: SpecView, results: Sequence[FoldResult], first_attrs: dict[str, Any]
) -> float | list[float]:
    """Record a trial whose folds ran as several tasks as a sequential run records it: its fold attributes,
    one report per fold (what `evaluate` would have reported, so pruners compare other trials against it),
    the summaries and `first_attrs`; return the mean score (one per objective)."""
    recorder = _ResultRecorder(trial, spec, first_attrs)
    with one_write(trial):
        for index, result in enumerate(results):
            recorder.add(index, result)
            if not spec.is_multi_objective:
                recorder.write(report=_report_value(trial, recorder, result))
        means = recorder.summarise()
    return means if spec.is_multi_objective else means[0]


def one_write(trial: optuna.Trial) -> contextlib.AbstractContextManager[None]:
    """A block whose writes to `trial` its store sends as one (`BatchedWrites`), where it can."""
    storage = trial.storage
    if isinstance(storage, BatchedWrites):
        return storage.one_write(compat.trial_id(trial))
    return contextlib.nullcontext()


def _sample_params(trial: optuna.Trial, spec: SpecView) -> dict:
    with one_write(trial):  # the space's parameters, stored before any fold trains
        params = spaces.sample(trial, spec.space)
    if not isinstance(params, dict):
        raise spaces.InvalidSpaceError(
            f"space of study {spec.name!r} returned {type(params).__name__}, expected a dict of hyperparameters"
        )
    return params


def _fold_seed(spec: SpecView, trial: optuna.Trial, index: int) -> int:
    return derive_seed(spec.seed, spec.name, trial.number, index)


def _report_value(trial: optuna.Trial, recorder: _ResultRecorder, result: FoldResult) -> float:
    """What a trial reports after a fold: the fold score for Optuna's WilcoxonPruner, else the running mean."""
    if isinstance(trial.study.pruner, optuna.pruners.WilcoxonPruner):
        return result.test_scores[0]
    return recorder.running_mean()


def _run_folds(
    trial: optuna.Trial,
    spec: SpecView,
    arrays: Mapping[str, np.ndarray],
    folds: Folds,
    params: dict,
    trainer: FoldTrainer,
    recorder: _ResultRecorder,
    artifact_store: Any,
) -> float | list[float]:
    kept: dict[str, np.ndarray] = {}
    # A re-evaluation of a leading trial (StudySpec.intensify) trains every fold: the pick pairs whole repeats.
    prunable = not spec.is_multi_objective and not (getattr(spec, "intensify", 0) and REEVALUATES in trial.user_attrs)
    for index, rows in enumerate(folds):
        fold = read_fold(rows, _fold_seed(spec, trial, index), trial.number)
        fold.epoch_hook = pruners.epoch_hook(trial, index, len(folds)) if prunable else None
        try:
            result = trainer.run(params, fold)
        except pruners.EpochPruned as pruned:
            recorder.note({"prune_reason": pruned.reason})
            recorder.summarise()
            _keep_predictions(trial, artifact_store, kept)
            raise
        recorder.add(index, result)
        if result.predictions is not None:
            kept[f"fold{index}_index"] = rows.validation_index
            kept[f"fold{index}_predictions"] = np.asarray(result.predictions)
        if index == len(folds) - 1:
            break  # the last fold's results and report are stored with the summaries, in one write
        if spec.is_multi_objective:
            recorder.write()
            continue
        recorder.write(report=_report_value(trial, recorder, result))
        reason = prune_decision(trial, index, len(folds)) if prunable else None
        if reason is not None:
            recorder.note({"prune_reason": reason})  # stored with the summaries: no extra write
            recorder.summarise()
            _keep_predictions(trial, artifact_store, kept)
            raise optuna.TrialPruned(describe_pruning(reason))
    means = recorder.summarise(report=None if spec.is_multi_objective else _report_value(trial, recorder, result))
    _keep_predictions(trial, artifact_store, kept)
    return means if spec.is_multi_objective else means[0]


def _keep_predictions(trial: optuna.Trial, artifact_store: Any, kept: dict[str, np.ndarray]) -> None:
    """Upload the folds' validation predictions as the trial's artifact `predictions.npz` (no pickle)."""
    if artifact_store is None or not kept:
        return
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "predictions.npz"
        np.savez(path, **kept)
        optuna.artifacts.upload_artifact(artifact_store=artifact_store, file_path=str(path), study_or_trial=trial)


def read_fold(rows: FoldArrays, seed: int, trial_number: int | None = None) -> Fold:
    """The trainer's view of one fold of the trial: its train and validation arrays, as `rows` holds them."""
    train, valid = rows.train, rows.validation
    return Fold(
        x_train=train["X"],
        y_train=train["y"],
        x_validation=valid["X"],
        y_validation=valid["y"],
        index=rows.index,
        seed=seed,
        sample_weight=train.get("sample_weight"),
        trial_number=trial_number,
    )


class _ResultRecorder:
    """Stores each fold's results on the trial as it finishes, and the summaries at the end."""

    def __init__(self, trial: optuna.Trial, spec: SpecView, first_attrs: dict[str, Any]) -> None:
        self._trial = trial
        self._suffixes = ["score"] if not spec.is_multi_objective else list(spec.metric_names)
        self._results: list[FoldResult] = []
        self._pending = dict(first_attrs)  # not yet written; the first attributes go with the first fold's

    def add(self, index: int, result: FoldResult) -> None:
        """Take in fold `index`'s result; `write` stores it."""
        attrs: dict[str, Any] = {}
        for suffix, score in zip(self._suffixes, result.test_scores):
            if not np.isfinite(score):
                raise NonFiniteScoreError(f"fold {index}: test {suffix} is {score}")
            attrs[f"split{index}_test_{suffix}"] = score
        for suffix, score in zip(self._suffixes, result.train_scores or []):
            attrs[f"split{index}_train_{suffix}"] = score
        attrs[f"split{index}_fit_time"] = result.fit_time
        attrs[f"split{index}_score_time"] = result.score_time
        if result.n_epochs is not None:
            attrs[f"split{index}_n_epochs"] = result.n_epochs
        if result.curve is not None:
            attrs[f"split{index}_curve"] = result.curve
        if result.history is not None:
            attrs[f"split{index}_history"] = result.history
        self._pending.update(attrs)
        self._results.append(result)

    def running_mean(self) -> float:
        return float(np.mean([result.test_scores[0] for result in self._results]))

    def note(self, attrs: dict[str, Any]) -> None:
        """Take in more attributes; the next `write` or `summarise` stores them."""
        self._pending.update(attrs)

    def summarise(self, report: float | None = None) -> list[float]:
        """Store mean/std attributes over the folds run so far (and report `report`, as `write` does); return the
        mean test score per metric."""
        results = self._results
        attrs: dict[str, Any] = {"n_folds_run": len(results)}
        if not results:  # stopped inside its first fold
            self._pending.update(attrs)
            self.write()
            return []
        means = []
        for position, suffix in enumerate(self._suffixes):
            test = [result.test_scores[position] for result in results]
            means.append(float(np.mean(test)))
            attrs[f"mean_test_{suffix}"], attrs[f"std_test_{suffix}"] = means[-1], float(np.std(test))
            if all(result.train_scores is not None for result in results):
                train = [result.train_scores[position] for result in results]  # type: ignore[index]
                attrs[f"mean_train_{suffix}"] = float(np.mean(train))
                attrs[f"std_train_{suffix}"] = float(np.std(train))
        for timing in ("fit_time", "score_time"):
            values = [getattr(result, timing) for result in results]
            attrs[f"mean_{timing}"], attrs[f"std_{timing}"] = float(np.mean(values)), float(np.std(values))
        self._pending.update(attrs)
        self.write(report)
        return means

    def write(self, report: float | None = None) -> None:
        """Store the attributes taken in since the last write, then report `report` at the step of the last fold
        added through the public `trial.report`, so that `trial.should_prune()` sees it: one write where the
        store can (tlsearch's MongoDB and journal stores), else one each."""
        trial, storage = self._trial, self._trial.storage
        attrs, self._pending = self._pending, {}
        with one_write(trial):
            if isinstance(storage, BatchedUserAttrs):
                storage.set_trial_user_attrs(compat.trial_id(trial), attrs)
            else:
                for key, value in attrs.items():
                    trial.set_user_attr(key, value)
            if report is not None:
                trial.report(report, len(self._results) - 1)


def describe_failure(exc: BaseException) -> dict[str, Any]:
    """User attributes describing why a trial failed: error_type, error_message, error_retryable, error_traceback."""
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    description: dict[str, Any] = {
        "error_type": name,
        "error_message": _truncate(str(exc), 2000),
        "error_retryable": is_retryable(exc),
    }
    if exc.__traceback__ is not None:
        description["error_traceback"] = _truncate(
            "".join(traceback.format_exception(cls, exc, exc.__traceback__)), 4000, keep="end"
        )
    return description


def is_retryable(exc: BaseException) -> bool:
    """Whether a trial that failed with `exc` is retried: as the model's code marked it (a RetryableTrialError
    or FatalTrialError in the cause chain, the outermost first), else as `is_infrastructure_error` says."""
    for current in _cause_chain(exc):
        if isinstance(current, (RetryableTrialError, FatalTrialError)):
            return isinstance(current, RetryableTrialError)
    return is_infrastructure_error(exc)


def _cause_chain(exc: BaseException) -> list[BaseException]:
    """`exc`, then what it was raised from or while handling, outermost first, each once."""
    chain: list[BaseException] = []
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop(0)
        if current is not None and all(current is not seen for seen in chain):
            chain.append(current)
            pending += [current.__cause__, current.__context__]
    return chain


def is_infrastructure_error(exc: BaseException) -> bool:
    """True for failures a retry on another worker may cure: a lost worker or connection, a storage error,
    running out of host or accelerator memory. False for what the trial's params cause (bad values, a NaN
    loss, an exception in the model builder), which would fail again. The cause chain is searched too.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, (optuna.TrialPruned, spaces.InvalidSpaceError, FloatingPointError)):
            return False
        if any(base.__name__ in _INFRASTRUCTURE_ERRORS for base in type(current).__mro__):
            return True
        message = str(current).lower()
        if any(marker in message for marker in _OUT_OF_MEMORY_MESSAGES):
            return True
        pending += [current.__cause__, current.__context__]
    return False


def _truncate(text: str, limit: int, keep: str = "start") -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…" if keep == "start" else "…" + text[-(limit - 1) :]
