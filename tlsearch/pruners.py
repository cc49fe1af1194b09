"""Pruning between the folds of a k-fold cross-validation, and the reason recorded on each pruned trial."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState


@dataclass(frozen=True)
class PruneDecision:
    """Why a trial was pruned after fold `fold` (0-based) of `n_folds`, in the study's own score units:
    its estimated CV score (`score`) was `gap` worse than the shrunk estimate of the best complete trial
    (`reference_trial`, `reference_score`), more than the `tolerance` the noise (`noise`: one fold's
    run-to-run and fold-to-fold spread) allows."""

    fold: int
    n_folds: int
    score: float
    reference_trial: int
    reference_score: float
    gap: float
    tolerance: float
    noise: float

    def as_attr(self) -> dict:
        """The decision as a plain dict, as stored in the trial's `prune_reason` user attribute."""
        return {key: round(value, 6) if isinstance(value, float) else value for key, value in asdict(self).items()}

    def __str__(self) -> str:
        return (
            f"pruned after fold {self.fold} of {self.n_folds}: estimated score {self.score:.6g} is "
            f"{self.gap:.3g} worse than trial {self.reference_trial}'s shrunk {self.reference_score:.6g}, "
            f"tolerance {self.tolerance:.3g}"
        )


class KFoldPruner(optuna.pruners.BasePruner):
    """Stops a k-fold trial after a fold when it is unlikely to be truly better than the best complete trial.

    Contract (what tlsearch.cv.evaluate reports): step k holds the running mean of the first k+1 fold
    scores, and every trial of the study uses the same K folds (the study's fold plan).

    The model: fold score = trial's true score + fold difficulty + noise of spread sigma (fold-to-fold
    differences between trials and run-to-run noise of training alike). From the "contenders" (the better
    half of the complete trials, at least 3):
    - fold difficulty is each fold's mean over the contenders, so an easy first fold is easy for everyone;
    - sigma is the pooled residual spread of their fold scores once trial and fold effects are removed;
    - the reference is the best complete trial's CV mean shrunk towards the median of all complete trials
      (empirical Bayes): the best of many noisy trials owes part of its lead to luck, so its raw scores are
      too high a bar.
    After n folds, the trial's estimated score is its mean fold score corrected for fold difficulty, with
    variance sigma²/n. It is pruned when its gap to the reference exceeds `margin_sigmas` standard deviations
    of the difference (both estimates' uncertainty) plus `min_margin`.

    Limits: nothing is pruned before `n_startup_trials` trials are complete or before `n_warmup_folds` folds
    have run, nor while fewer than `min_complete_fraction` of the finished trials are complete (a floor of
    fully evaluated trials, so the sampler keeps learning what a whole CV says).
    """

    def __init__(
        self,
        *,
        margin_sigmas: float = 2.0,
        min_margin: float = 0.0,
        n_startup_trials: int = 4,
        n_warmup_folds: int = 0,
        min_complete_fraction: float = 0.25,
    ) -> None:
        if margin_sigmas < 0 or min_margin < 0:
            raise ValueError(f"margin_sigmas and min_margin must be >= 0, got {margin_sigmas} and {min_margin}")
        if n_startup_trials < 3:
            raise ValueError(f"n_startup_trials must be >= 3 (the noise needs three trials), got {n_startup_trials}")
        if n_warmup_folds < 0:
            raise ValueError(f"n_warmup_folds must be >= 0, got {n_warmup_folds}")
        if not 0 <= min_complete_fraction <= 1:
            raise ValueError(f"min_complete_fraction must be in [0, 1], got {min_complete_fraction}")
        self.margin_sigmas = margin_sigmas
        self.min_margin = min_margin
        self.n_startup_trials = n_startup_trials
        self.n_warmup_folds = n_warmup_folds
        self.min_complete_fraction = min_complete_fraction

    def __repr__(self) -> str:
        return (
            f"KFoldPruner(margin_sigmas={self.margin_sigmas}, min_margin={self.min_margin}, "
            f"n_startup_trials={self.n_startup_trials}, n_warmup_folds={self.n_warmup_folds}, "
            f"min_complete_fraction={self.min_complete_fraction})"
        )

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        return self.decide(study, trial) is not None

    def decide(self, study: optuna.Study, trial: FrozenTrial) -> PruneDecision | None:
        """The reason to prune `trial` now, or None to let it go on."""
        step = trial.last_step
        if step is None or step < self.n_warmup_folds:
            return None
        scores = fold_scores(trial.intermediate_values, step)
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        complete = _complete_fold_scores(finished, more_than=step + 1)
        if scores is None or len(complete) < self.n_startup_trials or not self._floor_kept(finished):
            return None
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        numbers = sorted(complete, key=lambda number: -sign * complete[number].mean())
        contenders = np.array([complete[number] for number in numbers[: max(3, len(numbers) // 2)]])
        n_folds, done = contenders.shape[1], len(scores)
        noise = _residual_spread(contenders)
        fold_means = contenders.mean(axis=0)
        estimate = float(np.mean(scores - fold_means[:done]) + fold_means.mean())
        means = np.array([complete[number].mean() for number in numbers])
        reference, reference_variance = _shrunk_best(means, noise**2 / n_folds, sign)
        gap = sign * (reference - estimate)
        spread = math.sqrt(noise**2 / done * (1 + 1 / len(contenders)) + reference_variance)
        tolerance = self.margin_sigmas * spread + self.min_margin
        if gap <= tolerance:
            return None
        return PruneDecision(
            fold=step,
            n_folds=n_folds,
            score=estimate,
            reference_trial=numbers[0],
            reference_score=reference,
            gap=gap,
            tolerance=tolerance,
            noise=noise,
        )

    def _floor_kept(self, finished: list[FrozenTrial]) -> bool:
        """Whether pruning one more trial keeps at least `min_complete_fraction` of the finished trials complete."""
        n_complete = sum(t.state == TrialState.COMPLETE for t in finished)
        return n_complete >= self.min_complete_fraction * (len(finished) + 1)


def prune_decision(trial: optuna.Trial, fold: int, n_folds: int) -> dict | None:
    """Ask the study's pruner about `trial` after fold `fold` of `n_folds`: None to go on, else the reason to
    store as `prune_reason` (the full decision for a KFoldPruner; the fold and the pruner's name for others)."""
    pruner = trial.study.pruner
    if isinstance(pruner, KFoldPruner):
        decision = pruner.decide(trial.study, trial._get_latest_trial())
        return None if decision is None else decision.as_attr()
    if not trial.should_prune():
        return None
    return {"fold": fold, "n_folds": n_folds, "pruner": type(pruner).__name__}


def describe(reason: dict) -> str:
    """One line for a `prune_reason` attribute (read from the store: any dict is accepted)."""
    try:
        if "gap" in reason:
            return str(PruneDecision(**reason))
        return f"pruned after fold {reason['fold']} of {reason['n_folds']} by {reason['pruner']}"
    except (TypeError, KeyError, ValueError):
        return f"pruned (unreadable reason: {str(reason)[:80]})"


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


def _complete_fold_scores(trials: list[FrozenTrial], more_than: int) -> dict[int, np.ndarray]:
    """Trial number -> fold scores of the complete trials with a finite value and the most folds (more than
    `more_than`)."""
    found = {}
    for trial in trials:
        if trial.state != TrialState.COMPLETE or trial.value is None or not math.isfinite(trial.value):
            continue
        scores = None if trial.last_step is None else fold_scores(trial.intermediate_values, trial.last_step)
        if scores is not None and len(scores) > max(more_than, 1):
            found[trial.number] = scores
    n_folds = max((len(scores) for scores in found.values()), default=0)
    return {number: scores for number, scores in found.items() if len(scores) == n_folds}


def _residual_spread(scores: np.ndarray) -> float:
    """Pooled standard deviation of trials x folds scores once each trial's and each fold's mean are removed
    (two-way analysis of variance)."""
    residuals = scores - scores.mean(axis=1, keepdims=True) - scores.mean(axis=0) + scores.mean()
    n_trials, n_folds = scores.shape
    return float(np.sqrt(np.sum(residuals**2) / ((n_trials - 1) * (n_folds - 1))))


def _shrunk_best(means: np.ndarray, noise_variance: float, sign: float) -> tuple[float, float]:
    """The best of the trials' CV `means` shrunk towards their median by the share of their spread that is
    noise (each mean carries `noise_variance`), and the variance of that estimate. The spread is the median
    absolute deviation, so a few diverged trials do not make every lead look real."""
    median = float(np.median(means))
    spread = 1.4826 * float(np.median(np.abs(means - median)))
    true_variance = max(spread**2 - noise_variance, 0.0)
    weight = true_variance / (true_variance + noise_variance) if true_variance + noise_variance > 0 else 1.0
    best = float(means[np.argmax(sign * means)])
    return median + weight * (best - median), weight * noise_variance
