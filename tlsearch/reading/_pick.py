"""The pick: the trial `tlsearch best`, `best --json`, the report, `refit` and `tlsearch.results` call the best.

Where a study's leading trials were re-evaluated (trials whose user attributes name the trial they re-run,
`reevaluates`, and the `repeat` they are), the pick is the noise-aware incumbent of `tlsearch.cv._intensify`
over each trial's evaluations; elsewhere it is Optuna's `study.best_trial`, read by the store with no trial
loaded on MongoDB. Re-evaluation trials are never picks themselves: their values count for the trial they re-run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from tlsearch.cv._intensify import REEVALUATES, REPEAT, Estimate, estimate, finite_scores, incumbent
from tlsearch.reading import _study_attrs as study_attrs

__all__ = ["REEVALUATES", "REPEAT", "Pick", "evaluations", "pick", "reevaluated"]


@dataclass(frozen=True)
class Pick:
    """The picked trial and its estimate over all its evaluations (one, where it was never re-evaluated)."""

    trial: FrozenTrial
    estimate: Estimate


def reevaluated(trial: FrozenTrial) -> tuple[int, int] | None:
    """(the number of the trial `trial` re-runs, its repeat), or None for an ordinary trial; hostile attributes
    (not whole numbers, repeat < 1) make it ordinary-looking and never a pick."""
    number, repeat = trial.user_attrs.get(REEVALUATES), trial.user_attrs.get(REPEAT)
    if number is None and repeat is None:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (number, repeat)) or repeat < 1:
        return -1, 0  # unreadable: counts for no trial
    return number, repeat


def evaluations(trials: list[FrozenTrial]) -> tuple[dict[int, dict[int, float]], dict[int, FrozenTrial]]:
    """Each ordinary complete trial's evaluations by repeat (repeat 0: its own value), and the trials by number."""
    ordinary = {t.number: t for t in trials if t.state == TrialState.COMPLETE and reevaluated(t) is None}
    scores = {number: {0: t.value} for number, t in ordinary.items()}
    for trial in trials:
        link = reevaluated(trial)
        if link is not None and trial.state == TrialState.COMPLETE and link[0] in scores:
            scores[link[0]].setdefault(link[1], trial.value)
    return scores, ordinary


def pick(study: optuna.Study) -> Pick | None:
    """The study's pick (one objective), or None with no complete trial. Loads the trials only where the study
    was intensified (`study_attrs.INTENSIFIED`); elsewhere `study.best_trial`, as before."""
    if len(study.directions) > 1:
        raise ValueError("a multi-objective study has several best trials: no single pick")
    if not study_attrs.read(study).get(study_attrs.INTENSIFIED):
        try:
            best = study.best_trial
        except ValueError:
            return None
        return Pick(best, estimate({0: best.value}) or Estimate(math.nan, math.nan, 0))
    scores, ordinary = evaluations(study.get_trials(deepcopy=False))
    number = incumbent(scores, study.direction == optuna.study.StudyDirection.MAXIMIZE)
    if number is None:
        return None
    return Pick(ordinary[number], estimate(finite_scores(scores[number])))
