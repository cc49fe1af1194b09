"""Search quality at equal compute: how good a model each pruning strategy finds, re-evaluated on fresh seeds.

Each study is searched once per strategy and seed with the same space, the same TPE sampler seed and the same
compute budget: a no-pruning study's `--trials` trials x K folds, in folds, or in fold-epochs for studies
trained in epochs (x the epochs per fold); pruning strategies spend what they save on more trials. Trials run
in one process with an in-memory Optuna study through tlsearch.cv.evaluate, as on a worker, with the pruner
objects users get. Studies:

    synthetic   a 5-fold objective with a known truth: 4 floats and a categorical, fold difficulty, a
                trial x fold interaction and run-to-run noise (sd 0.015, as Keras on digits)
    synth-ep    the same trained in 9 epochs per fold: a learning curve whose speed grows with x1 (the optimum
                learns fast, not fastest) and per-epoch noise, ending at the synthetic fold score
    gboost      scikit-learn HistGradientBoosting on breast_cancer, 5-fold (search_spaces.tree_ensembles)
    mlp         the Keras MLP on digits (studies/digits_mlp.py: its space, 8 epochs, early stopping), 3-fold
    cnn         the Keras CNN on digits as 8x8 images (studies/images_cnn.py: 6 epochs), 3-fold

Strategies: no pruning; MedianPruner on the running mean; SuccessiveHalvingPruner and HyperbandPruner with
folds as the resource; WilcoxonPruner (each fold's score); the KFoldPruner of commit 014f684 (old, read from
git; left out with a note where git or the commit is missing); tlsearch's default KFoldPruner (new); and for
studies trained in epochs, KFoldPruner(epochs=EpochPruning()) (+epochs: successive halving on epochs inside
the first fold, then the fold rule) and, on the Keras studies, KerasTuner's Hyperband (same space via the study's own
space function, max_epochs = the study's epochs, factor 3, trained on fold 0's training rows and scored on
its validation rows, stopped at the same budget in epochs; its pick is then re-evaluated like the others).
On every study, "intensify (N)" and "KFold+intensify N": no pruning or the default KFoldPruner with the
noise-aware pick of tlsearch.cv._intensify (leading trials re-run on fresh seeds, up to N evaluations each,
within the same budget; the pick is the incumbent, not the best CV mean). Where Ray is importable, "Ray ASHA"
and "Ray FIFO": Ray Tune's Tuner with OptunaSearch, ASHA on folds or no scheduler (bench/ray_peer.py; their
CPU column is the search's wall time, since Ray's trials run in its worker processes). Only when named in
--strategies (EXPERIMENTS), the first-fold experiments of issue 26: the default KFoldPruner with a smaller
margin on the first fold ("KFold 1 sd fold 0", "KFold 0.5 sd fold 0"), with ASHA-like rungs (a trial not in the
top 1/eta of every finished trial's running mean after the first fold, or after folds 1 and 4, is pruned too:
"KFold+rung eta 3", ...), asynchronous successive halving alone on those rungs ("ASHA rungs 0,3 e4"), and
pruned trials told to TPE as complete with their running mean, as Ray's OptunaSearch does ("... told TPE").

Measures, per study x strategy (means over seeds): compute in folds, fold-epochs and CPU-seconds; the pick
(the best complete trial by CV mean) re-evaluated: its params trained again on all folds of 3 fresh fold
splits with fresh seeds, mean (the synthetic studies' truth instead); regret = best known re-evaluated score -
the pick's; the compute spent when the pick was first within 0.5% of the best known (synthetic studies only;
"-" if never); each ratio to no pruning.

    python bench/search_quality.py --quick          # every study end to end, small budgets (see --quick's note)
    python bench/search_quality.py                  # 10 seeds synthetic, 5 gboost, 3 Keras, full budgets

CPU cost on 2 shared cores: a synthetic search is about 1 CPU-s, a gboost one 20-40 CPU-s, a Keras MLP one of
5 trials x 3 folds x 4 epochs about 50 CPU-s; the full Keras plans need hours there (a GPU or more cores).
    python bench/search_quality.py --studies synthetic synth-ep --seeds 20
    python bench/search_quality.py --studies synthetic --seeds 30 --more-compute 2 4   # + no pruning at 2x, 4x
    python bench/search_quality.py --studies synthetic --seeds 20 --strategies "KFoldPruner (new)" \
        "intensify (3)" "intensify (2)" "KFold+intensify 3" "KFold+intensify 2"        # the noise-aware pick
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import importlib.util
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tlsearch.cv import _evaluate as cv  # noqa: E402
from tlsearch.cv._intensify import incumbent, next_evaluation  # noqa: E402
from tlsearch.cv._pruners import EpochPruneDecision, EpochPruning, KFoldPruner, PruneDecision  # noqa: E402
from tlsearch.seeds import derive_seed  # noqa: E402
from tlsearch.spec._spec import CustomLoop, SklearnModel, StudySpec  # noqa: E402

OLD_PRUNER_COMMIT = "014f684"
REACH = 0.005  # "within 0.5% of the best known"
REEVALUATIONS = 3
DEFAULT = "KFoldPruner (new)"  # tlsearch's default strategy: the other rows are paired with it


def old_kfold_pruner_class() -> type | None:
    """The KFoldPruner as it was before issue 15, read from git so the comparison stays exact; None (with a
    note) where git or that commit is missing, e.g. in an unpacked release."""
    try:
        source = subprocess.run(
            ["git", "show", f"{OLD_PRUNER_COMMIT}:tlsearch/pruners.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"note: no 'KFoldPruner (old)' row: cannot read commit {OLD_PRUNER_COMMIT} with git ({exc})")
        return None
    spec = importlib.util.spec_from_loader("old_pruners", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, f"{OLD_PRUNER_COMMIT}:tlsearch/pruners.py", "exec"), module.__dict__)
    return module.KFoldPruner


def strategies(n_folds: int, epochs: int | None) -> dict[str, Callable[[], optuna.pruners.BasePruner] | str]:
    """Strategy name -> pruner factory, or "kerastuner" for KerasTuner's own Hyperband search; `epochs`: epochs
    per fold for studies trained in epochs."""
    chosen: dict[str, Callable[[], optuna.pruners.BasePruner] | str] = {
        "no pruning": optuna.pruners.NopPruner,
        "MedianPruner": optuna.pruners.MedianPruner,
        "SuccessiveHalving": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=1),
        "Hyperband": lambda: optuna.pruners.HyperbandPruner(min_resource=1, max_resource=n_folds),
        "WilcoxonPruner": lambda: optuna.pruners.WilcoxonPruner(p_threshold=0.1),
    }
    if epochs:
        chosen["SH on fold-epochs"] = lambda: OptunaOnFoldEpochs(
            optuna.pruners.SuccessiveHalvingPruner(min_resource=1), epochs
        )
        chosen["Hyperband on f-ep"] = lambda: OptunaOnFoldEpochs(
            optuna.pruners.HyperbandPruner(min_resource=1, max_resource=n_folds * epochs), epochs
        )
    old = old_kfold_pruner_class()
    if old is not None:
        chosen["KFoldPruner (old)"] = old
    chosen["KFoldPruner (new)"] = KFoldPruner
    chosen["intensify (3)"] = Intensified(optuna.pruners.NopPruner, 3)
    chosen["intensify (2)"] = Intensified(optuna.pruners.NopPruner, 2)
    chosen["KFold+intensify 3"] = Intensified(KFoldPruner, 3)
    chosen["KFold+intensify 2"] = Intensified(KFoldPruner, 2)
    if epochs:
        chosen["KFoldPruner+epochs"] = lambda: KFoldPruner(epochs=EpochPruning())
        chosen["KerasTuner Hyperband"] = "kerastuner"
    if ray_installed():
        chosen["Ray ASHA"] = "ray-asha"
        chosen["Ray FIFO"] = "ray-fifo"
    # The first-fold experiments of issue 26 (docs/benchmarks.md): run only when named in --strategies.
    chosen["KFold 1 sd fold 0"] = lambda: FirstFoldMargin(1.0)
    chosen["KFold 0.5 sd fold 0"] = lambda: FirstFoldMargin(0.5)
    chosen["KFold+rung eta 3"] = lambda: FirstFoldRung(3)
    chosen["KFold+rung eta 4"] = lambda: FirstFoldRung(4)
    chosen["KFold+rung 4 fl .1"] = lambda: FirstFoldRung(4, min_complete_fraction=0.1)
    chosen["KFold+rungs 0,3 e4"] = lambda: FirstFoldRung(4, rungs=(0, 3))
    chosen["ASHA rungs 0,3 e4"] = lambda: FirstFoldRung(
        4, min_peers=1, rungs=(0, 3), fold_rule=False, min_complete_fraction=0.0
    )
    chosen["KFold told TPE"] = ToldComplete(KFoldPruner)
    chosen["ASHA 0,3 told TPE"] = ToldComplete(
        lambda: FirstFoldRung(4, min_peers=1, rungs=(0, 3), fold_rule=False, min_complete_fraction=0.0)
    )
    return chosen


EXPERIMENTS = (  # strategies run only when named (--strategies): the first-fold experiments of issue 26
    "KFold 1 sd fold 0",
    "KFold 0.5 sd fold 0",
    "KFold+rung eta 3",
    "KFold+rung eta 4",
    "KFold+rung 4 fl .1",
    "KFold+rungs 0,3 e4",
    "ASHA rungs 0,3 e4",
    "KFold told TPE",
    "ASHA 0,3 told TPE",
)


def ray_installed() -> bool:
    """Whether Ray Tune's rows can run (bench/ray_peer.py says how to put Ray beside the environment)."""
    return importlib.util.find_spec("ray") is not None


@dataclass(frozen=True)
class Intensified:
    """A strategy with the noise-aware pick (tlsearch.cv._intensify): `pruner` prunes the new trials as usual,
    the leading trials earn re-evaluations (repeats of the whole CV on fresh seeds, never pruned, counted in the
    budget) up to `max_repeats` evaluations each, and the pick is the incumbent instead of the best CV mean."""

    pruner: Callable[[], optuna.pruners.BasePruner]
    max_repeats: int = 3

    def __call__(self) -> optuna.pruners.BasePruner:
        return self.pruner()


@dataclass(frozen=True)
class ToldComplete:
    """A strategy whose pruned trials are told to the sampler as complete, with the running mean they were
    stopped at, as Ray Tune's OptunaSearch tells TPE of the trials its scheduler stops (bench-only, for issue
    26). The pick is still the best trial that ran every fold."""

    pruner: Callable[[], optuna.pruners.BasePruner]

    def __call__(self) -> optuna.pruners.BasePruner:
        return self.pruner()


class _EveryEpoch:
    """An epoch schedule that asks at every epoch of every fold."""

    def is_rung(self, fold: int, epoch: int, max_epochs: int) -> bool:
        return True


class OptunaOnFoldEpochs(KFoldPruner):
    """An Optuna pruner with (fold, epoch) as its resource, as a user would wire one into a k-fold loop: every
    epoch's validation score is reported at step `fold * epochs + epoch` of a shadow trial of its own, which the
    Optuna pruner then judges. It rides on tlsearch's epoch hook (which scores the model after each epoch, as
    Optuna's Keras pruning callback needs a validation pass each epoch) and makes no fold-level decisions."""

    def __init__(self, pruner: optuna.pruners.BasePruner, epochs: int) -> None:
        super().__init__(epochs=_EveryEpoch(), min_complete_fraction=0.0)
        self.epochs_per_fold = epochs
        self.shadow = optuna.create_study(direction="maximize", pruner=pruner)
        self.shadow_trials: dict[int, optuna.Trial] = {}

    def decide(self, study, trial):
        return None

    def decide_epoch(self, study, trial_number, fold, n_folds, epoch, score):
        if trial_number not in self.shadow_trials:
            self.shadow_trials[trial_number] = self.shadow.ask()
        shadow = self.shadow_trials[trial_number]
        sign = 1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
        shadow.report(sign * score, fold * self.epochs_per_fold + epoch)
        if not shadow.should_prune():
            return None
        return EpochPruneDecision(fold, n_folds, epoch, score, 0, 0, math.nan, 0)


class FirstFoldMargin(KFoldPruner):
    """The default KFoldPruner with a smaller margin (`first_margin` standard deviations) after the first
    `first_folds` folds only: a first-fold rule that stops more trials (bench-only, for issue 26)."""

    def __init__(self, first_margin: float, first_folds: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.first_margin, self.first_folds = first_margin, first_folds

    def decide(self, study, trial):
        if trial.last_step is None or trial.last_step >= self.first_folds:
            return super().decide(study, trial)
        margin, self.margin_sigmas = self.margin_sigmas, self.first_margin
        try:
            return super().decide(study, trial)
        finally:
            self.margin_sigmas = margin


class FirstFoldRung(KFoldPruner):
    """The default KFoldPruner plus ASHA-like rungs (bench-only, for issue 26): after the folds at steps `rungs`
    (0: the first fold), a trial whose running mean is not in the top 1/`eta` of the running means there of
    every finished trial (complete or pruned, at least `min_peers` of them) and its own is pruned too. Every
    trial has the same folds, so raw means rank. The floor of complete trials (`min_complete_fraction`) still
    applies. `fold_rule=False` leaves the KFoldPruner's own rule out: asynchronous successive halving alone."""

    def __init__(
        self, eta: int = 3, min_peers: int = 4, rungs: tuple[int, ...] = (0,), fold_rule: bool = True, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.eta, self.min_peers, self.rungs, self.fold_rule = eta, min_peers, rungs, fold_rule

    def decide(self, study, trial):
        decision = super().decide(study, trial) if self.fold_rule else None
        step = trial.last_step
        if (
            decision is not None
            or step not in self.rungs
            or not math.isfinite(score := trial.intermediate_values[step])
        ):
            return decision
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        peers = [
            t.intermediate_values[step]
            for t in finished
            if t.number != trial.number and math.isfinite(t.intermediate_values.get(step, math.nan))
        ]
        if len(peers) < self.min_peers or not self._floor_kept(finished):
            return None
        sign = 1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
        ranked = sorted([*peers, score], key=lambda value: -sign * value)
        n_kept = max(1, len(ranked) // self.eta)
        if 1 + sum(sign * value > sign * score for value in peers) <= n_kept:  # its rank; ties go its way
            return None
        cutoff = ranked[n_kept - 1]
        return PruneDecision(
            step, trial.user_attrs.get("n_splits", 0), score, -1, cutoff, sign * (cutoff - score), 0.0, 0.0
        )


# ---------------------------------------------------------------- studies


@dataclass
class Study:
    """One benchmark study: a spec factory (fresh sampler/pruner/seed), its arrays and how a pick is re-evaluated."""

    name: str
    make_spec: Callable[[int, optuna.pruners.BasePruner, Any], StudySpec]  # (seed, pruner, cv) -> spec
    arrays: dict
    n_folds: int
    truth: Callable[[dict], float] | None = None  # the known expected score of params (synthetic only)
    cheap: bool = True  # whether every pick along the way is re-evaluated (compute to reach): synthetic only
    epochs: int | None = None  # Keras: epochs per fold; the budget is then in fold-epochs
    build: Callable | None = None  # Keras: the study's model builder (for KerasTuner)

    def spent(self, done: Search) -> int:
        """Compute in the budget's unit: fold-epochs for Keras, folds otherwise."""
        return done.fold_epochs if self.epochs else done.folds


SYNTHETIC_NOISE = 0.015
SYNTHETIC_FOLDS = np.array([-0.02, 0.01, 0.0, 0.015, -0.005])
SYNTHETIC_CENTRE = np.array([0.3, 0.7, 0.55, 0.2])
SYNTHETIC_WEIGHTS = np.array([0.3, 0.2, 0.1, 0.05])
SYNTHETIC_KINDS = {"a": 0.0, "b": 0.01, "c": 0.04}


def synthetic_space(trial) -> dict:
    params = {f"x{i}": trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(4)}
    params["kind"] = trial.suggest_categorical("kind", list(SYNTHETIC_KINDS))
    return params


def synthetic_truth(params: dict) -> float:
    """The expected CV score of `params` over fresh folds and seeds (best: 0.95 at the centre, kind a)."""
    x = np.array([params[f"x{i}"] for i in range(4)])
    return float(0.95 - np.sum(SYNTHETIC_WEIGHTS * (x - SYNTHETIC_CENTRE) ** 2) - SYNTHETIC_KINDS[params["kind"]])


def synthetic_fold(params: dict, fold, report) -> float:
    """One fold: truth + the fold's difficulty + a trial x fold interaction + run-to-run noise."""
    interaction = 0.008 * math.sin(7.0 * fold.index + 11.0 * params["x0"] + 5.0 * params["x2"])
    noise = np.random.default_rng(fold.seed).normal(0.0, SYNTHETIC_NOISE)
    return synthetic_truth(params) + SYNTHETIC_FOLDS[fold.index % 5] + interaction + noise


def synthetic_study() -> Study:
    def make_spec(seed, pruner, splitter):
        return StudySpec(
            name="synthetic",
            dataset="synthetic",
            space=synthetic_space,
            model=CustomLoop(synthetic_fold),
            cv=splitter or 5,
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=pruner,
            seed=seed,
        )

    rows = np.arange(100, dtype=float).reshape(-1, 1)
    return Study("synthetic", make_spec, {"X": rows, "y": rows[:, 0]}, 5, truth=synthetic_truth)


SYNTHETIC_EPOCHS = 9
SYNTHETIC_EPOCH_NOISE = 0.01


def synthetic_epochs_fold(params: dict, fold, report) -> float:
    """A synthetic fold trained in SYNTHETIC_EPOCHS epochs, ending at `synthetic_fold`'s score: a learning curve
    whose speed grows with x1 (the optimum, x1 = 0.7, learns fast but not fastest) plus per-epoch noise. Calls
    the fold's epoch hook after each epoch, as the Keras trainer does."""
    final = synthetic_fold(params, fold, report)
    speed = 0.3 + 1.5 * params["x1"]
    rng = np.random.default_rng(fold.seed + 1)
    for epoch in range(1, SYNTHETIC_EPOCHS + 1):
        lag = 0.3 * (math.exp(-speed * epoch) - math.exp(-speed * SYNTHETIC_EPOCHS))
        score = final - lag + (rng.normal(0.0, SYNTHETIC_EPOCH_NOISE) if epoch < SYNTHETIC_EPOCHS else 0.0)
        report(score, epoch)
        if fold.epoch_hook is not None:
            fold.epoch_hook(epoch, SYNTHETIC_EPOCHS, lambda: score)
    return final


def synthetic_epochs_study() -> Study:
    base = synthetic_study()

    def make_spec(seed, pruner, splitter):
        spec = base.make_spec(seed, pruner, splitter)
        spec.model = CustomLoop(synthetic_epochs_fold)
        return spec

    return Study("synth-ep", make_spec, base.arrays, 5, truth=synthetic_truth, epochs=SYNTHETIC_EPOCHS)


def gboost_study() -> Study:
    from sklearn.datasets import load_breast_cancer

    from search_spaces.tree_ensembles import gradient_boosting, make_gradient_boosting

    def space(trial):
        return gradient_boosting(trial, max_iter=(10, 200))

    def make_spec(seed, pruner, splitter):
        return StudySpec(
            name="gboost",
            dataset="breast_cancer",
            space=space,
            model=SklearnModel(lambda params: make_gradient_boosting(params, random_state=None)),
            cv=splitter or 5,
            metric="accuracy",
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=pruner,
            seed=seed,
        )

    X, y = load_breast_cancer(return_X_y=True)
    return Study("gboost", make_spec, {"X": X, "y": y}, 5, cheap=False)


def keras_study(study_file: str, n_folds: int, cheap: bool, epochs: int | None = None) -> Study:
    from sklearn.datasets import load_digits

    from tlsearch.spec._spec import load_study_file

    base = load_study_file(ROOT / "studies" / study_file)
    model = base.model if epochs is None else dataclasses.replace(base.model, epochs=epochs)

    def make_spec(seed, pruner, splitter):
        return StudySpec(
            name=base.name,
            dataset=base.dataset,
            space=base.space,
            model=model,
            cv=splitter or n_folds,
            metric="accuracy",
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=pruner,
            seed=seed,
        )

    X, y = load_digits(return_X_y=True)
    arrays = {"X": X.astype("float32"), "y": y}
    return Study(base.name, make_spec, arrays, n_folds, cheap=cheap, epochs=model.epochs, build=model.build)


# ---------------------------------------------------------------- searching


@dataclass
class Search:
    """What one strategy did on one study and seed."""

    folds: int = 0
    fold_epochs: int = 0
    cpu_seconds: float = 0.0
    trials: int = 0
    pruned: int = 0
    picks: list[tuple[int, dict]] = field(default_factory=list)  # (folds spent so far, pick's params)
    complete: list[dict] = field(default_factory=list)  # every complete trial's params


def in_memory_study(spec: StudySpec) -> optuna.Study:
    """An in-memory Optuna study as the driver opens one (directions, sampler, pruner)."""
    return optuna.create_study(directions=list(spec.directions_), sampler=spec.sampler_, pruner=spec.pruner_)


def search(study: Study, make_pruner, seed: int, budget: int) -> Search:
    """Run TPE trials until `budget` (folds, or fold-epochs for Keras) is spent; record the pick after each trial.
    An `Intensified` strategy also runs the re-evaluations its rule asks for, within the same budget."""
    spec = study.make_spec(seed, make_pruner(), None)
    folds = list(spec.cv_.split(study.arrays["X"], study.arrays["y"]))
    optuna_study = in_memory_study(spec)
    maximize = optuna_study.direction == optuna.study.StudyDirection.MAXIMIZE
    evaluations: dict[int, dict[int, float]] = {}  # trial number -> {repeat: CV mean} (intensified only)
    done = Search()
    started = time.process_time()
    while study.spent(done) < budget:
        trial = optuna_study.ask()
        try:
            value = cv.evaluate(trial, spec, study.arrays, folds)
            optuna_study.tell(trial, value)
            evaluations[trial.number] = {0: value}
        except optuna.TrialPruned:
            if isinstance(make_pruner, ToldComplete):
                frozen = optuna_study.trials[trial.number]
                optuna_study.tell(trial, frozen.intermediate_values[frozen.last_step])
            else:
                optuna_study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            done.pruned += 1
        _count(study, done, optuna_study.trials[trial.number].user_attrs)
        done.trials += 1
        if isinstance(make_pruner, Intensified):
            while study.spent(done) < budget and (
                step := next_evaluation(evaluations, maximize, make_pruner.max_repeats)
            ):
                number, repeat = step
                params = optuna_study.trials[number].params
                evaluations[number][repeat] = _reevaluate(study, seed, number, repeat, params, folds, done)
            pick = incumbent(evaluations, maximize)
            best = None if pick is None else dict(optuna_study.trials[pick].params)
        else:
            best = _best_params(optuna_study, spec.cv_.get_n_splits())
        if best is not None and (not done.picks or done.picks[-1][1] != best):
            done.picks.append((study.spent(done), best))
    done.cpu_seconds = time.process_time() - started
    done.complete = [
        t.params
        for t in optuna_study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
        if t.user_attrs["n_folds_run"] == spec.cv_.get_n_splits()
    ]
    return done


def _count(study: Study, done: Search, attrs: dict) -> None:
    """Add one trial's folds and fold-epochs (from its user attributes) to `done`."""
    done.folds += attrs["n_folds_run"]
    done.fold_epochs += sum(attrs.get(f"split{k}_n_epochs", 1) for k in range(attrs["n_folds_run"]))
    done.fold_epochs += attrs.get("prune_reason", {}).get("epoch", 0)  # the epochs of a fold stopped midway


def _reevaluate(study: Study, seed: int, number: int, repeat: int, params: dict, folds, done: Search) -> float:
    """Repeat `repeat` of trial `number`: its params on all folds with fresh seeds of its own (the seed names the
    trial and the repeat, so no two evaluations share their noise), unpruned; its folds count in `done`."""
    spec = study.make_spec(derive_seed(seed, "repeat", number, repeat), optuna.pruners.NopPruner(), None)
    side = in_memory_study(spec)
    side.enqueue_trial(params)
    trial = side.ask()
    value = cv.evaluate(trial, spec, study.arrays, folds)
    side.tell(trial, value)
    _count(study, done, side.trials[0].user_attrs)
    return value


class _HyperParametersAsTrial:
    """An Optuna-trial look-alike over KerasTuner's HyperParameters, so the study's own space defines both."""

    def __init__(self, hp) -> None:
        self.hp = hp

    def suggest_int(self, name, low, high, *, step=1, log=False):
        return self.hp.Int(name, low, high, step=None if log else step, sampling="log" if log else "linear")

    def suggest_float(self, name, low, high, *, step=None, log=False):
        return self.hp.Float(name, low, high, step=step, sampling="log" if log else "linear")

    def suggest_categorical(self, name, choices):
        if list(choices) == [False, True]:
            return self.hp.Boolean(name)
        return self.hp.Choice(name, list(choices))


def _without_tensorboard() -> None:
    """KerasTuner imports TensorBoard's hparams plugin on the TensorFlow backend even with no TensorBoard
    callback (the only case it uses it for); tensorflow-cpu no longer brings tensorboard, so stand in for it."""
    try:
        import tensorboard.plugins.hparams.api  # noqa: F401
    except ImportError:
        import types

        for name in ("tensorboard", "tensorboard.plugins", "tensorboard.plugins.hparams"):
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules["tensorboard.plugins.hparams"].api = sys.modules.setdefault(
            "tensorboard.plugins.hparams.api", types.ModuleType("tensorboard.plugins.hparams.api")
        )


def kerastuner_search(study: Study, seed: int, budget: int) -> Search:
    """KerasTuner's Hyperband on the same space and epochs per fold (max_epochs), trained on fold 0's training
    rows and scored on its validation rows, stopped once `budget` epochs are spent; its pick is its best."""
    import tempfile

    _without_tensorboard()
    import keras_tuner

    from tlsearch.models import import_keras

    keras = import_keras()
    spec = study.make_spec(seed, optuna.pruners.NopPruner(), None)
    X, y = study.arrays["X"], study.arrays["y"]
    train, valid = next(iter(spec.cv_.split(X, y)))
    n_classes = len(np.unique(y))
    done = Search()

    def build(hp):
        return study.build(spec.space(_HyperParametersAsTrial(hp)), X.shape[1:], n_classes)

    with tempfile.TemporaryDirectory() as folder:
        tuner = keras_tuner.Hyperband(
            build,
            objective=keras_tuner.Objective("val_accuracy", "max"),
            max_epochs=study.epochs,
            factor=3,
            hyperband_iterations=1000,  # stopped by the budget instead
            seed=seed,
            directory=folder,
            overwrite=True,
        )

        class Budget(keras.callbacks.Callback):
            # KerasTuner deep-copies callbacks for each trial: what they share lives on the class
            search, oracle = done, tuner.oracle

            def on_epoch_end(self, epoch, logs=None):
                Budget.search.fold_epochs += 1
                if Budget.search.fold_epochs >= budget:  # no more trials: the oracle stops at max_trials
                    Budget.oracle.max_trials = len(Budget.oracle.trials)

        started = time.process_time()
        tuner.search(
            X[train],
            y[train],
            validation_data=(X[valid], y[valid]),
            batch_size=spec.model.batch_size,
            callbacks=[Budget()],
            verbose=0,
        )
        done.cpu_seconds = time.process_time() - started
        done.trials = len(tuner.oracle.trials)
        best = tuner.get_best_hyperparameters(1)[0].values
        done.picks.append((done.fold_epochs, {key: value for key, value in best.items() if "tuner/" not in key}))
    return done


def _params_key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def _best_params(study: optuna.Study, n_folds: int) -> dict | None:
    """The params of the best complete trial that ran all `n_folds` folds (the first of equals), or None."""
    sign = 1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
    best = None
    for trial in study.get_trials(deepcopy=False, states=[TrialState.COMPLETE]):
        if trial.user_attrs["n_folds_run"] == n_folds and (best is None or sign * trial.value > sign * best.value):
            best = trial
    return None if best is None else dict(best.params)


class Reevaluator:
    """The re-evaluated score of params: the known truth, or the mean CV score over REEVALUATIONS fresh fold
    splits and seeds (cached per params)."""

    def __init__(self, study: Study, repeats: int = REEVALUATIONS) -> None:
        self.study = study
        self.repeats = repeats
        self.cache: dict[tuple, float] = {}

    def __call__(self, params: dict) -> float:
        key = _params_key(params)
        if key not in self.cache:
            self.cache[key] = self.study.truth(params) if self.study.truth else self._retrain(params)
        return self.cache[key]

    def _retrain(self, params: dict) -> float:
        from sklearn.model_selection import StratifiedKFold

        scores = []
        for repeat in range(self.repeats):
            fresh = 10_000 + repeat
            splitter = StratifiedKFold(self.study.n_folds, shuffle=True, random_state=fresh)
            spec = self.study.make_spec(fresh, optuna.pruners.NopPruner(), splitter)
            folds = list(splitter.split(self.study.arrays["X"], self.study.arrays["y"]))
            optuna_study = in_memory_study(spec)
            optuna_study.enqueue_trial(params)
            scores.append(cv.evaluate(optuna_study.ask(), spec, self.study.arrays, folds))
        return float(np.mean(scores))


# ---------------------------------------------------------------- reporting


def summarise(study: Study, runs: dict[str, list[Search]], reevaluate: Reevaluator) -> list[dict]:
    """One row per strategy: means over seeds of compute, re-evaluated score, regret and compute to reach."""
    if study.cheap:
        for searches in runs.values():
            for done in searches:
                for _, params in done.picks:
                    reevaluate(params)
    final_scores = {name: [reevaluate(done.picks[-1][1]) for done in searches] for name, searches in runs.items()}
    best_known = (
        max(reevaluate.cache.values())
        if study.truth is None
        else synthetic_truth({**{f"x{i}": c for i, c in enumerate(SYNTHETIC_CENTRE)}, "kind": "a"})
    )
    rows = []
    for name, searches in runs.items():
        scores = final_scores[name]
        reach = [_compute_to_reach(done, reevaluate, best_known) for done in searches] if study.cheap else None
        oracle = (
            statistics.mean(best_known - max(map(study.truth, done.complete)) for done in searches)
            if study.truth and all(done.complete for done in searches)
            else None
        )
        rows.append(
            {
                "study": study.name,
                "strategy": name,
                "folds": statistics.mean(d.folds for d in searches),
                "fold_epochs": statistics.mean(d.fold_epochs for d in searches),
                "cpu": statistics.mean(d.cpu_seconds for d in searches),
                "trials": statistics.mean(d.trials for d in searches),
                "pruned": statistics.mean(d.pruned / d.trials for d in searches),
                "score": statistics.mean(scores),
                "regret": statistics.mean(best_known - score for score in scores),
                "regrets": [best_known - score for score in scores],
                "reach": reach,
                "oracle": oracle,
            }
        )
    return rows


def _compute_to_reach(done: Search, reevaluate: Reevaluator, best_known: float) -> int | None:
    for spent, params in done.picks:
        if reevaluate(params) >= best_known - REACH * abs(best_known):
            return spent
    return None


def print_table(rows: list[dict]) -> None:
    print()
    print(
        f"{'study':10} {'strategy':18} {'trials':>6} {'pruned':>6} {'folds':>6} {'fold-ep':>7} {'CPU s':>7} "
        f"{'re-eval':>8} {'regret':>8} {'regret/none':>11} {'- default (se)':>16} {'oracle':>7} {'reach 0.5%':>10} "
        f"{'seeds reached':>13}"
    )
    for row in rows:
        base = next(r for r in rows if r["study"] == row["study"] and r["strategy"] == "no pruning")
        default = next((r for r in rows if r["study"] == row["study"] and r["strategy"] == DEFAULT), None)
        ratio = row["regret"] / base["regret"] if base["regret"] > 0 else float("nan")
        reach = row["reach"]
        reached = [spent for spent in reach if spent is not None] if reach is not None else []
        reach_text = f"{statistics.mean(reached):10.0f}" if reached else f"{'-':>10}"
        seeds_text = f"{len(reached)}/{len(reach)}" if reach is not None else "-"
        oracle_text = f"{row['oracle']:7.4f}" if row["oracle"] is not None else f"{'-':>7}"
        print(
            f"{row['study']:10} {row['strategy']:18} {row['trials']:6.1f} {row['pruned']:6.0%} "
            f"{row['folds']:6.0f} {row['fold_epochs']:7.0f} {row['cpu']:7.1f} {row['score']:8.4f} "
            f"{row['regret']:8.4f} {ratio:11.2f} {_paired(row, default):>16} {oracle_text} {reach_text} "
            f"{seeds_text:>13}"
        )
    print(
        "(means over seeds; compute budget equal per study: pruning strategies run more trials; 'regret/none' is "
        "the regret's ratio to no pruning; 'oracle': the regret of the best complete trial by its truth, what a "
        "perfect pick among the trials run would give (synthetic studies); 'reach 0.5%': compute (folds, or fold-epochs for studies trained in "
        "epochs) spent when the pick was first within 0.5% of the best known, over the seeds that got there; "
        "'- default (se)': the mean over seeds of the regret minus the default KFoldPruner's on the same seed, "
        "with its standard error: a difference within about 2 se is noise)"
    )


def _paired(row: dict, default: dict | None) -> str:
    """`row`'s regret minus the default's, paired by seed: 'mean (se)', or '-' without a default row."""
    if default is None or row is default or len(row["regrets"]) != len(default["regrets"]):
        return "-"
    differences = [mine - theirs for mine, theirs in zip(row["regrets"], default["regrets"], strict=True)]
    se = statistics.stdev(differences) / math.sqrt(len(differences)) if len(differences) > 1 else math.nan
    return f"{statistics.mean(differences):+.4f} ({se:.4f})"


# ---------------------------------------------------------------- main

PLANS = {  # study -> (trials of a no-pruning budget, seeds), full and --quick
    "synthetic": ((60, 10), (40, 5)),
    "synth-ep": ((40, 10), (40, 3)),
    "gboost": ((40, 5), (15, 1)),
    "mlp": ((24, 3), (5, 1)),
    "cnn": ((20, 3), (4, 1)),
}
QUICK_EPOCHS = 4  # --quick: Keras epochs per fold
QUICK_KERAS_STRATEGIES = ("no pruning", "KFoldPruner (new)", "KFoldPruner+epochs", "KerasTuner Hyperband")


@functools.cache
def make_study(name: str, keras_epochs: int | None = None) -> Study:
    """Study `name`; the Keras studies trained `keras_epochs` epochs per fold (None: the study file's)."""
    if name == "synthetic":
        return synthetic_study()
    if name == "synth-ep":
        return synthetic_epochs_study()
    if name == "gboost":
        return gboost_study()
    if name not in ("mlp", "cnn"):  # e.g. a Study's own name ("digits-mlp"), which is not the bench's
        raise ValueError(f"unknown study {name!r}: one of {', '.join(PLANS)}")
    file = "digits_mlp.py" if name == "mlp" else "images_cnn.py"
    return keras_study(file, 3, cheap=False, epochs=keras_epochs)


def chosen_strategies(study: Study, name: str, wanted: list[str] | None, quick: bool) -> dict:
    """The strategies to run on `study`: all that apply (KerasTuner on the Keras studies only; EXPERIMENTS only when
    named), or `wanted`; with --quick, only the main ones on the Keras studies. No pruning always runs: it is
    the reference."""
    if wanted is None and quick and study.build is not None:
        wanted = list(QUICK_KERAS_STRATEGIES)
    return {
        key: make
        for key, make in strategies(study.n_folds, study.epochs).items()
        if ((key in wanted if wanted else key not in EXPERIMENTS) or key == "no pruning")
        and (make != "kerastuner" or study.build is not None)
    }


def run_search(name: str, keras_epochs: int | None, key: str, seed: int, budget: int) -> Search:
    """One search of study `name` with strategy `key` (a job: runs in a worker process)."""
    _quiet()
    study = make_study(name, keras_epochs)
    make_pruner = strategies(study.n_folds, study.epochs)[key]
    if make_pruner == "kerastuner":
        return kerastuner_search(study, seed, budget)
    if make_pruner in ("ray-asha", "ray-fifo"):
        from ray_peer import ray_search

        return ray_search(study, name, seed, budget, make_pruner.removeprefix("ray-"), keras_epochs)
    return search(study, make_pruner, seed, budget)


def run_reevaluation(name: str, keras_epochs: int | None, params: dict, repeats: int) -> float:
    """The re-evaluated score of `params` on study `name` (a job: runs in a worker process)."""
    _quiet()
    return Reevaluator(make_study(name, keras_epochs), repeats)(params)


def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # WilcoxonPruner
    warnings.filterwarnings("ignore", category=UserWarning)


class Jobs:
    """Runs jobs in `n` worker processes (spawned: TensorFlow must not be forked), or in this one when n is 1."""

    def __init__(self, n: int) -> None:
        if n > 1:  # one thread each: OpenMP threads (HistGradientBoosting) spin on cores the other jobs hold
            os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up lines, once per process
        context = multiprocessing.get_context("spawn")
        self.pool = None if n == 1 else concurrent.futures.ProcessPoolExecutor(n, mp_context=context)

    def submit(self, function, *args) -> concurrent.futures.Future:
        if self.pool is not None:
            return self.pool.submit(function, *args)
        future = concurrent.futures.Future()
        future.set_result(function(*args))
        return future


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small budgets and fewer seeds")
    parser.add_argument("--studies", nargs="+", choices=list(PLANS), default=list(PLANS))
    parser.add_argument("--strategies", nargs="+", help="only these strategies (names as printed)")
    parser.add_argument("--trials", type=int, help="budget: this many no-pruning trials' folds (or fold-epochs)")
    parser.add_argument("--seeds", type=int, help="seeds per study")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed, first-seed + 1, ...")
    parser.add_argument(
        "--epochs", type=int, help=f"Keras epochs per fold (default: the study's; {QUICK_EPOCHS} with --quick)"
    )
    parser.add_argument(
        "--more-compute",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="also run no pruning with N times the budget (e.g. 2 4): the regret more compute alone buys",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count(),
        help="searches run at once, each in its own process (default: cores)",
    )
    args = parser.parse_args(argv)
    _quiet()
    if args.quick:
        print(
            f"--quick: small budgets, 1-5 seeds, Keras studies at {QUICK_EPOCHS} epochs per fold with "
            f"{', '.join(QUICK_KERAS_STRATEGIES)} only and 1 re-evaluation: it shows the benchmark runs, its "
            "figures are not the benchmark's"
        )
    if not ray_installed():
        print("note: no Ray Tune rows: ray is not importable (bench/ray_peer.py says how to add it)")
    keras_epochs = args.epochs or (QUICK_EPOCHS if args.quick else None)
    started = time.monotonic()
    jobs = Jobs(max(1, args.jobs))
    searches = {}  # study name -> {(strategy, seed): future}
    # Every search is submitted at once, the costliest studies (last in PLANS) first, so that the processes never
    # wait for a study's end and the last job to finish is a short one.
    for name in sorted(args.studies, key=list(PLANS).index, reverse=True):
        study = make_study(name, keras_epochs)
        n_trials, n_seeds = PLANS[name][1 if args.quick else 0]
        n_trials, n_seeds = args.trials or n_trials, args.seeds or n_seeds
        budget = n_trials * study.n_folds * (study.epochs or 1)
        unit = (
            f"fold-epochs ({n_trials} trials x {study.n_folds} folds x {study.epochs} epochs)"
            if study.epochs
            else (f"folds ({n_trials} trials x {study.n_folds} folds)")
        )
        print(f"{name}: budget {budget} {unit}, {n_seeds} seed(s)", flush=True)
        chosen = chosen_strategies(study, name, args.strategies, args.quick)
        searches[name] = {
            (key, seed): jobs.submit(run_search, name, keras_epochs, key, seed, budget)
            for seed in range(args.first_seed, args.first_seed + n_seeds)
            for key in chosen
        }
        searches[name].update(  # what more compute alone buys: the bar a pruner's savings are worth against
            {
                (f"none, {times}x compute", seed): jobs.submit(
                    run_search, name, keras_epochs, "no pruning", seed, budget * times
                )
                for seed in range(args.first_seed, args.first_seed + n_seeds)
                for times in args.more_compute
            }
        )

    runs: dict[str, dict[str, list[Search]]] = {}  # study name -> strategy -> its searches, one per seed
    reevaluations = {}  # study name -> {params key: future}
    for name in args.studies:
        study = make_study(name, keras_epochs)
        for (key, seed), future in searches[name].items():
            try:
                done = future.result()
            except Exception as exc:  # a failed search is reported and left out, never the whole run
                print(f"  {name} seed {seed} {key:20} FAILED: {exc!r}", flush=True)
                continue
            runs.setdefault(name, {}).setdefault(key, []).append(done)
            print(
                f"  {name} seed {seed} {key:20} trials {done.trials:3d} pruned {done.pruned:3d} folds "
                f"{done.folds:4d} fold-epochs {done.fold_epochs:5d} CPU {done.cpu_seconds:6.1f} s",
                flush=True,
            )
        if study.truth is None:  # retrain each strategy's final pick, in the worker processes too
            repeats = 1 if args.quick and study.epochs else REEVALUATIONS
            finals = {_params_key(d.picks[-1][1]): d.picks[-1][1] for ds in runs.get(name, {}).values() for d in ds}
            reevaluations[name] = {
                key: jobs.submit(run_reevaluation, name, keras_epochs, params, repeats)
                for key, params in finals.items()
            }
    rows = []
    for name, study_runs in runs.items():
        study = make_study(name, keras_epochs)
        reevaluate = Reevaluator(study)
        reevaluate.cache.update({key: f.result() for key, f in reevaluations.get(name, {}).items()})
        if "no pruning" in study_runs:
            rows += summarise(study, study_runs, reevaluate)
        if len(args.studies) > 1:
            print_table([row for row in rows if row["study"] == study.name])  # a study's own figures
    print_table(rows)
    print(f"\n{time.monotonic() - started:.0f} s wall time with {args.jobs} process(es)")


if __name__ == "__main__":
    main()
