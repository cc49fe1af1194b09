"""Pruning between the folds of a k-fold cross-validation."""

from __future__ import annotations

import math

import numpy as np
import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState


class KFoldPruner(optuna.pruners.BasePruner):
    """Stops a k-fold trial after a fold when it is unlikely to finish with a better CV mean than the best trial.

    Contract (what tlsearch.cv.evaluate reports): step k holds the running mean of the first k+1 fold
    scores, and every trial of the study uses the same K folds (the study's fold plan). So trials are
    compared fold by fold: an easy first fold is easy for everyone.

    After fold k (n = k+1 folds done, r = K-n to go), let gap be how much the trial's running mean is worse
    than the best complete trial's running mean over the same n folds, and sigma the fold-to-fold spread
    of score differences between trials (for each complete trial, the standard deviation over folds of its
    fold scores minus the best trial's; median over the complete trials). If the trial's remaining folds
    differ from the best's like its first n did, give or take sigma per fold, its final CV-mean gap has
    expectation gap and standard deviation sd = (r/K) * sigma * sqrt(1/n + 1/r). The trial is pruned when

        gap > margin_sigmas * sd + min_margin

    i.e. when finishing at least level with the best would take a margin_sigmas-standard-deviation surprise
    (1.5: about a 7% chance). The bar is wide after one fold and narrow before the last. No trial is pruned
    before `n_startup_trials` trials are complete, nor before `n_warmup_folds` folds have run.
    """

    def __init__(self, *, margin_sigmas: float = 1.5, min_margin: float = 0.0, n_startup_trials: int = 3,
                 n_warmup_folds: int = 0) -> None:
        if margin_sigmas < 0 or min_margin < 0:
            raise ValueError(f"margin_sigmas and min_margin must be >= 0, got {margin_sigmas} and {min_margin}")
        if n_startup_trials < 2:
            raise ValueError(f"n_startup_trials must be >= 2 (the spread needs two trials), got {n_startup_trials}")
        if n_warmup_folds < 0:
            raise ValueError(f"n_warmup_folds must be >= 0, got {n_warmup_folds}")
        self.margin_sigmas = margin_sigmas
        self.min_margin = min_margin
        self.n_startup_trials = n_startup_trials
        self.n_warmup_folds = n_warmup_folds

    def __repr__(self) -> str:
        return (f"KFoldPruner(margin_sigmas={self.margin_sigmas}, min_margin={self.min_margin}, "
                f"n_startup_trials={self.n_startup_trials}, n_warmup_folds={self.n_warmup_folds})")

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step < self.n_warmup_folds:
            return False
        scores = fold_scores(trial.intermediate_values, step)
        if scores is None:
            return False
        complete = []
        for other in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if other.value is None or not math.isfinite(other.value) or other.last_step is None:
                continue
            other_scores = fold_scores(other.intermediate_values, other.last_step)
            if other_scores is not None and len(other_scores) > max(step, 1):
                complete.append((other.value, other_scores))
        if len(complete) < self.n_startup_trials:
            return False
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        _, best = max(complete, key=lambda entry: sign * entry[0])
        done, total = step + 1, len(best)
        to_go = total - done
        if to_go <= 0:
            return False
        sigma = float(np.median([_spread(each, best) for _, each in complete if each is not best]))
        sd = to_go / total * sigma * math.sqrt(1 / done + 1 / to_go)
        gap = sign * (float(np.mean(best[:done])) - float(np.mean(scores)))
        return gap > self.margin_sigmas * sd + self.min_margin


def fold_scores(intermediate_values: dict[int, float], last_step: int) -> np.ndarray | None:
    """The fold scores 0..last_step recovered from the running means at steps 0..last_step (None if any is
    missing or not finite)."""
    try:
        means = np.array([intermediate_values[step] for step in range(last_step + 1)], dtype=float)
    except KeyError:
        return None
    if not np.all(np.isfinite(means)):
        return None
    counts = np.arange(1, last_step + 2)
    totals = means * counts
    return np.diff(totals, prepend=0.0)


def _spread(scores: np.ndarray, reference: np.ndarray) -> float:
    """Standard deviation over folds of the per-fold differences between two trials."""
    n = min(len(scores), len(reference))
    return float(np.std(scores[:n] - reference[:n], ddof=1))
