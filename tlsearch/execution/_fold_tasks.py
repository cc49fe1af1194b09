"""Fold-parallel trials: when workers would sit idle, one trial's folds run as several Dask tasks.

The dispatcher asks `n_tasks` at each submit. A trial it splits has its params fixed first (`fix_params`: the
driver samples them with the sampler its worker would use), so its tasks never sample concurrently; each task
trains its share of the folds (`deal`, `TrialJob.folds`) with no report and no pruning. A `SplitTrial` gathers
their results: the first task that fails fails the trial, and once all are back the driver records the trial
as a sequential run would have (`cv.combine_folds`), plus `fold_tasks`, the number of tasks it ran as.
"""

from __future__ import annotations

import logging

import distributed
import optuna
from optuna.trial import TrialState

from tlsearch import spaces
from tlsearch._compat import optuna as compat
from tlsearch.cv import _evaluate as cv
from tlsearch.execution._trial_task import TrialOutcome, open_trial
from tlsearch.models import FoldResult

log = logging.getLogger(__name__)


def n_tasks(spec, parallelism: int, left: int, n_folds: int) -> int:
    """How many tasks the next trial runs as, when the budget allows `left` more trials after it: its share of
    the `parallelism` task slots among the trials that can still use them, parallelism // (left + 1), at most
    one task per fold. So 1 while many trials are left, and more for the last few, whose tasks take the workers
    that the trials before them free; the slots free right now are not what counts, as trials finishing
    together reach the driver a few at a time. Always 1 with `StudySpec.fold_parallel=False`, kept
    predictions, or one fold."""
    if spec.fold_parallel is False or spec.keep_predictions:
        return 1
    return max(1, min(n_folds, parallelism // (left + 1)))


def deal(n_folds: int, n_tasks: int) -> list[tuple[int, ...]]:
    """The folds of each task, dealt round-robin: deal(5, 2) == [(0, 2, 4), (1, 3)]."""
    return [tuple(range(task, n_folds, n_tasks)) for task in range(n_tasks)]


def fix_params(study: optuna.Study, spec, trial_id: int, seed: int) -> optuna.Trial | None:
    """The driver's handle on the trial, its params sampled now by the sampler its worker would use (seeded
    with `seed`); None if the space fails, so that the trial runs as one task and fails there as usual."""
    try:
        trial = open_trial(spec, compat.storage_of(study), study.study_name, trial_id, seed)
        spaces.sample(trial, spec.space)
    except Exception as error:  # noqa: BLE001 - the worker reports it, with its traceback, on the trial
        log.debug("trial %d runs as one task: sampling its params failed: %s", trial_id, error)
        return None
    return trial


class SplitTrial:
    """The tasks of one trial that runs its folds as several tasks, and the folds they returned."""

    def __init__(self, trial: optuna.Trial, tasks: list[distributed.Future]) -> None:
        self.trial = trial
        self.pending = set(tasks)
        self.n_tasks = len(tasks)
        self.folds: dict[int, FoldResult] = {}
        self.workers: set[str] = set()
        self.seconds = 0.0

    def collect(self, task: distributed.Future, outcome: TrialOutcome) -> TrialOutcome | None:
        """Take a finished task's outcome; the trial's once all its tasks are back or one did not complete
        (the caller cancels `pending`), else None."""
        self.pending.discard(task)
        if outcome.state != TrialState.COMPLETE:
            return outcome
        self.folds.update(outcome.folds)
        self.workers.add(outcome.worker)
        self.seconds = max(self.seconds, outcome.seconds)
        if self.pending:
            return None
        return TrialOutcome(TrialState.COMPLETE, worker=", ".join(sorted(self.workers)), seconds=self.seconds)

    def record(self, spec, first_attrs: dict) -> TrialOutcome:
        """Store the trial's folds, reports and summaries (`cv.combine_folds`) and `fold_tasks`; the outcome
        to tell, with the trial's mean score(s)."""
        results = [self.folds[index] for index in sorted(self.folds)]
        worker = ", ".join(sorted(self.workers))
        try:
            means = cv.combine_folds(self.trial, spec, results, {**first_attrs, "fold_tasks": self.n_tasks})
        except optuna.exceptions.UpdateFinishedTrialError as error:  # failed meanwhile, e.g. as stale elsewhere
            return TrialOutcome(TrialState.FAIL, error=cv.describe_failure(error), worker=worker, seconds=self.seconds)
        values = means if isinstance(means, list) else [means]
        return TrialOutcome(TrialState.COMPLETE, values, worker=worker, seconds=self.seconds)
