"""The noise-aware pick (intensification, as SMAC3's): which trial is the incumbent when leading trials earn
extra evaluations, what to evaluate next, and the incumbent's estimate with its uncertainty.

An *evaluation* is one repeat of a trial's k-fold CV: repeat 0 is the trial itself, repeat r > 0 a re-run of
its params on fresh seeds. Repeats are paired across trials: repeat r of one trial and repeat r of another are
compared with each other. A challenger replaces the incumbent only when it has been evaluated on every repeat
the incumbent has and its mean over those repeats is better (the paired comparison). With one evaluation per
trial the rule picks the best CV mean, as Optuna's `study.best_trial` does.

Pure functions over plain numbers: no study, no storage. A score that is not finite (NaN, inf, read from a
store that holds anything) is treated as a missing evaluation: it never wins and never crashes the rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

REEVALUATES = "reevaluates"  # user attribute of a re-evaluation trial: the number of the trial it re-runs
REPEAT = "repeat"  # user attribute of a re-evaluation trial: which repeat (1, 2, ...) it is

Evaluations = Mapping[int, Mapping[int, float]]  # trial number -> {repeat: that repeat's CV mean}


@dataclass(frozen=True)
class Estimate:
    """A trial's score over all its evaluations: the mean, its standard error (NaN with one evaluation) and
    how many evaluations."""

    mean: float
    standard_error: float
    n: int

    def __str__(self) -> str:
        if self.n < 2:
            return f"{self.mean:.4f} (1 evaluation)"
        return f"{self.mean:.4f} ± {self.standard_error:.4f} ({self.n} evaluations)"


def finite_scores(scores: Mapping[int, float]) -> dict[int, float]:
    """The evaluations of one trial that count: finite numbers only, keyed by repeat."""
    kept = {}
    for repeat, score in scores.items():
        try:
            value = float(score)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            kept[int(repeat)] = value
    return kept


def estimate(scores: Mapping[int, float]) -> Estimate | None:
    """Mean ± standard error over a trial's finite evaluations; None if it has none."""
    values = list(finite_scores(scores).values())
    if not values:
        return None
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return Estimate(mean, math.nan, 1)
    variance = math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1)
    return Estimate(mean, math.sqrt(variance / len(values)), len(values))


def beats(challenger: Mapping[int, float], incumbent: Mapping[int, float], maximize: bool) -> bool:
    """Whether `challenger` replaces `incumbent`: it has every repeat the incumbent has and its mean over those
    repeats is strictly better (a tie keeps the incumbent). Both are finite scores by repeat."""
    shared = set(incumbent)
    if not shared or not shared <= set(challenger):
        return False
    mine = math.fsum(challenger[r] for r in shared) / len(shared)
    theirs = math.fsum(incumbent[r] for r in shared) / len(shared)
    return mine > theirs if maximize else mine < theirs


def incumbent(evaluations: Evaluations, maximize: bool) -> int | None:
    """The pick: trials are taken in order of number; the first with a finite evaluation is the incumbent, and
    each later trial replaces it if it `beats` it (so among equals the earliest stays). None if no trial has a
    finite score."""
    cleaned = {number: finite_scores(scores) for number, scores in evaluations.items()}
    cleaned = {number: scores for number, scores in cleaned.items() if scores}
    best: int | None = None
    for number in sorted(cleaned):
        if best is None or beats(cleaned[number], cleaned[best], maximize):
            best = number
    return best


def is_racing(challenger: Mapping[int, float], incumbent: Mapping[int, float], maximize: bool) -> bool:
    """Whether a challenger races the incumbent: it lacks some of the incumbent's repeats and its mean over its
    own evaluations is not worse than the incumbent's mean over all of its own (a lucky incumbent's mean falls
    as it is re-evaluated, and the trials it had beaten then get their chance)."""
    if not challenger or set(incumbent) <= set(challenger):
        return False
    mine = math.fsum(challenger.values()) / len(challenger)
    theirs = math.fsum(incumbent.values()) / len(incumbent)
    return mine >= theirs if maximize else mine <= theirs


def next_evaluation(evaluations: Evaluations, maximize: bool, max_repeats: int) -> tuple[int, int] | None:
    """The next re-evaluation to run, as (trial number, repeat), or None for "sample a new trial".

    A challenger whose mean is not worse than the incumbent's (`is_racing`) races on: it gets the
    incumbent's lowest repeat it lacks (the best such challenger first). With no race on, the incumbent gets
    its next repeat while it has fewer than `max_repeats`, once per challenger it has seen off: its
    evaluations grow with the number of trials that came close, as in SMAC3's intensifier."""
    cleaned = {number: finite_scores(scores) for number, scores in evaluations.items()}
    cleaned = {number: scores for number, scores in cleaned.items() if scores}
    best = incumbent(cleaned, maximize)
    if best is None:
        return None
    held = cleaned[best]
    racing = [n for n, scores in cleaned.items() if n != best and is_racing(scores, held, maximize)]
    if racing:
        sign = 1.0 if maximize else -1.0
        challenger = max(racing, key=lambda n: (sign * estimate(cleaned[n]).mean, -n))
        return challenger, min(set(held) - set(cleaned[challenger]))
    if len(held) >= max_repeats:
        return None
    challengers = sum(1 for n, scores in cleaned.items() if n != best and len(scores) > 1)
    if len(held) - 1 > challengers:  # one more repeat per challenger raced, and one to start with
        return None
    missing = [r for r in range(max_repeats) if r not in held]
    return (best, missing[0]) if missing else None
