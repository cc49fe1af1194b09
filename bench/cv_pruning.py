"""Pruning between folds: how many folds it saves and what it costs in best score, measured side by side.

Runs the same study (digits, a scikit-learn random forest from search_spaces.tree_ensembles, 5-fold
stratified CV, TPE with the same seeds, the same trial budget) once per pruning strategy, in one process
with an in-memory Optuna study, through tlsearch.cv.evaluate and memory-mapped arrays as on a worker:

    no pruning           NopPruner
    MedianPruner         Optuna's MedianPruner on the running mean reported after each fold
    WilcoxonPruner       Optuna's WilcoxonPruner(p_threshold=0.1) on each fold's score
    KFoldPruner          tlsearch.cv.KFoldPruner() on the running mean (the default)

and prints, per strategy, folds trained, wall time and best mean CV score (averaged over the seeds), and
each strategy's fold saving and best-score gap relative to no pruning.

    python bench/cv_pruning.py            # 40 trials x 3 seeds (about 10 minutes on 2 shared cores)
    python bench/cv_pruning.py --quick    # 20 trials x 1 seed (about 1.5 minutes)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import optuna
from sklearn.datasets import load_digits
from sklearn.model_selection import StratifiedKFold

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from search_spaces.tree_ensembles import make_random_forest, random_forest  # noqa: E402
from tlsearch.cv import _evaluate as cv  # noqa: E402
from tlsearch.cv._pruners import KFoldPruner  # noqa: E402
from tlsearch.spec._spec import SklearnModel, StudySpec  # noqa: E402

STRATEGIES = {
    "no pruning": optuna.pruners.NopPruner,
    "MedianPruner": optuna.pruners.MedianPruner,
    "WilcoxonPruner": lambda: optuna.pruners.WilcoxonPruner(p_threshold=0.1),
    "KFoldPruner": KFoldPruner,
}


def space(trial):
    return random_forest(trial, n_estimators=(10, 100))


def run_strategy(make_pruner, seed: int, n_trials: int, n_folds: int, arrays: dict) -> dict:
    spec = StudySpec(
        name="bench-cv-pruning",
        dataset="sklearn:digits",
        space=space,
        model=SklearnModel(make_random_forest),
        cv=StratifiedKFold(n_folds, shuffle=True, random_state=0),
        metric="accuracy",
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=make_pruner(),
        seed=seed,
    )
    folds = list(spec.cv_.split(arrays["X"], arrays["y"]))
    study = spec.create_study()
    started = time.perf_counter()
    for _ in range(n_trials):
        trial = study.ask()
        try:
            study.tell(trial, cv.evaluate(trial, spec, arrays, folds))
        except optuna.TrialPruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    wall = time.perf_counter() - started
    trials = study.get_trials(deepcopy=False)
    return {
        "folds": sum(t.user_attrs["n_folds_run"] for t in trials),
        "wall": wall,
        "best": study.best_value,
        "pruned": sum(t.state == optuna.trial.TrialState.PRUNED for t in trials),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 trials, one seed")
    parser.add_argument("--trials", type=int, help="trials per study (default 40, --quick 20)")
    parser.add_argument("--seeds", type=int, help="number of seeds (default 3, --quick 1)")
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args(argv)
    n_trials = args.trials or (20 if args.quick else 40)
    seeds = range(args.seeds or (1 if args.quick else 3))
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # WilcoxonPruner

    X, y = load_digits(return_X_y=True)
    with tempfile.TemporaryDirectory() as folder:  # workers read memory-mapped .npy files: so does the bench
        for name, array in (("X", X), ("y", y)):
            np.save(Path(folder) / f"{name}.npy", array)
        arrays = {name: np.load(Path(folder) / f"{name}.npy", mmap_mode="r") for name in ("X", "y")}
        print(
            f"digits {X.shape}, random forest space, {args.folds}-fold stratified CV, TPE, "
            f"{n_trials} trials x {len(seeds)} seed(s)",
            flush=True,
        )
        results: dict[str, list[dict]] = {name: [] for name in STRATEGIES}
        for seed in seeds:
            for name, make_pruner in STRATEGIES.items():
                result = run_strategy(make_pruner, seed, n_trials, args.folds, arrays)
                results[name].append(result)
                print(
                    f"  seed {seed} {name:15} folds {result['folds']:4d}  pruned {result['pruned']:3d}  "
                    f"wall {result['wall']:6.1f} s  best {result['best']:.4f}",
                    flush=True,
                )

    baseline = {key: statistics.mean(r[key] for r in results["no pruning"]) for key in ("folds", "wall", "best")}
    print()
    print(
        f"{'strategy':16} {'folds trained':>13} {'vs none':>8} {'wall time':>10} {'vs none':>8} "
        f"{'best mean CV':>12} {'vs none':>8}"
    )
    for name, runs in results.items():
        folds = statistics.mean(r["folds"] for r in runs)
        wall = statistics.mean(r["wall"] for r in runs)
        best = statistics.mean(r["best"] for r in runs)
        print(
            f"{name:16} {folds:13.1f} {folds / baseline['folds'] - 1:+8.0%} {wall:9.1f}s "
            f"{wall / baseline['wall'] - 1:+8.0%} {best:12.4f} {best / baseline['best'] - 1:+8.2%}"
        )
    print(
        f"(means over {len(seeds)} seed(s); 'vs none' is relative to no pruning; "
        f"target: folds <= -40% with best within -1%)"
    )


if __name__ == "__main__":
    main()
