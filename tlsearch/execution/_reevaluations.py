"""Which leading trial the driver re-evaluates next, for a study with `StudySpec.intensify` (the noise-aware pick).

A re-evaluation is an ordinary trial of the study, enqueued with the params of the trial it re-runs and the user
attributes `reevaluates` (that trial's number) and `repeat`; it trains all k folds with seeds of its own (fold
seeds derive from the trial number), through the trial slots and the fold budget like any trial, so its folds
count in `n_folds_run` and the budget. TPE sees it as a duplicate of a good trial, which is what it is.
"""

from __future__ import annotations

import optuna

from tlsearch.cv._intensify import next_evaluation
from tlsearch.reading import _pick
from tlsearch.reading import _study_attrs as study_attrs


class Reevaluations:
    """The driver's record of every trial's evaluations, from the study at start and each trial told since."""

    def __init__(self, study: optuna.Study, max_evaluations: int) -> None:
        self.study, self.max_evaluations = study, max_evaluations
        self.maximize = bool(max_evaluations) and study.direction == optuna.study.StudyDirection.MAXIMIZE
        trials = study.get_trials(deepcopy=False) if max_evaluations else []
        self.scores, ordinary = _pick.evaluations(trials)
        self.params = {number: trial.params for number, trial in ordinary.items()}
        # every (trial, repeat) ever enqueued, whatever became of it: a re-evaluation pruned or failed is not
        # asked for again, so the race ends there (the challenger, lacking that repeat, cannot win)
        self.asked = {link for link in map(_pick.reevaluated, trials) if link is not None}

    def enqueue_next(self) -> None:
        """Enqueue the next re-evaluation, if the rule asks for one the study has not had yet."""
        if self.max_evaluations < 2:
            return
        step = next_evaluation(self.scores, self.maximize, self.max_evaluations)
        if step is None or step in self.asked:
            return
        self.asked.add(step)
        if not study_attrs.read(self.study).get(study_attrs.INTENSIFIED):
            study_attrs.write(self.study, study_attrs.INTENSIFIED, True)
        number, repeat = step
        self.study.enqueue_trial(
            self.params[number], user_attrs={_pick.REEVALUATES: number, _pick.REPEAT: repeat}, skip_if_exists=False
        )

    def told(self, trial: optuna.trial.FrozenTrial) -> None:
        """Note a trial the driver told the study (complete ones count)."""
        if not self.max_evaluations or trial.state != optuna.trial.TrialState.COMPLETE:
            return
        link = _pick.reevaluated(trial)
        if link is None:
            self.scores[trial.number] = {0: trial.value}
            self.params[trial.number] = trial.params
        elif link[0] in self.scores:
            self.scores[link[0]].setdefault(link[1], trial.value)
