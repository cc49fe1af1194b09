"""Scale: the commands users run on large studies, and the sampler's own cost per trial as a study grows.

1. **Commands on large studies.** A study of N trials is written through Optuna's public API
   (`study.add_trials`) as a long tlsearch study stores them: 6 parameters, 5 folds of `cv_results_`
   attributes per trial (score, fit and score time, epochs, worker), intermediate values, 70 % complete,
   25 % pruned after 1-4 folds (with a prune reason), 5 % failed (with an error type and message). On the
   embedded default (a journal file) and on MongoDB (the bundled test server unless --mongo URI), each
   command runs as its own process, as a user runs it: `tlsearch status NAME`, `tlsearch best NAME`,
   `tlsearch trials NAME --format csv -o FILE`, `tlsearch report NAME -o FILE`, and
   `optuna.load_study(...).trials`. Printed: wall time and the process's peak resident memory (`wait4`).
2. **Dispatch throughput** with trivial trials (a `CustomLoop` whose 2 folds return at once), through
   `tlsearch run STUDY --scheduler ADDR` as users start drivers: 1 and 4 drivers on one study, each its own
   process, against one plain-TCP Dask cluster of 2 worker processes whose threads are the simulated workers
   (8, 64 and 256 threads: the machine has 2 cores, so more processes would measure the operating system).
   On the embedded default (the drivers share its journal file) and on MongoDB. Each cluster first runs a
   study of WARM_UP_TRIALS trials, not counted: a long-lived cluster's workers have imported tlsearch and
   opened the dataset, and a long-running server has warmed up. Printed: trials/s from the first trial's
   start to the last trial's finish; the engine's CPU per trial (the drivers, the scheduler and the cluster's
   worker processes, from their rusage, less each driver's start-up and exit, measured by one more driver
   that finds the study done: its wall time is printed too, what a resume costs before its first trial); the
   bundled test server's CPU per trial (none with --mongo); store operations per trial (MongoDB commands
   through a counting proxy in a process of its own, or journal records); and whether the study holds exactly
   the trials asked for.
3. **The sampler's cost per trial** at 100 / 1,000 / 10,000 finished trials: the median time of `ask` plus
   the 6 `suggest_*` calls of the search space, in memory (no store), for TPE with Optuna's defaults (what
   tlsearch uses: `TPESampler(seed=...)`), multivariate TPE, and random search; the GP sampler where PyTorch
   is installed. It says when the sampler, not the engine, bounds a study's trials per second.

Targets (issue 24): a report of 10,000 trials in at most 30 s and of 100,000 in at most 2 minutes; `status` on
MongoDB with 100,000 trials in at most 2 s and 200 MB.

Usage: python bench/scale.py [--quick] [--sizes 1000,10000,100000] [--workers 8,64,256] [--stores journal,mongo]
       [--mongo URI] [--tables 1,2,3]
(--quick: 1,000 and 10,000 trials, 8 and 64 workers; the full run writes 100,000 trials to each store, which
takes minutes.)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import os
import random
import resource
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from tlsearch.config import journal_path
from tlsearch.stores._stores import Stores

FOLDS = 5
DISTRIBUTIONS = {
    "learning_rate": FloatDistribution(1e-4, 1e-1, log=True),
    "units": IntDistribution(16, 512, log=True),
    "dropout": FloatDistribution(0.0, 0.5),
    "layers": IntDistribution(1, 4),
    "activation": CategoricalDistribution(["relu", "gelu", "tanh"]),
    "batch_size": CategoricalDistribution([32, 64, 128, 256]),
}
TLSEARCH = [sys.executable, "-m", "tlsearch"]
WARM_UP_TRIALS = 400  # table 2: trials run on each cluster before its cells are measured


# -- 1. commands on large studies ---------------------------------------------------------------------------
def fake_trials(n: int, seed: int = 0) -> list[optuna.trial.FrozenTrial]:
    """`n` trials as tlsearch stores them, their values depending on learning rate and dropout plus noise."""
    rng = random.Random(seed)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    trials = []
    for number in range(n):
        params = {
            "learning_rate": math.exp(rng.uniform(math.log(1e-4), math.log(1e-1))),
            "units": int(math.exp(rng.uniform(math.log(16), math.log(512)))),
            "dropout": rng.uniform(0.0, 0.5),
            "layers": rng.randint(1, 4),
            "activation": rng.choice(["relu", "gelu", "tanh"]),
            "batch_size": rng.choice([32, 64, 128, 256]),
        }
        level = 0.97 - 0.02 * abs(math.log10(params["learning_rate"]) + 2.5) - 0.05 * params["dropout"]
        draw = rng.random()
        state = TrialState.COMPLETE if draw < 0.7 else TrialState.PRUNED if draw < 0.95 else TrialState.FAIL
        n_folds = {TrialState.COMPLETE: FOLDS, TrialState.PRUNED: rng.randint(1, FOLDS - 1)}.get(state, 0)
        scores = [level + rng.gauss(0, 0.01) for _ in range(n_folds)]
        attrs: dict = {"n_splits": FOLDS, "n_folds_run": n_folds}
        for k, score in enumerate(scores):
            attrs |= {
                f"split{k}_test_score": score,
                f"split{k}_fit_time": rng.uniform(1, 3),
                f"split{k}_score_time": 0.1,
                f"split{k}_n_epochs": 10,
                f"split{k}_worker": f"tcp://10.0.0.{number % 64}:4000",
            }
        if scores:
            attrs |= {"mean_test_score": statistics.fmean(scores), "std_test_score": statistics.pstdev(scores)}
        if state == TrialState.PRUNED:
            attrs["prune_reason"] = {"fold": n_folds - 1, "reference_trial": 0, "rule": "kfold"}
        if state == TrialState.FAIL:
            attrs |= {"error_type": "ValueError", "error_message": "the model diverged"}
        trial = create_trial(
            state=state,
            value=attrs["mean_test_score"] if state == TrialState.COMPLETE else None,
            params=params,
            distributions=DISTRIBUTIONS,
            user_attrs=attrs,
            intermediate_values={k: statistics.fmean(scores[: k + 1]) for k in range(n_folds)},
        )
        trial.datetime_start = start + dt.timedelta(seconds=10 * number)
        trial.datetime_complete = trial.datetime_start + dt.timedelta(seconds=12)
        trials.append(trial)
    return trials


def write_study(storage, name: str, n: int) -> float:
    """Write a study of `n` trials to `storage`; the seconds it took."""
    started = time.perf_counter()
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    for i in range(0, n, 1000):
        study.add_trials(fake_trials(min(1000, n - i), seed=i))
    return time.perf_counter() - started


# Runs one command and reports its wall time, peak RSS and exit status. A small process of its own: a child's
# peak RSS counts the memory of the process it was forked from, and this one has a large study in memory.
_MEASURE = """
import os, subprocess, sys, time
started = time.perf_counter()
process = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
error = process.stderr.read()
_, status, usage = os.wait4(process.pid, 0)
print(time.perf_counter() - started, usage.ru_maxrss, os.waitstatus_to_exitcode(status))
sys.stderr.write(error.decode(errors="replace")[-300:])
"""


def measured(command: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Run `command`; (wall seconds, its peak resident memory in MB, its exit status)."""
    done = subprocess.run([sys.executable, "-c", _MEASURE, *command], env=env, capture_output=True, text=True)
    wall, rss_kb, status = done.stdout.split()
    if int(status):
        print(f"    {' '.join(command[2:4])}: exit {status}: {done.stderr}")
    return float(wall), int(rss_kb) / 1024, int(status)


def commands(name: str, store_args: list[str], folder: Path, storage_code: str) -> dict[str, list[str]]:
    load = f"import optuna; optuna.load_study(study_name={name!r}, storage={storage_code}).trials"
    return {
        "status": [*TLSEARCH, "status", name, *store_args],
        "best": [*TLSEARCH, "best", name, *store_args],
        "trials --format csv": [*TLSEARCH, "trials", name, "--format", "csv", "-o", str(folder / "t.csv"), *store_args],
        "report": [*TLSEARCH, "report", name, "-o", str(folder / "r.html"), *store_args],
        "load_study().trials": [sys.executable, "-c", load],
    }


def commands_table(sizes: list[int], kinds: list[str], mongo: str | None, folder: Path) -> None:
    print("\n1. Commands on large studies (each its own process; wall s / peak RSS MB)")
    env = {**os.environ, "NO_COLOR": "1"}
    names = list(commands("x", [], folder, "None"))
    print(f"{'store':8} {'trials':>8} {'write s':>8} " + " ".join(f"{n:>22}" for n in names))
    for kind in kinds:
        for n in sizes:
            name = f"scale-{n}"
            if kind == "journal":
                home = folder / f"home-{n}"
                storage = Stores(home=home).study_storage()
                store_args = ["--home", str(home)]
                storage_code = (
                    "optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend("
                    f"{str(home / 'studies.journal')!r}))"
                )
            else:
                database = f"bench_scale_{os.getpid()}"
                storage = Stores(mongo=mongo, database=database, home=folder / "mongo-home").study_storage()
                store_args = ["--mongo", mongo, "--database", database, "--home", str(folder / "mongo-home")]
                storage_code = f"__import__('tlsearch').MongoStorage({mongo!r}, database={database!r})"
            written = write_study(storage, name, n)
            cells = []
            for command in commands(name, store_args, folder, storage_code).values():
                wall, rss, status = measured(command, env)
                cells.append(f"{wall:9.1f} s {rss:6.0f} MB" + ("!" if status else " "))
            print(f"{kind:8} {n:>8,} {written:8.1f} " + " ".join(f"{c:>22}" for c in cells), flush=True)


# -- 2. dispatch throughput ---------------------------------------------------------------------------------
TRIVIAL_STUDY = """
import optuna
import tlsearch

spec = tlsearch.StudySpec(
    name={name!r}, dataset="sklearn:iris", cv=2, direction="maximize", n_trials={n_trials},
    space=lambda trial: {{"x": trial.suggest_float("x", -10, 10), "y": trial.suggest_int("y", 0, 10)}},
    model=tlsearch.CustomLoop(lambda params, fold, report: -((params["x"] - 2) ** 2)),
    sampler=optuna.samplers.RandomSampler(seed=0),  # the engine's cost alone: table 3 has the sampler's
    pruner=optuna.pruners.NopPruner())
"""

_OP_MSG = 2013
_MONITORING = {b"hello", b"isMaster", b"ismaster"}  # each client's own server monitoring, not the study's


class CommandCounter:
    """A TCP proxy in front of a MongoDB server that counts the commands its clients send (OP_MSG messages,
    less the drivers' server monitoring): the store operations of every process of a run, whatever their
    kind. It runs in a process of its own, so that it takes no time from the scheduler in the benchmark's
    process (its CPU is the benchmark's, not the engine's, and is not counted). `uri` is the proxy's;
    `count()` the commands so far."""

    def __init__(self, uri: str) -> None:
        import multiprocessing

        host_port = uri.split("://", 1)[1].split("/", 1)[0]
        target = (host_port.rsplit(":", 1)[0], int(host_port.rsplit(":", 1)[1]))
        listener = socket.create_server(("127.0.0.1", 0))
        self.uri = uri.replace(host_port, f"127.0.0.1:{listener.getsockname()[1]}", 1)
        context = multiprocessing.get_context("spawn")
        self._count = context.Value("q", 0)
        context.Process(target=_proxy, args=(listener, target, self._count), daemon=True).start()
        listener.close()

    def count(self) -> int:
        return self._count.value


def _proxy(listener: socket.socket, target: tuple[str, int], count) -> None:
    while True:
        client, _ = listener.accept()
        server = socket.create_connection(target)
        threading.Thread(target=_requests, args=(client, server, count), daemon=True).start()
        threading.Thread(target=_replies, args=(server, client), daemon=True).start()


def _requests(source: socket.socket, target: socket.socket, count) -> None:
    """Relay the client's messages, counting the commands among them: whole messages are parsed out of large
    reads (a message: a 16-byte header, its length first; OP_MSG: flag bits, then section 0, a BSON document
    whose first key is the command's name)."""
    buffer = b""
    with contextlib.suppress(OSError):
        while data := source.recv(1 << 16):
            target.sendall(data)
            buffer += data
            commands = 0
            while len(buffer) >= 16:
                length, _, _, op_code = struct.unpack_from("<iiii", buffer)
                if len(buffer) < length:
                    break
                if op_code == _OP_MSG and buffer[20] == 0 and buffer[26 : buffer.index(0, 26)] not in _MONITORING:
                    commands += 1
                buffer = buffer[length:]
            if commands:
                with count.get_lock():
                    count.value += commands
    _pass_on_the_end(target)


def _replies(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(1 << 16):
            target.sendall(data)
    _pass_on_the_end(target)


def _pass_on_the_end(target: socket.socket) -> None:
    """Tell `target` its peer is done (one side closed: a client that exits, a server that drops a connection),
    so the relay the other way ends too. Not `close()`: another thread is blocked reading the same socket, and
    a socket closed under a blocked read sends nothing, leaving the peer waiting for a reply forever."""
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def journal_records(home: Path) -> int:
    """The records in the journal file of the embedded default under `home` (one line each)."""
    path = journal_path(home)
    return path.read_bytes().count(b"\n") if path.exists() else 0


def cpu_seconds(who: int) -> float:
    """CPU seconds of this process (`resource.RUSAGE_SELF`: the scheduler's) or of its children that have been
    waited for (`RUSAGE_CHILDREN`: the drivers)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def dispatch_table(widths: list[int], kinds: list[str], mongo: str | None, folder: Path, n_trials: int) -> None:
    import distributed

    print(
        f"\n2. Dispatch throughput: {n_trials} trivial trials a run, random sampling: trials/s; engine CPU a trial "
        "(drivers + scheduler + workers); the store server's CPU a trial (the bundled test server's); store "
        "operations a trial (MongoDB commands, or journal records); exact?"
    )
    print(
        f"{'store':8} {'workers':>8} "
        + " ".join(f"{f'{d} driver' + 's' * (d > 1):>58}" for d in (1, 4))
        + f" {'resume of a done study':>22}"
    )
    counter = CommandCounter(mongo) if "mongo" in kinds else None
    for kind in kinds:
        for width in widths:
            with (
                distributed.LocalCluster(
                    n_workers=2, threads_per_worker=width // 2, dashboard_address=None, silence_logs=40
                ) as cluster,
                distributed.Client(cluster) as client,
            ):
                workers = list(client.run(os.getpid).values())
                store = {"home": folder / "dispatch-home"}
                if kind == "mongo":
                    store.update(mongo=counter.uri, database=f"bench_dispatch_{os.getpid()}")
                # Not counted: a long-lived cluster's workers have imported tlsearch and opened the dataset, and
                # a long-running store has warmed up (the test server's JVM compiles its hot paths as it goes).
                warm_up = max(4 * width, WARM_UP_TRIALS)
                dispatch_run(f"warm-{kind}-{width}", store, cluster, workers, width, 1, warm_up, counter, folder)
                cells, startup = [], 0.0
                for drivers in (1, 4):
                    cell, startup = dispatch_run(
                        f"dispatch-{kind}-{width}-{drivers}",
                        store,
                        cluster,
                        workers,
                        width,
                        drivers,
                        n_trials,
                        counter,
                        folder,
                    )
                    cells.append(cell)
                print(f"{kind:8} {width:>8} " + " ".join(f"{c:>58}" for c in cells) + f" {startup:9.1f} s", flush=True)


def dispatch_run(name, store, cluster, worker_pids, width, drivers, n_trials, counter, folder) -> tuple[str, float]:
    """One cell of table 2: `drivers` drivers run a study of `n_trials` trivial trials to the end on `cluster`
    (whose worker processes are `worker_pids`); then one more driver finds it done (its wall time: what a resume
    costs before its first trial; its CPU: each driver's own start-up and exit, taken off the drivers' CPU)."""
    import psutil

    workers = [psutil.Process(pid) for pid in worker_pids]
    servers = [p for p in psutil.Process().children() if p.name() == "java"] if "mongo" in store else []
    study_file = folder / f"{name}.py"
    study_file.write_text(TRIVIAL_STUDY.format(name=name, n_trials=n_trials))
    store_args = [arg for key, value in store.items() for arg in (f"--{key}", str(value))]
    command = [*TLSEARCH, "run", str(study_file), "--scheduler", cluster.scheduler_address]
    command += ["--parallelism", str(width), "--no-report", "--progress", "off", *store_args]
    env = {**os.environ, "NO_COLOR": "1"}

    def process_cpu(processes) -> float:
        return sum(sum(p.cpu_times()[:2]) for p in processes)

    def cpu_and_operations() -> tuple[float, float, float, float, int]:
        operations = counter.count() if "mongo" in store else journal_records(store["home"])
        return (
            cpu_seconds(resource.RUSAGE_CHILDREN),
            cpu_seconds(resource.RUSAGE_SELF),
            process_cpu(workers),
            process_cpu(servers),
            operations,
        )

    before = cpu_and_operations()
    processes = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(drivers)
    ]
    failed = [p.stderr.read().decode()[-300:] for p in processes if p.wait()]
    driver_cpu, scheduler_cpu, worker_cpu, server_cpu, operations = (
        b - a for a, b in zip(before, cpu_and_operations())
    )
    idle, idle_started = cpu_seconds(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    startup = time.perf_counter() - idle_started
    driver_cpu -= drivers * (cpu_seconds(resource.RUSAGE_CHILDREN) - idle)
    trials = optuna.load_study(study_name=name, storage=Stores(**store).study_storage()).get_trials(deepcopy=False)
    done = [t for t in trials if t.state.is_finished()]
    span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
    exact = "exact" if sum(t.state == TrialState.COMPLETE for t in trials) == n_trials else "NOT EXACT"
    if failed:
        print(f"    {name}: a driver failed: {failed[0]}")
    ms = [1000 * cpu / len(done) for cpu in (driver_cpu, scheduler_cpu, worker_cpu)]
    cpu = f"{sum(ms):5.1f} ms ({ms[0]:.0f}+{ms[1]:.0f}+{ms[2]:.0f})"
    server = f"{1000 * server_cpu / len(done):4.1f} ms" if servers else "   – ms"
    return f"{len(done) / span:6.1f}/s {cpu:>20} {server} {operations / len(done):5.1f} ops {exact:>9}", startup


# -- 3. the sampler's cost per trial --------------------------------------------------------------------------
def suggest_all(trial: optuna.Trial) -> None:
    """The search space of the trials `fake_trials` writes (DISTRIBUTIONS)."""
    trial.suggest_float("learning_rate", 1e-4, 1e-1, log=True)
    trial.suggest_int("units", 16, 512, log=True)
    trial.suggest_float("dropout", 0.0, 0.5)
    trial.suggest_int("layers", 1, 4)
    trial.suggest_categorical("activation", ["relu", "gelu", "tanh"])
    trial.suggest_categorical("batch_size", [32, 64, 128, 256])


def samplers() -> dict[str, optuna.samplers.BaseSampler]:
    chosen = {
        "TPE (Optuna's defaults; tlsearch's)": optuna.samplers.TPESampler(seed=0),
        "TPE multivariate": optuna.samplers.TPESampler(seed=0, multivariate=True),
        "random": optuna.samplers.RandomSampler(seed=0),
    }
    try:
        import torch  # noqa: F401

        chosen["GP"] = optuna.samplers.GPSampler(seed=0)
    except ImportError:
        pass
    return chosen


def sampler_table(history: list[int], asks: int) -> None:
    print(f"\n3. The sampler's cost per trial: ask + 6 suggests, median of {asks}, in memory (ms)")
    print(f"{'sampler':38} " + " ".join(f"{n:>10,}" for n in history))
    for label, sampler in samplers().items():
        cells = []
        for n in history:
            study = optuna.create_study(sampler=sampler, direction="maximize")
            study.add_trials([t for t in fake_trials(int(n / 0.7) + 1) if t.state == TrialState.COMPLETE][:n])
            times = []
            for _ in range(asks):
                started = time.perf_counter()
                trial = study.ask()
                suggest_all(trial)
                times.append(time.perf_counter() - started)
                study.tell(trial, state=TrialState.FAIL)  # not part of the history the next ask sees
            cells.append(f"{1000 * statistics.median(times):10.1f}")
        print(f"{label:38} " + " ".join(cells), flush=True)
    if "GP" not in samplers():
        print("GP: not measured (optuna.samplers.GPSampler needs PyTorch, which is not installed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 trials only")
    parser.add_argument("--sizes", default="1000,10000,100000", help="study sizes for table 1")
    parser.add_argument("--workers", default="8,64,256", help="simulated workers for table 2")
    parser.add_argument("--dispatch-trials", type=int, default=400, help="trials a run in table 2")
    parser.add_argument("--stores", default="journal,mongo", help="stores for tables 1 and 2")
    parser.add_argument("--tables", default="1,2,3", help="which tables to print")
    parser.add_argument("--mongo", default=None, help="a MongoDB URI (default: the bundled test server)")
    parser.add_argument("--asks", type=int, default=5, help="asks measured per sampler and history size")
    args = parser.parse_args()
    sizes = [1000, 10000] if args.quick else [int(s) for s in args.sizes.split(",")]
    widths = [8, 64] if args.quick else [int(w) for w in args.workers.split(",")]
    tables = args.tables.split(",")
    kinds = args.stores.split(",")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(f"bench/scale.py on {os.cpu_count()} cores, Optuna {optuna.__version__}")
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tlsearch-scale-")))
        mongo = args.mongo
        if "mongo" in kinds and mongo is None:
            from tlsearch.testing import TestMongoServer, test_mongo_uri

            mongo = test_mongo_uri() or stack.enter_context(TestMongoServer())
        if "1" in tables:
            commands_table(sizes, kinds, mongo, folder)
        if "2" in tables:
            dispatch_table(widths, kinds, mongo, folder, args.dispatch_trials)
        if "3" in tables:
            sampler_table([100, 1000] if args.quick else [100, 1000, 10000], args.asks)


if __name__ == "__main__":
    main()
