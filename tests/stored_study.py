"""A study stored as the driver stores it, whose trials are evaluated as a worker evaluates them, without Dask:
for the tests of what one trial does (tests/test_cv.py, tests/test_models.py)."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from tlsearch._compat import optuna as compat
from tlsearch.execution import _driver as driver
from tlsearch.execution import _trial_task as trial_task
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.stores._stores import Stores

WORKER = "stored-study"  # the worker name the trials record


class StoredStudy:
    """`spec`'s study on the embedded default under `home` (a journal file, the local dataset store, the host
    cache's fold arrays), or in `stores`, bound to its dataset and fold plan by the driver's own code; `arrays`,
    when given, are pushed first as the dataset `spec.dataset` names."""

    def __init__(self, spec, home: str | Path, arrays=None, stores: Stores | None = None) -> None:
        self.spec = spec
        self.stores = stores or Stores(home=Path(home))
        if arrays is not None:
            self.stores.dataset_store().push(spec.dataset, arrays)
        self.study, _ = driver._open_study(spec, self.stores, spec.name, resume=False)
        self.dataset_ref = driver._bind_study(self.study, spec, self.stores, None)
        self.attrs = study_attrs.read(self.study)

    def job(self, trial: optuna.Trial, folds: tuple[int, ...] = ()) -> trial_task.TrialJob:
        """The job the dispatcher would submit for `trial` (with `folds`: one fold task's)."""
        return trial_task.TrialJob(
            self.stores,
            self.study.study_name,
            compat.trial_id(trial),
            self.dataset_ref,
            self.attrs[study_attrs.DATASET_HASH],
            self.attrs[study_attrs.FOLD_PLAN],
            trial_task.sampler_seed(self.spec, self.study.study_name, trial.number),
            folds,
        )

    def evaluate(self, folds: tuple[int, ...] = ()):
        """Ask a trial and evaluate it as a worker does (`evaluate_trial`); what that returns or raises. The
        trial is left running."""
        return self.evaluate_asked(self.study.ask(), folds)

    def evaluate_asked(self, trial: optuna.Trial, folds: tuple[int, ...] = ()):
        """Evaluate `trial`, asked already, as a worker does; what that returns or raises."""
        return trial_task.evaluate_trial(self.job(trial, folds), self.spec, WORKER)

    def trial(self) -> optuna.trial.FrozenTrial:
        """Ask a trial, evaluate it as a worker does, tell its values (or PRUNED); the trial as stored."""
        trial = self.study.ask()
        try:
            self.study.tell(trial, trial_task.evaluate_trial(self.job(trial), self.spec, WORKER))
        except optuna.TrialPruned:
            self.study.tell(trial, state=TrialState.PRUNED)
        return self.study.trials[trial.number]
