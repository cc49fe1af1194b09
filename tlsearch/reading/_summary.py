"""A study's trials summed up for `tlsearch status` and `best`: by the store where it can (MongoDB), else from
its trials (a journal is replayed whole anyway)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import optuna
from optuna.trial import TrialState

from tlsearch._compat import optuna as compat
from tlsearch.storage._extensions import SummarizedTrials, TrialsSummary


def summarize_trials(study: optuna.Study) -> TrialsSummary:
    """See `TrialsSummary`; no trial is loaded where the store sums them up itself."""
    storage = compat.storage_of(study)
    if isinstance(storage, SummarizedTrials):
        return storage.summarize_trials(compat.study_id(study))
    trials = study.get_trials(deepcopy=False)
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    moments = starts + [t.datetime_complete for t in trials if t.datetime_complete is not None]
    summary = TrialsSummary(
        counts=dict(Counter(t.state.name for t in trials)),
        first_start=min(starts, default=None),
        last_activity=max(moments, default=None),
    )
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if len(study.directions) > 1 or not complete:
        return summary
    pick = max if study.direction == optuna.study.StudyDirection.MAXIMIZE else min
    best = pick(complete, key=lambda t: t.value)  # the first of the best, as Optuna's get_best_trial
    ties = sum(t.value == best.value for t in complete)
    return dataclasses.replace(summary, best_value=best.value, best_number=best.number, best_ties=ties)
