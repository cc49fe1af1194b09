"""Fold-parallel trials: wall time to finish a study with and without them, side by side on one LocalCluster.

Each trial is 5 folds of a `--fold-seconds` sleep (0.5 s by default), so the 2-core machine measures the
dispatch, not the model. Two studies on 8 worker processes: 10 trials (a first wave of 8, then 2 trials left
for 8 workers) and 2 trials (fewer trials than workers). Each runs with `fold_parallel="auto"` and `False`,
the two taking turns; medians of `--repeats` runs. The ideal ratio packs every fold on the workers with no
overhead: 10 trials in 7 fold times instead of 2 waves x 5; 2 trials in 2 instead of 5.

Usage: python bench/fold_parallel.py [--workers 8] [--repeats 3] [--fold-seconds 0.5]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import dask
import distributed
import optuna

import tlsearch
from tlsearch.execution import _cluster as cluster
from tlsearch.execution import _driver as driver
from tlsearch.stores._stores import Stores

FOLDS = 5
FOLD_SECONDS = 0.5


def space(trial):
    return {"x": trial.suggest_float("x", -10, 10)}


def sleepy_fold(params, fold, report):
    time.sleep(FOLD_SECONDS)
    return -((params["x"] - 2) ** 2)


def spec(name: str, n_trials: int, fold_parallel) -> tlsearch.StudySpec:
    return tlsearch.StudySpec(
        name=name,
        dataset="sklearn:iris",
        space=space,
        model=tlsearch.CustomLoop(sleepy_fold),
        cv=FOLDS,
        direction="maximize",
        n_trials=n_trials,
        fold_parallel=fold_parallel,
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=optuna.pruners.NopPruner(),
    )


def wall_time(n_trials: int, fold_parallel, stores: Stores, client: distributed.Client, tag: str) -> float:
    """Seconds from the first trial's start to the last trial's end (the study set-up is left out)."""
    study = driver.run(
        spec(f"fp-{n_trials}-{tag}", n_trials, fold_parallel), stores=stores, client=client, progress="off"
    )
    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) == n_trials, f"{len(trials)} of {n_trials} trials completed"
    return (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()


def main() -> None:
    global FOLD_SECONDS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="runs per study and mode; medians are printed")
    parser.add_argument("--fold-seconds", type=float, default=FOLD_SECONDS)
    args = parser.parse_args()
    FOLD_SECONDS = args.fold_seconds  # the workers get the functions by value, with this global
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies = (10, 2)
    runs: dict[tuple[int, object], list[float]] = {(n, mode): [] for n in studies for mode in ("auto", False)}
    with (
        tempfile.TemporaryDirectory() as tmp,
        dask.config.set(cluster.LOCAL_CLUSTER_CONFIG),
        distributed.LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as local_cluster,
        distributed.Client(local_cluster) as client,
    ):
        stores = Stores(home=Path(tmp))
        wall_time(args.workers, "auto", stores, client, "warmup")  # imports on every worker, like a long-lived cluster
        for repeat in range(args.repeats):  # the modes take turns, so load from elsewhere hits both
            for n_trials, mode in runs:
                runs[(n_trials, mode)].append(wall_time(n_trials, mode, stores, client, f"{mode}-{repeat}"))
    print(
        f"\n{FOLDS} folds x {FOLD_SECONDS:g} s sleep per trial, {args.workers} workers; medians of {args.repeats} "
        f"runs; journal file store; machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )
    print(f"{'trials':>6} | {'one task/trial':>14} {'fold-parallel':>13} | {'ratio':>5} | {'ideal ratio':>11}")
    for n_trials in studies:
        sequential, split = (statistics.median(runs[(n_trials, mode)]) for mode in (False, "auto"))
        waves = -(-n_trials // args.workers)
        ideal = -(-n_trials * FOLDS // args.workers) / (waves * FOLDS)  # every fold packed on the workers
        print(f"{n_trials:>6} | {sequential:>13.2f}s {split:>12.2f}s | {split / sequential:>5.2f} | {ideal:>11.2f}")


if __name__ == "__main__":
    main()
