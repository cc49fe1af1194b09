"""Pruning a k-fold cross-validation between its folds and, for models trained in epochs, inside a fold on the
epoch axis; and the reason recorded on each pruned trial."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tlsearch._compat import optuna as compat
from tlsearch.errors import TLSearchError


@dataclass(frozen=True)
class PruneDecision:
    """Why a trial was pruned after fold `fold` (0-based) of `n_folds`, in the study's own score units:
    its estimated CV score (`score`) was `gap` worse than the shrunk estimate of the best complete trial
    (`reference_trial`, `reference_score`), more than the `tolerance` the noise (`noise`: one fold's
    run-to-run and fold-to-fold spread) allows.

    What a user can check against the stored trials (None in reasons stored before they were recorded): the
    trial's fold scores 0..`fold` (`scores`), the reference trial's on the same folds (`reference_scores`), and
    the mean of each of the `n_folds` folds over the `n_contenders` contenders (`fold_means`); `score` is
    mean(scores - fold_means[:fold + 1]) + mean(fold_means)."""

    fold: int
    n_folds: int
    score: float
    reference_trial: int
    reference_score: float
    gap: float
    tolerance: float
    noise: float
    scores: list[float] | None = None
    reference_scores: list[float] | None = None
    fold_means: list[float] | None = None
    n_contenders: int | None = None

    def as_attr(self) -> dict:
        """The decision as a plain dict, as stored in the trial's `prune_reason` user attribute."""
        return {key: _rounded(value) for key, value in asdict(self).items()}

    def __str__(self) -> str:
        worse = "below" if self.score < self.reference_score else "above"
        rule = (
            f"estimated CV score {_n(self.score)} is {self.gap:.2g} {worse} trial #{self.reference_trial}'s "
            f"{_n(self.reference_score)} (shrunk CV mean), more than the tolerance "
            f"{self.tolerance:.2g} (noise {self.noise:.2g} a fold)"
        )
        if self.scores is None or self.reference_scores is None or self.fold_means is None:
            return f"pruned after fold {self.fold} of {self.n_folds}: {rule}"
        done = len(self.scores)
        folds, means = f"fold {self.fold}", ""
        if done > 1:
            folds = f"folds 0–{self.fold}"
            means = f" (mean {_n(sum(self.scores) / done)} vs {_n(sum(self.reference_scores) / done)})"
        overall = sum(self.fold_means) / len(self.fold_means)
        return (
            f"pruned after {folds} of {self.n_folds}: {_ns(self.scores)} vs trial #{self.reference_trial}'s "
            f"{_ns(self.reference_scores)} on the same folds{means}; the {self.n_contenders} best distinct "
            f"complete trials average {_ns(self.fold_means[:done])} there and {_n(overall)} on all "
            f"{self.n_folds} folds, so its {rule}"
        )


def _rounded(value):
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def _n(value: float) -> str:
    """A score as people read it: 3 decimals for scores like accuracies and losses, else 4 significant digits."""
    return f"{value:.3f}" if 0.1 <= abs(value) < 1000 else f"{value:.4g}"


def _ns(values: list[float]) -> str:
    return ", ".join(_n(value) for value in values)


@dataclass(frozen=True)
class EpochPruneDecision:
    """Why a trial was stopped at epoch `epoch` (1-based) of fold `fold` (0-based) of `n_folds`: its validation
    score there (`score`) ranked `rank` (1 = best) of the `n_ranked` trials that reached that (fold, epoch), and
    only the top 1/`eta` (down to `cutoff`) go on."""

    fold: int
    n_folds: int
    epoch: int
    score: float
    rank: int
    n_ranked: int
    cutoff: float
    eta: int

    def as_attr(self) -> dict:
        """The decision as a plain dict, as stored in the trial's `prune_reason` user attribute."""
        return {key: round(value, 6) if isinstance(value, float) else value for key, value in asdict(self).items()}

    def __str__(self) -> str:
        return (
            f"pruned at epoch {self.epoch} of fold {self.fold} of {self.n_folds}: validation score {self.score:.6g} "
            f"ranked {self.rank} of {self.n_ranked} trials at that epoch of that fold; the top 1/{self.eta} "
            f"(down to {self.cutoff:.6g}) go on"
        )


class EpochPruned(TLSearchError, optuna.TrialPruned):
    """Raised inside a fold's training to stop the trial on the epoch axis; `reason` is the stored decision."""

    def __init__(self, decision: EpochPruneDecision) -> None:
        super().__init__(str(decision))
        self.reason = decision.as_attr()


class EpochPruning:
    """Asynchronous successive halving on the epoch axis, inside the first `n_folds` folds of a trial.

    At the rungs epochs `min_epochs`, `min_epochs * eta`, `min_epochs * eta**2`, ... (before the fold's last
    epoch), a trial's validation score at that epoch of that fold is ranked with every other trial's score at
    the same (fold, epoch), stored as user attribute `split{k}_epoch_scores` ({"epoch": score}); the trial
    goes on only when it is in the top 1/`eta` (at least one trial goes on). With fewer than `min_peers` other
    trials at that (fold, epoch), nothing is decided. Same folds, same epochs: no noise model is needed beyond
    the ranking, which is why it is limited to the early folds, where most of the compute is saved.
    """

    def __init__(self, *, min_epochs: int = 1, eta: int = 3, min_peers: int = 4, n_folds: int = 1) -> None:
        if min_epochs < 1 or eta < 2 or min_peers < 1 or n_folds < 1:
            raise ValueError(
                f"EpochPruning needs min_epochs >= 1, eta >= 2, min_peers >= 1 and n_folds >= 1, got "
                f"min_epochs={min_epochs}, eta={eta}, min_peers={min_peers}, n_folds={n_folds}"
            )
        self.min_epochs, self.eta, self.min_peers, self.n_folds = min_epochs, eta, min_peers, n_folds

    def __repr__(self) -> str:
        return (
            f"EpochPruning(min_epochs={self.min_epochs}, eta={self.eta}, min_peers={self.min_peers}, "
            f"n_folds={self.n_folds})"
        )

    def is_rung(self, fold: int, epoch: int, max_epochs: int) -> bool:
        """Whether (fold, epoch) is a decision point: an early fold, a rung epoch, not the fold's last epoch."""
        if fold >= self.n_folds or epoch >= max_epochs:
            return False
        rung = self.min_epochs
        while rung < epoch:
            rung *= self.eta
        return rung == epoch

    def decide(
        self, study: optuna.Study, trial_number: int, fold: int, n_folds: int, epoch: int, score: float
    ) -> EpochPruneDecision | None:
        """The reason to stop trial `trial_number`, scoring `score` at `epoch` of `fold`, or None to go on."""
        key = str(epoch)
        peers = [
            float(scores[key])
            for other in study.get_trials(deepcopy=False)
            if other.number != trial_number
            and isinstance(scores := other.user_attrs.get(f"split{fold}_epoch_scores"), dict)
            and isinstance(scores.get(key), (int, float))
            and math.isfinite(scores[key])
        ]
        if len(peers) < self.min_peers:
            return None
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        ranked = sorted([*peers, score], key=lambda value: -sign * value)
        rank = 1 + sum(sign * value > sign * score for value in peers)  # ties go the trial's way
        n_kept = max(1, len(ranked) // self.eta)
        if rank <= n_kept:
            return None
        return EpochPruneDecision(fold, n_folds, epoch, score, rank, len(ranked), ranked[n_kept - 1], self.eta)


class KFoldPruner(optuna.pruners.BasePruner):
    """Stops a k-fold trial after a fold when it is unlikely to be truly better than the best complete trial.

    Contract (what tlsearch.cv.evaluate reports): step k holds the running mean of the first k+1 fold
    scores, and every trial of the study uses the same K folds (the study's fold plan).

    The model: fold score = trial's true score + fold difficulty + noise of spread sigma (fold-to-fold
    differences between trials and run-to-run noise of training alike). From the "contenders" (the better
    half of the complete trials with distinct fold scores, at least 3; of trials with the same fold scores,
    only the lowest-numbered counts):
    - fold difficulty is each fold's mean over the contenders, so an easy first fold is easy for everyone;
    - sigma is the pooled residual spread of their fold scores once trial and fold effects are removed;
    - the reference is the best complete trial's CV mean shrunk towards the median of all complete trials
      (empirical Bayes): the best of many noisy trials owes part of its lead to luck, so its raw scores are
      too high a bar.
    After n folds, the trial's estimated score is its mean fold score corrected for fold difficulty, with
    variance sigma²/n. It is pruned when its gap to the reference exceeds `margin_sigmas` standard deviations
    of the difference (both estimates' uncertainty) plus `min_margin`.

    Limits: nothing is pruned before `n_startup_trials` complete trials have distinct fold scores or before
    `n_warmup_folds` folds have run, nor while the contenders show no noise (sigma 0: every difference would
    look real), nor while fewer than `min_complete_fraction` of the finished trials are complete (a floor of
    fully evaluated trials, so the sampler keeps learning what a whole CV says).

    `epochs`: an `EpochPruning` schedule to also stop Keras trials inside their early folds, on the epoch
    axis (the same floor applies); None (the default) prunes between folds only.
    """

    def __init__(
        self,
        *,
        margin_sigmas: float = 2.0,
        min_margin: float = 0.0,
        n_startup_trials: int = 4,
        n_warmup_folds: int = 0,
        min_complete_fraction: float = 0.25,
        epochs: EpochPruning | None = None,
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
        self.epochs = epochs

    def __repr__(self) -> str:
        return (
            f"KFoldPruner(margin_sigmas={self.margin_sigmas}, min_margin={self.min_margin}, "
            f"n_startup_trials={self.n_startup_trials}, n_warmup_folds={self.n_warmup_folds}, "
            f"min_complete_fraction={self.min_complete_fraction}, epochs={self.epochs!r})"
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
        distinct = _distinct(complete)
        if scores is None or len(distinct) < self.n_startup_trials or not self._floor_kept(finished):
            return None
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        numbers = sorted(complete, key=lambda number: -sign * complete[number].mean())
        ranked = [number for number in numbers if number in distinct]
        contenders = np.array([complete[number] for number in ranked[: max(3, len(ranked) // 2)]])
        n_folds, done = contenders.shape[1], len(scores)
        noise = _residual_spread(contenders)
        if noise <= 1e-9 * (1 + np.abs(contenders).max()):  # no noise measured: any difference would look real
            return None
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
            scores=scores.tolist(),
            reference_scores=complete[numbers[0]][:done].tolist(),
            fold_means=fold_means.tolist(),
            n_contenders=len(contenders),
        )

    def decide_epoch(
        self, study: optuna.Study, trial_number: int, fold: int, n_folds: int, epoch: int, score: float
    ) -> EpochPruneDecision | None:
        """The reason to stop a trial inside fold `fold` at `epoch` (see `epochs`), or None to go on."""
        if self.epochs is None:
            return None
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        if not self._floor_kept(finished):
            return None
        return self.epochs.decide(study, trial_number, fold, n_folds, epoch, score)

    def _floor_kept(self, finished: list[FrozenTrial]) -> bool:
        """Whether pruning one more trial keeps at least `min_complete_fraction` of the finished trials complete."""
        n_complete = sum(t.state == TrialState.COMPLETE for t in finished)
        return n_complete >= self.min_complete_fraction * (len(finished) + 1)


def prune_decision(trial: optuna.Trial, fold: int, n_folds: int) -> dict | None:
    """Ask the study's pruner about `trial` after fold `fold` of `n_folds`: None to go on, else the reason to
    store as `prune_reason` (the full decision for a KFoldPruner; the fold and the pruner's name for others)."""
    pruner = trial.study.pruner
    if isinstance(pruner, KFoldPruner):
        decision = pruner.decide(trial.study, compat.latest_trial(trial))
        return None if decision is None else decision.as_attr()
    if not trial.should_prune():
        return None
    return {"fold": fold, "n_folds": n_folds, "pruner": type(pruner).__name__}


def epoch_hook(trial: optuna.Trial, fold: int, n_folds: int):
    """The `Fold.epoch_hook` for fold `fold` of `trial`: None unless the study's pruner is a KFoldPruner with an
    epoch schedule. The hook, called after each epoch with (epoch, max_epochs, score_now), scores the model at
    the rungs (`score_now()`), stores the score for the other trials, and raises EpochPruned to stop the trial."""
    pruner = trial.study.pruner
    if not isinstance(pruner, KFoldPruner) or pruner.epochs is None:
        return None
    schedule, scores = pruner.epochs, {}

    def after_epoch(epoch: int, max_epochs: int, score_now) -> None:
        if not schedule.is_rung(fold, epoch, max_epochs):
            return
        score = float(score_now())
        if not math.isfinite(score):
            return
        scores[str(epoch)] = score
        trial.set_user_attr(f"split{fold}_epoch_scores", dict(scores))
        decision = pruner.decide_epoch(trial.study, trial.number, fold, n_folds, epoch, score)
        if decision is not None:
            raise EpochPruned(decision)

    return after_epoch


def describe(reason: dict) -> str:
    """One line for a `prune_reason` attribute (read from the store: any dict is accepted)."""
    try:
        if "epoch" in reason:
            return str(EpochPruneDecision(**reason))
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


def _distinct(complete: dict[int, np.ndarray]) -> set[int]:
    """The lowest-numbered of each group of trials with the same fold scores. Different parameters that give
    the same model (an iris study's many C values of one LogisticRegression) say nothing about the noise, and
    counted apart they make it look like zero."""
    first = {}
    for number in sorted(complete):
        first.setdefault(tuple(np.round(complete[number], 9)), number)
    return set(first.values())


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
