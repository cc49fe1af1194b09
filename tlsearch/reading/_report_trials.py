"""Which trials the report's figures draw: all of them up to `PLOTTED_TRIALS`; past it, the trials a figure must
not lose (each one that improved the best value, the Pareto front, the best few) and a random sample of the rest.

A figure of 100,000 markers or lines is neither readable nor quick to open, and Optuna's plotting functions read
(and deep-copy) the study's trials once per call: they are given a `TrialsView`, an `optuna.Study` whose trials
are this fixed list in memory, read from the store once.
"""

from __future__ import annotations

import random
from collections.abc import Container, Sequence

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tlsearch._compat import optuna as compat

PLOTTED_TRIALS = 2_000


class TrialsView(optuna.Study):
    """`study` as Optuna's plotting and importance functions read it, its trials being `trials` (in memory);
    `n_total` is how many the study has. Everything else (name, directions, metric names) is the study's.

    For reading only: `get_trials` never copies the trials, whatever `deepcopy` says (Optuna's figures read
    `study.trials` once per parameter; copying 10,000 trials each time was most of a report's cost)."""

    def __init__(self, study: optuna.Study, trials: Sequence[FrozenTrial], n_total: int) -> None:
        super().__init__(study_name=study.study_name, storage=compat.storage_of(study))
        self._fixed = list(trials)
        self.n_total = n_total

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return list(self._fixed) if states is None else [t for t in self._fixed if t.state in states]

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()

    @property
    def sampled(self) -> bool:
        return len(self._fixed) < self.n_total

    def sample_note(self) -> str | None:
        """What a sampled figure says about where its points come from; None when it draws every trial."""
        if not self.sampled:
            return None
        return (
            f"Drawn from {len(self._fixed):,} of the study's {self.n_total:,} trials: every complete trial that "
            "improved on the best value so far (the Pareto front, for several objectives), the best ones, and a "
            "random sample of the others. tlsearch trials NAME --format csv lists them all."
        )


def plotted(study: optuna.Study, trials: list[FrozenTrial], limit: int = PLOTTED_TRIALS, best: int = 10) -> TrialsView:
    """The view of `study` the report's figures draw: `trials` (the study's, in number order) when there are at most
    `limit`, else at most `limit` of them: those that set a new best value (or the Pareto front), the `best`
    best, and a sample of the rest drawn with a fixed seed, so two reports of one study draw the same points."""
    if len(trials) <= limit:
        return TrialsView(study, trials, len(trials))
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    kept = {t.number: t for t in _must_keep(study, complete, best)[: limit // 2]}
    others = [t for t in trials if t.number not in kept]
    for trial in random.Random(0).sample(others, limit - len(kept)):
        kept[trial.number] = trial
    return TrialsView(study, sorted(kept.values(), key=lambda t: t.number), len(trials))


def _must_keep(study: optuna.Study, complete: list[FrozenTrial], best: int) -> list[FrozenTrial]:
    """The trials a thinned figure must still show, most important first."""
    if len(study.directions) > 1:
        return study.best_trials
    sign = 1 if study.direction == StudyDirection.MINIMIZE else -1
    records, record = [], float("inf")
    for trial in complete:  # in number order: the optimisation history's best-so-far line is theirs alone
        if sign * trial.values[0] < record:
            record = sign * trial.values[0]
            records.append(trial)
    ranked = sorted(complete, key=lambda t: (sign * t.values[0], t.number))[:best]
    return ranked + records
