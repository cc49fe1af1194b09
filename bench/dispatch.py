"""Engine overhead of dispatching trials: tlsearch on Dask against Optuna's own `n_jobs`, side by side.

Each trial is 5 folds of 0.2 s sleep, so what is measured is the engine, not the model. For each width N
(1, 2, 4, 8, 16 worker processes; threads for Optuna), each runs 4·N trials of the same study: tlsearch on
its embedded journal file store and on MongoDB (the store of a real cluster; the bundled test server unless
TLSEARCH_TEST_MONGO_URI is set), Optuna on a journal file. Ideal throughput is N trials per second. Printed:
throughput and its ratio to the ideal, the engine's share of wall time, the median per-trial overhead (trial
duration minus the 1 s of folds), and tlsearch's throughput against Optuna's.

Usage: python bench/dispatch.py [--widths 1,2,4,8,16] [--trials-per-worker 4] [--repeats 3] [--stores journal,mongo]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import dask
import distributed
import numpy as np
import optuna
import pymongo

import tlsearch
from tlsearch import cluster, runner
from tlsearch.stores import Stores

FOLDS, FOLD_SECONDS = 5, 0.2


def space(trial):
    return {"x": trial.suggest_float("x", -10, 10), "y": trial.suggest_int("y", 0, 10)}


def sleepy_fold(params, fold, report):
    time.sleep(FOLD_SECONDS)
    return -((params["x"] - 2) ** 2)


def spec(name: str, n_trials: int):
    return tlsearch.StudySpec(name=name, dataset="sklearn:iris", space=space,
                              model=tlsearch.CustomLoop(sleepy_fold), cv=FOLDS, direction="maximize",
                              n_trials=n_trials, sampler=optuna.samplers.RandomSampler(seed=0),
                              pruner=optuna.pruners.NopPruner())


def overhead_per_trial(study: optuna.Study) -> float:
    durations = [t.duration.total_seconds() for t in study.get_trials(deepcopy=False)
                 if t.state == optuna.trial.TrialState.COMPLETE]
    return statistics.median(durations) - FOLDS * FOLD_SECONDS


def run_ours(width: int, n_trials: int, stores: Stores, client: distributed.Client, tag: str) -> tuple[float, float, float]:
    """Wall time, per-trial overhead, and the one-time study set-up (open the study, the dataset and its
    fold plan, register the prefetch plugin, scatter the study definition) before the first trial starts."""
    started, started_at = time.perf_counter(), datetime.datetime.now()
    study = runner.run(spec(f"ours-{width}-{tag}", n_trials), stores=stores, client=client,
                       progress="off")
    setup = (min(t.datetime_start for t in study.trials) - started_at).total_seconds()
    return time.perf_counter() - started, overhead_per_trial(study), setup


def run_optuna(width: int, n_trials: int, home: Path, tag: str) -> tuple[float, float]:
    from sklearn.datasets import load_iris
    from sklearn.model_selection import StratifiedKFold

    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(home / "optuna.journal")))

    def objective(trial):
        params = space(trial)
        X, y = load_iris(return_X_y=True)
        scores = []
        for k, _ in enumerate(StratifiedKFold(FOLDS, shuffle=True, random_state=0).split(X, y)):
            scores.append(sleepy_fold(params, None, None))
            trial.set_user_attr(f"split{k}_test_score", scores[-1])
            trial.report(float(np.mean(scores)), k)
        return float(np.mean(scores))

    study = optuna.create_study(study_name=f"optuna-{width}-{tag}", storage=storage, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    started = time.perf_counter()
    study.optimize(objective, n_trials=n_trials, n_jobs=width)
    return time.perf_counter() - started, overhead_per_trial(study)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="1,2,4,8,16")
    parser.add_argument("--trials-per-worker", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="runs per width and engine; medians are printed")
    parser.add_argument("--stores", default="journal,mongo", help="tlsearch's study stores to run on")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    widths = [int(w) for w in args.widths.split(",")]
    kinds = args.stores.split(",")

    rows = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        home = Path(tmp)
        stores = {"journal": Stores(home=home)}
        if "mongo" in kinds:
            from tlsearch.testing import TestMongoServer, test_mongo_uri

            uri = test_mongo_uri() or stack.enter_context(TestMongoServer())
            stores["mongo"] = Stores(mongo_uri=uri, database=f"bench_dispatch_{os.getpid()}", home=home)
            stack.callback(lambda: pymongo.MongoClient(uri).drop_database(stores["mongo"].database))
            warm = optuna.create_study(storage=stores["mongo"].study_storage())  # the test server is a JVM:
            warm.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2000)  # let it compile
        for width in widths:
            n_trials = args.trials_per_worker * width
            ideal = n_trials / width * FOLDS * FOLD_SECONDS
            ours = {}
            with dask.config.set(cluster.LOCAL_CLUSTER_CONFIG), \
                    distributed.LocalCluster(n_workers=width, threads_per_worker=1, processes=True,
                                             dashboard_address=None, silence_logs=logging.ERROR) as local_cluster, \
                    distributed.Client(local_cluster) as client:
                for kind in kinds:  # a first run imports on every worker, like a long-lived cluster
                    run_ours(width, width, stores[kind], client, f"{kind}-warmup")
                runs = {kind: [] for kind in kinds}
                for r in range(args.repeats):
                    for kind in kinds:
                        runs[kind].append(run_ours(width, n_trials, stores[kind], client, f"{kind}-{r}"))
                ours = {kind: [statistics.median(x) for x in zip(*runs[kind])] for kind in kinds}
            theirs = [run_optuna(width, n_trials, home, str(r)) for r in range(args.repeats)]
            theirs_wall, theirs_over = (statistics.median(x) for x in zip(*theirs))
            for kind in kinds:
                wall, over, setup = ours[kind]
                rows.append((width, n_trials, kind, n_trials / wall, ideal / wall, 1 - ideal / wall, over, setup,
                             n_trials / theirs_wall, ideal / theirs_wall, theirs_over))
            print(f"width {width}: done", flush=True)

    print(f"\n{FOLDS} folds x {FOLD_SECONDS} s per trial; medians of {args.repeats} runs; "
          "Optuna n_jobs on a journal file")
    print(f"{'workers':>7} {'trials':>6} {'store':>8} | {'tlsearch/s':>10} {'vs ideal':>8} {'overhead':>8} "
          f"{'per-trial':>9} {'set-up':>7} | {'optuna/s':>8} {'vs ideal':>8} {'per-trial':>9} | {'ours/optuna':>11}")
    for width, n, kind, ours, ours_ratio, ours_share, ours_over, setup, theirs, theirs_ratio, theirs_over in rows:
        print(f"{width:>7} {n:>6} {kind:>8} | {ours:>10.2f} {ours_ratio:>8.2f} {ours_share:>8.1%} "
              f"{ours_over * 1000:>7.0f}ms {setup:>6.2f}s | {theirs:>8.2f} {theirs_ratio:>8.2f} "
              f"{theirs_over * 1000:>7.0f}ms | {ours / theirs:>11.2f}")
    print("overhead: the engine's share of tlsearch's wall time (1 - ideal/wall); per-trial: median trial duration "
          "minus its 1 s of folds; set-up: once per study run, before the first trial starts")


if __name__ == "__main__":
    main()
