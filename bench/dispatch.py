"""Engine overhead of dispatching trials: tlsearch on Dask against a hand-written Optuna + Dask loop, side by side.

Each trial is 5 folds of 0.2 s sleep, so what is measured is the engine, not the model. For each width N
(1, 2, 4, 8 worker processes by default), each runs 4·N trials of the same study on the same LocalCluster:
tlsearch on its embedded journal file store and on MongoDB (the store of a real cluster; the bundled test
server unless TLSEARCH_TEST_MONGO_URI is set), and the loop a capable user writes by hand (a journal file,
`study.ask` in the driver, one Dask task per trial that loads the study and runs the same folds, `study.tell`).
Optuna's own `n_jobs` threads in one process stay in the table for reference. Ideal throughput is N trials
per second. Printed: throughput and its ratio to the ideal, the median per-trial overhead (trial duration minus
the 1 s of folds), the engine's CPU per trial (driver + scheduler + workers: the psutil CPU time of this
process and its children, during the run, over the trials; the folds sleep, so it is all engine), and
tlsearch's throughput against the hand-written loop's. Targets: <= 20 ms CPU a trial, >= 0.9x ideal at 8
workers, >= 0.95x the hand-written loop at every width.

Usage: python bench/dispatch.py [--widths 1,2,4,8] [--trials-per-worker 4] [--repeats 3] [--stores journal,mongo]
       python bench/dispatch.py --tls-cost [--widths 2]: the same trials on a plain and a mutual-TLS local cluster
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
import psutil
import pymongo

import tlsearch
from tlsearch.execution import _cluster as cluster
from tlsearch.execution import _driver as driver
from tlsearch.stores._stores import Stores

FOLDS, FOLD_SECONDS = 5, 0.2


def space(trial):
    return {"x": trial.suggest_float("x", -10, 10), "y": trial.suggest_int("y", 0, 10)}


def sleepy_fold(params, fold, report):
    time.sleep(FOLD_SECONDS)
    return -((params["x"] - 2) ** 2)


def spec(name: str, n_trials: int):
    return tlsearch.StudySpec(
        name=name,
        dataset="sklearn:iris",
        space=space,
        model=tlsearch.CustomLoop(sleepy_fold),
        cv=FOLDS,
        direction="maximize",
        n_trials=n_trials,
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=optuna.pruners.NopPruner(),
    )


def overhead_per_trial(study: optuna.Study) -> float:
    durations = [
        t.duration.total_seconds()
        for t in study.get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.COMPLETE
    ]
    return statistics.median(durations) - FOLDS * FOLD_SECONDS


def tree_cpu() -> float:
    """CPU seconds (user + system) used so far by this process and its live children (the local cluster's
    scheduler runs in this process; its nannies and workers are children)."""
    processes = [psutil.Process()]
    processes += processes[0].children(recursive=True)
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def run_ours(
    width: int, n_trials: int, stores: Stores, client: distributed.Client, tag: str
) -> tuple[float, float, float, float]:
    """Wall time, per-trial overhead, the one-time study set-up (open the study, the dataset and its fold plan,
    register the worker plugins, scatter the study definition) before the first trial starts, CPU per trial."""
    started, started_at, cpu = time.perf_counter(), datetime.datetime.now(), tree_cpu()
    study = driver.run(spec(f"ours-{width}-{tag}", n_trials), stores=stores, client=client, progress="off")
    wall, cpu = time.perf_counter() - started, tree_cpu() - cpu
    setup = (min(t.datetime_start for t in study.trials) - started_at).total_seconds()
    return wall, overhead_per_trial(study), setup, cpu / n_trials


def by_hand_trial(journal: str, study_name: str, trial_number: int, seed: int) -> float:
    """One trial as a user's Dask task runs it: load the study, sample, run the folds, report after each."""
    from sklearn.datasets import load_iris
    from sklearn.model_selection import StratifiedKFold

    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    study = optuna.load_study(
        study_name=study_name, storage=storage, sampler=optuna.samplers.RandomSampler(seed=seed + trial_number)
    )
    trial_id = next(t._trial_id for t in study.get_trials(deepcopy=False) if t.number == trial_number)
    trial = optuna.Trial(study, trial_id)
    params = space(trial)
    X, y = load_iris(return_X_y=True)
    scores = []
    for k, _ in enumerate(StratifiedKFold(FOLDS, shuffle=True, random_state=0).split(X, y)):
        scores.append(sleepy_fold(params, None, None))
        trial.set_user_attr(f"split{k}_test_score", scores[-1])
        trial.report(float(np.mean(scores)), k)
    return float(np.mean(scores))


def run_by_hand(
    width: int, n_trials: int, home: Path, client: distributed.Client, tag: str
) -> tuple[float, float, float]:
    """The hand-written Optuna + Dask loop on `client`: wall time, per-trial overhead, CPU per trial."""
    journal = str(home / "by-hand.journal")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    name = f"by-hand-{width}-{tag}"
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    started, cpu = time.perf_counter(), tree_cpu()
    running, numbers = distributed.as_completed(), {}

    def submit() -> None:
        trial = study.ask()
        future = client.submit(by_hand_trial, journal, name, trial.number, 0, pure=False)
        numbers[future] = trial.number
        running.add(future)

    for _ in range(min(width, n_trials)):
        submit()
    submitted = min(width, n_trials)
    for future in running:
        study.tell(numbers.pop(future), future.result())
        if submitted < n_trials:
            submit()
            submitted += 1
    wall, cpu = time.perf_counter() - started, tree_cpu() - cpu
    return wall, overhead_per_trial(study), cpu / n_trials


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

    study = optuna.create_study(
        study_name=f"optuna-{width}-{tag}",
        storage=storage,
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    started = time.perf_counter()
    study.optimize(objective, n_trials=n_trials, n_jobs=width)
    return time.perf_counter() - started, overhead_per_trial(study)


def tls_cost(widths: list[int], trials_per_worker: int, repeats: int, stores: Stores) -> None:
    """Print tlsearch's throughput on a LocalCluster with throw-away mutual TLS (what `tlsearch run` starts,
    `cluster.local_security`) against the same cluster in plain TCP; both clusters are up at once and their
    runs take turns, so a change in the machine's load falls on both."""
    print(f"\n{'workers':>7} {'trials':>6} | {'plain/s':>8} {'TLS/s':>8} {'TLS cost':>8}")
    for width in widths:
        n_trials = trials_per_worker * width
        with contextlib.ExitStack() as stack:
            stack.enter_context(dask.config.set(cluster.LOCAL_CLUSTER_CONFIG))
            clients = {}
            for name, security in (("plain", None), ("tls", cluster.local_security())):
                local_cluster = stack.enter_context(
                    distributed.LocalCluster(
                        n_workers=width,
                        threads_per_worker=1,
                        processes=True,
                        host=cluster.LOOPBACK,
                        dashboard_address=None,
                        protocol="tls" if security else None,
                        security=security,
                        silence_logs=logging.ERROR,
                    )
                )
                clients[name] = stack.enter_context(distributed.Client(local_cluster, security=security))
                run_ours(width, width, stores, clients[name], f"{name}-warmup")
            walls = {name: [] for name in clients}
            for r in range(repeats):
                for name, client in clients.items():
                    walls[name].append(run_ours(width, n_trials, stores, client, f"{name}-{r}")[0])
        plain, tls = (n_trials / statistics.median(walls[name]) for name in ("plain", "tls"))
        print(f"{width:>7} {n_trials:>6} | {plain:>8.2f} {tls:>8.2f} {1 - tls / plain:>8.1%}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="1,2,4,8")
    parser.add_argument("--trials-per-worker", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="runs per width and engine; medians are printed")
    parser.add_argument("--stores", default="journal,mongo", help="tlsearch's study stores to run on")
    parser.add_argument("--tls-cost", action="store_true", help="only compare plain and TLS local clusters")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    widths = [int(w) for w in args.widths.split(",")]
    if args.tls_cost:
        with tempfile.TemporaryDirectory() as tmp:
            tls_cost(widths, args.trials_per_worker, args.repeats, Stores(home=Path(tmp)))
        return
    kinds = args.stores.split(",")

    rows = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        home = Path(tmp)
        stores = {"journal": Stores(home=home)}
        if "mongo" in kinds:
            from tlsearch.testing import TestMongoServer, test_mongo_uri

            uri = test_mongo_uri() or stack.enter_context(TestMongoServer())
            stores["mongo"] = Stores(mongo=uri, database=f"bench_dispatch_{os.getpid()}", home=home)
            stack.callback(lambda: pymongo.MongoClient(uri).drop_database(stores["mongo"].database))
            warm = optuna.create_study(storage=stores["mongo"].study_storage())  # the test server is a JVM:
            warm.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2000)  # let it compile
        for width in widths:
            n_trials = args.trials_per_worker * width
            ideal = n_trials / width * FOLDS * FOLD_SECONDS
            with (
                dask.config.set(cluster.LOCAL_CLUSTER_CONFIG),
                distributed.LocalCluster(
                    n_workers=width,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=logging.ERROR,
                ) as local_cluster,
                distributed.Client(local_cluster) as client,
            ):
                for kind in kinds:  # a first run imports on every worker, like a long-lived cluster
                    run_ours(width, width, stores[kind], client, f"{kind}-warmup")
                run_by_hand(width, width, home, client, "warmup")
                runs = {kind: [] for kind in [*kinds, "by hand"]}
                for r in range(args.repeats):  # the engines take turns, so load from elsewhere hits both
                    for kind in kinds:
                        runs[kind].append(run_ours(width, n_trials, stores[kind], client, f"{kind}-{r}"))
                    runs["by hand"].append(run_by_hand(width, n_trials, home, client, str(r)))
                medians = {kind: [statistics.median(x) for x in zip(*figures)] for kind, figures in runs.items()}
            hand_wall, hand_over, hand_cpu = medians["by hand"]
            threads = [run_optuna(width, n_trials, home, str(r)) for r in range(args.repeats)]
            threads_wall, _ = (statistics.median(x) for x in zip(*threads))
            for kind in kinds:
                wall, over, setup, cpu = medians[kind]
                rows.append(
                    (
                        width,
                        n_trials,
                        kind,
                        n_trials / wall,
                        ideal / wall,
                        over,
                        cpu,
                        setup,
                        n_trials / hand_wall,
                        ideal / hand_wall,
                        hand_over,
                        hand_cpu,
                        n_trials / threads_wall,
                    )
                )
            print(f"width {width}: done", flush=True)

    print(
        f"\n{FOLDS} folds x {FOLD_SECONDS} s per trial; medians of {args.repeats} runs; the hand-written loop "
        f"on a journal file; machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'workers':>7} {'trials':>6} {'store':>8} | {'tlsearch/s':>10} {'vs ideal':>8} {'per-trial':>9} "
        f"{'CPU/trial':>9} {'set-up':>7} | {'by hand/s':>9} {'vs ideal':>8} {'per-trial':>9} {'CPU/trial':>9} | "
        f"{'ours/hand':>9} | {'n_jobs/s':>8}"
    )
    for (
        width,
        n,
        kind,
        ours,
        ours_ratio,
        ours_over,
        ours_cpu,
        setup,
        hand,
        hand_ratio,
        hand_over,
        hand_cpu,
        threads,
    ) in rows:
        print(
            f"{width:>7} {n:>6} {kind:>8} | {ours:>10.2f} {ours_ratio:>8.2f} {ours_over * 1000:>7.0f}ms "
            f"{ours_cpu * 1000:>7.0f}ms {setup:>6.2f}s | {hand:>9.2f} {hand_ratio:>8.2f} {hand_over * 1000:>7.0f}ms "
            f"{hand_cpu * 1000:>7.0f}ms | {ours / hand:>9.2f} | {threads:>8.2f}"
        )
    print(
        "per-trial: median trial duration minus its 1 s of folds; CPU/trial: driver + scheduler + workers; set-up:"
        " once per study run, before the first trial starts; n_jobs: Optuna's threads in one process (reference)."
        "\ntargets: CPU/trial <= 20 ms, vs ideal >= 0.9 at 8 workers, ours/hand >= 0.95 at every width"
    )


if __name__ == "__main__":
    main()
