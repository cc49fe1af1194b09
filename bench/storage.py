"""Benchmark: MongoStorage against what a user would pick for a shared study store, side by side:
Optuna's RDBStorage on a real PostgreSQL, Optuna's GrpcStorageProxy in front of that PostgreSQL, and, for
reference, RDBStorage(SQLite) and JournalStorage(file).

    python bench/storage.py [--quick] [--repeat N] [--widths 1,4,16] [--kinds mongo,postgres,grpc,sqlite,journal]

Needs psycopg2-binary and grpcio (the `bench` extra) and PostgreSQL's server binaries (Debian's `postgresql`:
/usr/lib/postgresql/*/bin): it starts a throwaway PostgreSQL cluster (initdb + pg_ctl in a temporary folder,
on a free port, as the user `nobody` when run as root) and one gRPC proxy server process in front of it, and
stops both at the end. Starts its own MongoDB test server (tlsearch.testing.TestMongoServer) unless
TLSEARCH_TEST_MONGO_URI is set. Measures, for each storage, in one run:
- throughput with TPE (3 suggests + 5 reports per trial) on one study, with 1, 4 and 16 processes, from the
  moment all processes have started to the moment the last one has finished its trials;
- storage cost per trial (time spent inside storage calls) with the random sampler, over the first 100 and
  the last 100 of 2,000 trials: a storage whose cost grows with the study's size shows it here;
- what one command costs: a ping through pymongo, and as a bare wire-protocol round trip to the same server.
Prints one table; ratios say how many times better MongoStorage is (higher throughput, lower cost).
Each storage first runs an unmeasured warm-up study: a long one for MongoDB (the test server is a JVM, which
compiles its hot code only after some ten thousand requests), a short one for the file-based storages. The
storages take turns within each repeat, in a rotating order, and the table shows medians over the repeats
(per-trial costs are medians within each window too), so a burst of load from elsewhere on a shared
machine moves one sample, not the result.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
from optuna.storages import BaseStorage
from pymongo.monitoring import CommandListener

KINDS = ("mongo", "postgres", "grpc", "sqlite", "journal")
LABELS = {
    "mongo": "MongoStorage",
    "postgres": "RDBStorage(PostgreSQL)",
    "grpc": "GrpcStorageProxy(PostgreSQL)",
    "sqlite": "RDBStorage(SQLite)",
    "journal": "JournalStorage(file)",
}


def objective(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", -10, 10)
    y = trial.suggest_int("y", 0, 10)
    kind = trial.suggest_categorical("kind", ["a", "b", "c"])
    for step in range(5):
        trial.report(x * x + step, step)
    return x * x + y + (kind == "b")


class CommandCounter(CommandListener):
    """A pymongo command listener counting the commands sent (each one a round trip to the server)."""

    def __init__(self) -> None:
        self.commands = 0

    def started(self, event) -> None:
        self.commands += 1

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


def open_storage(kind: str, where: str, database: str, counter: CommandCounter | None = None) -> BaseStorage:
    """A fresh storage object of `kind` (what each process builds for itself)."""
    if kind == "mongo":
        from tlsearch.storage import MongoStorage

        if counter is not None:
            import pymongo

            return MongoStorage(pymongo.MongoClient(where, event_listeners=[counter]), database)
        return MongoStorage(where, database)
    if kind == "sqlite":
        return optuna.storages.RDBStorage(f"sqlite:///{where}/{database}.sqlite3")
    if kind == "postgres":  # where: the server's URL; one database for all the run's studies
        return optuna.storages.RDBStorage(where)
    if kind == "grpc":  # where: host:port of the proxy server
        host, port = where.rsplit(":", 1)
        return optuna.storages.GrpcStorageProxy(host=host, port=int(port))
    if kind == "journal":
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(f"{where}/{database}.journal"))
    raise ValueError(f"unknown storage kind {kind!r}")


def _worker(kind: str, where: str, database: str, study_name: str, n_trials: int, seed: int, barrier, finished) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name=study_name,
        storage=open_storage(kind, where, database),
        sampler=optuna.samplers.TPESampler(seed=seed),
    )
    barrier.wait()
    study.optimize(objective, n_trials=n_trials)
    finished.put(time.monotonic())  # the process's exit is not the study's work (pymongo's takes 0.5 s)


def tpe_throughput(
    kind: str, where: str, database: str, n_trials: int, n_processes: int, counter: CommandCounter | None = None
) -> float:
    """Trials per second of n_processes processes optimizing one study with TPE, from the moment all have
    started to the moment the last one has finished its trials (process start-up and exit excluded)."""
    study_name = f"{database}-tpe-{n_processes}"
    storage = open_storage(kind, where, database, counter)
    optuna.create_study(study_name=study_name, storage=storage)
    if n_processes == 1:
        study = optuna.load_study(study_name=study_name, storage=storage, sampler=optuna.samplers.TPESampler(seed=0))
        start, commands = time.perf_counter(), counter.commands if counter else 0
        study.optimize(objective, n_trials=n_trials)
        elapsed = time.perf_counter() - start
        if counter:
            counter.commands -= commands  # what the trials sent, not the set-up
        return n_trials / elapsed
    context = multiprocessing.get_context("spawn")
    barrier, finished = context.Barrier(n_processes + 1), context.Queue()
    shares = [n_trials // n_processes + (i < n_trials % n_processes) for i in range(n_processes)]
    processes = [
        context.Process(target=_worker, args=(kind, where, database, study_name, share, seed, barrier, finished))
        for seed, share in enumerate(shares)
    ]
    for process in processes:
        process.start()
    barrier.wait()
    start = time.monotonic()  # CLOCK_MONOTONIC: one clock for all the processes of this machine
    for process in processes:
        process.join()
    if any(process.exitcode for process in processes):
        return float("nan")  # e.g. SQLite's "database is locked" under many writers: shown as failed
    elapsed = max(finished.get() for _ in processes) - start
    done = len(optuna.load_study(study_name=study_name, storage=storage).get_trials(deepcopy=False))
    return done / elapsed


class TimedStorage(BaseStorage):
    """Forwards every call to a storage, adding up the seconds spent inside it."""

    def __init__(self, inner: BaseStorage) -> None:
        self.inner = inner
        self.seconds = 0.0


def _timed(name: str) -> Callable:
    def method(self: TimedStorage, *args, **kwargs):
        start = time.perf_counter()
        try:
            return getattr(self.inner, name)(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    method.__name__ = name
    return method


for _name in [n for n in dir(BaseStorage) if not n.startswith("__")] + ["_get_stale_trial_ids"]:
    if callable(getattr(BaseStorage, _name, None)) or _name == "_get_stale_trial_ids":
        setattr(TimedStorage, _name, _timed(_name))
TimedStorage.__abstractmethods__ = frozenset()


def storage_cost(
    kind: str, where: str, database: str, n_trials: int, n_edge: int, counter: CommandCounter | None = None
) -> tuple[float, float]:
    """Milliseconds of storage time per trial (random sampler) over the first and the last n_edge trials."""
    inner = open_storage(kind, where, database, counter)
    if isinstance(inner, optuna.storages.RDBStorage):
        inner = optuna.storages._CachedStorage(inner)  # what Optuna itself wraps an RDBStorage in
    storage = TimedStorage(inner)
    study = optuna.create_study(
        study_name=f"{database}-cost", storage=storage, sampler=optuna.samplers.RandomSampler(seed=0)
    )
    if counter:
        counter.commands = 0
    per_trial: list[float] = []
    last = [0.0]

    def record(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        per_trial.append(storage.seconds - last[0])
        last[0] = storage.seconds

    study.optimize(objective, n_trials=n_trials, callbacks=[record])
    return 1000 * statistics.median(per_trial[:n_edge]), 1000 * statistics.median(per_trial[-n_edge:])


def warm_up(kind: str, where: str, n_trials: int) -> None:
    storage = open_storage(kind, where, "warmup")
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=1))
    study.optimize(objective, n_trials=n_trials)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL cluster (default settings) on a free port; yields its SQLAlchemy URL."""
    import shlex
    import shutil
    import subprocess

    initdb = shutil.which("initdb") or max(glob.glob("/usr/lib/postgresql/*/bin/initdb"), default=None)
    if initdb is None:
        raise SystemExit(
            "PostgreSQL's initdb not found: apt-get install -y postgresql (or drop postgres,grpc from --kinds)"
        )
    bin_dir, folder, port = Path(initdb).parent, Path(tempfile.mkdtemp(prefix="tlsearch-pg-")), free_port()
    as_root = os.geteuid() == 0  # PostgreSQL refuses to run as root: run it as nobody
    if as_root:
        shutil.chown(folder, "nobody")

    def pg(*command: str) -> None:
        command = [str(bin_dir / command[0]), *command[1:]]
        if as_root:
            command = ["su", "nobody", "-s", "/bin/sh", "-c", shlex.join(command)]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    data = str(folder / "data")
    pg("initdb", "-D", data, "-A", "trust", "-U", "postgres")
    pg(
        "pg_ctl",
        "-D",
        data,
        "-l",
        str(folder / "log"),
        "-w",
        "-o",
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200",
        "start",
    )
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        pg("pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def grpc_proxy(storage_url: str) -> Iterator[str]:
    """Optuna's gRPC proxy server in its own process, in front of the RDBStorage at `storage_url`."""
    import socket
    import subprocess

    port = free_port()
    code = (
        "import optuna; optuna.logging.set_verbosity(optuna.logging.WARNING); "
        f"optuna.storages.run_grpc_proxy_server(optuna.storages.RDBStorage({storage_url!r}), "
        f"host='127.0.0.1', port={port})"
    )
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError(f"gRPC proxy failed: {server.stderr.read().decode()[-2000:]}") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def run(places: dict[str, str], args: argparse.Namespace) -> dict[tuple[str, str], float]:
    """Medians over the repeats of each measure of each storage; `places` says where each kind lives."""
    kinds = args.kinds
    results: dict[tuple[str, str], list[float]] = {}
    for kind in kinds:
        warm_up(kind, places[kind], args.warmup if kind == "mongo" else args.warmup // 10)
    for repeat in range(args.repeat):
        for kind in kinds[repeat % len(kinds) :] + kinds[: repeat % len(kinds)]:
            where = places[kind]
            database = f"bench_{os.getpid()}_{repeat}_{kind}"  # postgres and grpc share one database
            for width in args.widths:
                counter = CommandCounter() if kind == "mongo" and width == 1 else None
                figure = tpe_throughput(kind, where, f"{database}_t{width}", args.tpe_trials, width, counter)
                results.setdefault((kind, f"tpe{width}"), []).append(figure)
                if counter:
                    results.setdefault((kind, "trips_tpe"), []).append(counter.commands / args.tpe_trials)
                print(f"  {LABELS[kind]:28} TPE x{width}: {figure:.1f} trials/s", file=sys.stderr, flush=True)
            if not args.cost:
                continue
            counter = CommandCounter() if kind == "mongo" else None
            first, last = storage_cost(kind, where, database + "_c", args.cost_trials, args.edge, counter)
            results.setdefault((kind, "first"), []).append(first)
            results.setdefault((kind, "last"), []).append(last)
            if counter:
                results.setdefault((kind, "trips_random"), []).append(counter.commands / args.cost_trials)
            print(f"  {LABELS[kind]:28} cost: first {first:.2f} ms, last {last:.2f} ms", file=sys.stderr, flush=True)
        if "mongo" in kinds:
            import pymongo

            client = pymongo.MongoClient(places["mongo"])
            for name in client.list_database_names():
                if name.startswith(f"bench_{os.getpid()}"):
                    client.drop_database(name)
            client.close()
    medians = {key: statistics.median(values) for key, values in results.items()}
    if "mongo" in kinds:
        medians["ping_pymongo"], bare = command_latency(places["mongo"])
        if bare is not None:
            medians["ping_bare"] = bare
    return medians


def command_latency(uri: str, n: int = 3000) -> tuple[float, float | None]:
    """Median µs of a `ping` through pymongo, and on a bare socket speaking the wire protocol (OP_MSG) to the
    same server (None when that cannot be done, e.g. over TLS): what a command costs beyond its round trip."""
    import socket
    import struct

    import bson
    import pymongo

    def median_us(command: Callable[[], object]) -> float:
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(n):
                command()
            runs.append((time.perf_counter() - start) / n * 1e6)
        return statistics.median(runs)

    client = pymongo.MongoClient(uri)
    through_pymongo = median_us(lambda: client.admin.command("ping"))
    client.close()
    try:
        host, port = pymongo.uri_parser.parse_uri(uri)["nodelist"][0]
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            body = struct.pack("<IB", 0, 0) + bson.encode({"ping": 1, "$db": "admin"})
            message = struct.pack("<iiii", 16 + len(body), 1, 0, 2013) + body  # 2013: OP_MSG

            def raw_ping() -> None:
                sock.sendall(message)
                length = struct.unpack("<i", sock.recv(16, socket.MSG_WAITALL)[:4])[0]
                sock.recv(length - 16, socket.MSG_WAITALL)

            bare = median_us(raw_ping)
    except (OSError, ValueError, struct.error):
        bare = None
    return through_pymongo, bare


def print_table(figures: dict[tuple[str, str], float], args: argparse.Namespace) -> None:
    n, c, e, kinds = args.tpe_trials, args.cost_trials, args.edge, args.kinds
    rows = [(f"TPE, {n} trials, {w} process{'es' if w > 1 else ''} (trials/s)", f"tpe{w}", True) for w in args.widths]
    if args.cost:
        rows += [
            (f"random, storage ms/trial, first {e} of {c}", "first", False),
            (f"random, storage ms/trial, last {e} of {c}", "last", False),
        ]
    header = ["", *(LABELS[kind] for kind in kinds)]
    lines = [header, ["---", *["---:"] * len(kinds)]]
    for label, key, higher_is_better in rows:
        mongo = figures.get(("mongo", key), float("nan"))
        cells = [label]
        for kind in kinds:
            value = figures[(kind, key)]
            text = f"{value:.1f}" if higher_is_better else f"{value:.2f}"
            if kind != "mongo" and "mongo" in kinds:
                ratio = mongo / value if higher_is_better else value / mongo
                text += f" (×{ratio:.2f})"
            cells.append("failed" if value != value else text)
        lines.append(cells)
    if args.cost:
        lines.append(["last / first", *(f"{figures[(kind, 'last')] / figures[(kind, 'first')]:.2f}" for kind in kinds)])
    for cells in lines:
        print("| " + " | ".join(cells) + " |")
    if "mongo" in kinds:
        trips = f"TPE {figures[('mongo', 'trips_tpe')]:.1f}"
        if args.cost:
            trips += f", random sampler {figures[('mongo', 'trips_random')]:.1f}"
        print(f"\nMongoStorage round trips per trial (independent of the machine): {trips}.")
        pymongo_us, bare_us = figures["ping_pymongo"], figures.get("ping_bare")
        print(
            f"A ping to the server: {pymongo_us:.0f} µs through pymongo"
            + (f", {bare_us:.0f} µs as a bare wire-protocol round trip." if bare_us else ".")
        )
    print(
        "(×N: MongoStorage is N times better than that storage: throughput MongoStorage/other,"
        " cost other/MongoStorage; targets: ×5 against PostgreSQL and the gRPC proxy at every width, ×5 against"
        f" SQLite; medians of {args.repeat} run(s); machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="example: python bench/storage.py --quick"
    )
    parser.add_argument("--quick", action="store_true", help="a smaller run (100 TPE trials, 500 random trials)")
    parser.add_argument("--repeat", type=int, default=1, help="repeat the whole run N times and report medians")
    parser.add_argument("--widths", default="1,4,16", help="processes for the TPE runs (default 1,4,16)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"storages to measure (default {','.join(KINDS)})")
    parser.add_argument(
        "--no-cost",
        dest="cost",
        action="store_false",
        help="skip the storage-cost rows (random sampler, first and last trials of a long study)",
    )
    args = parser.parse_args(argv)
    sizes = (100, 500, 50, 1000) if args.quick else (500, 2000, 100, 3000)
    args.tpe_trials, args.cost_trials, args.edge, args.warmup = sizes
    args.widths = [int(width) for width in args.widths.split(",")]
    args.kinds = [kind for kind in args.kinds.split(",") if kind]
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        parser.error(f"--kinds: unknown {sorted(unknown)}; choose from {','.join(KINDS)}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from tlsearch.testing import TestMongoServer, test_mongo_uri

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still stops the servers started here
    with tempfile.TemporaryDirectory(prefix="tlsearch-bench-") as scratch, contextlib.ExitStack() as services:
        places = {"sqlite": scratch, "journal": scratch}
        if "mongo" in args.kinds:
            places["mongo"] = test_mongo_uri() or services.enter_context(TestMongoServer())
        if {"postgres", "grpc"} & set(args.kinds):
            places["postgres"] = services.enter_context(postgres_server())
        if "grpc" in args.kinds:
            places["grpc"] = services.enter_context(grpc_proxy(places["postgres"]))
        figures = run(places, args)
        if test_mongo_uri():
            import pymongo

            pymongo.MongoClient(test_mongo_uri()).drop_database("warmup")
    print_table(figures, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
