"""Dataset I/O per fold: tlsearch's dataset store + host cache against a dataset pickled into GridFS.

One host, a Dask LocalCluster of 2 worker processes, 20 trials × 5 folds = 100 fold tasks, each reading its
fold's train and validation rows. Two ways to get the data, side by side in one run:

- baseline (TensorLayer's TensorHub, hyperopt's MongoTrials): the dataset is a pickled blob in GridFS;
  every task downloads it, unpickles it, splits it and copies its fold's rows;
- tlsearch: the dataset is pushed to the store once; the host cache downloads and verifies it once per host
  and every task maps it read-only and takes zero-copy fold views from the stored fold plan.

Printed for both:
- bytes the MongoDB server sent, counted by a TCP proxy in this script (127.0.0.1) that every connection
  goes through, not by the code under test;
- time from "task starts" to "fold arrays ready", per fold (median, p90, max);
- the 2 workers' combined unique memory (USS, psutil) for the data: each task samples its worker's USS
  after reading the fold's rows, minus that worker's USS before any data; at each sample the workers'
  latest samples are summed (median and peak over the run). Also shown: anonymous (heap) memory, and PSS,
  which counts each shared page-cache page once in total, split between the processes mapping it.

The tlsearch tasks do what tlsearch's trial tasks do: a worker opens the dataset from the host cache once
and keeps it open, and takes the fold plan from the host cache. Each task also times, apart, a cold open
(the store round trip for the dataset's record, the integrity check, fresh mappings), printed as its own row.

MongoDB: mongo-java-server started here (or --mongo URI for a real MongoDB). pymongo's own GridFS reader
asks that server for a whole file in one reply and fails over 48 MB, so the baseline reads its chunks in
bounded batches, the fast path, as tlsearch does.

Usage: python bench/dataset_io.py [--quick] [--mb 200] [--trials 20] [--folds 5] [--workers 2] [--mongo URI]
(--quick: a 20 MiB dataset; the full run takes a few minutes and ~1.5 GB of disk for the cache.)

`--push-size MB` measures a push instead: a 2-D float32 .npy table of that size (label: its last column) pushed
with `tlsearch dataset push`, to the local store and to MongoDB, then a first trial's cache fill
(`HostCache.open`) on the same host. Printed per store: the file's size, each command's peak RSS (/usr/bin/time's
%M, which counts the file pages a process has mapped) beside the RSS of the same command on a tiny file, and
the copies of the data on this host's disk afterwards (distinct inodes under the home and the cache folder,
in units of the stored dataset; the source file is not counted). Target: the push's peak above the tiny-file
run at most 1.2× one push chunk plus the labels held in memory.
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

N_FEATURES = 256


# -- the byte-counting proxy ------------------------------------------------------------------------------
class CountingProxy:
    """A TCP relay on 127.0.0.1 in front of the MongoDB server, counting the bytes the server sends."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server_bytes = 0
        self.client_bytes = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true&serverSelectionTimeoutMS=10000"

    def snapshot(self) -> int:
        with self._lock:
            return self.server_bytes

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump, args=(upstream, client, "server_bytes"), daemon=True).start()
            threading.Thread(target=self._pump, args=(client, upstream, "client_bytes"), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, counter: str) -> None:
        buffer = bytearray(1 << 20)
        view = memoryview(buffer)
        try:
            while (n := source.recv_into(buffer)) > 0:
                sink.sendall(view[:n])
                with self._lock:
                    setattr(self, counter, getattr(self, counter) + n)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


# -- what runs on the workers -------------------------------------------------------------------------------
def _state() -> dict:
    """Per-process state that survives between tasks (task functions are shipped by value)."""
    import types

    module = sys.modules.get("_dataset_io_bench_state")
    if module is None:
        module = sys.modules["_dataset_io_bench_state"] = types.ModuleType("_dataset_io_bench_state")
        module.state = {}
    return module.state


def _memory() -> dict:
    import psutil

    info = psutil.Process().memory_full_info()
    anonymous = 0
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Anonymous:"):
                anonymous = int(line.split()[1]) * 1024
    return {"uss": info.uss, "pss": info.pss, "anon": anonymous}


def warm_up(kind: str, uri: str, database: str, cache_dir: str) -> int:
    """Import and connect what a worker needs, then record its memory before any data."""
    import pymongo
    import sklearn.model_selection  # noqa: F401 - the baseline splits in the task

    from tlsearch.data import HostCache
    from tlsearch.data._gridfs import MongoDatasetStore

    state = _state()
    if kind == "store":
        state["store"] = MongoDatasetStore(uri, database)
        state["cache"] = HostCache(cache_dir, progress=False)
        state["store"].list()
    else:
        state["client"] = pymongo.MongoClient(uri)
        state["client"][database].command("ping")
    state["before"] = _memory()
    return os.getpid()


def _finish(ready: float, fold: int, arrays: tuple[np.ndarray, ...]) -> dict:
    checksum = float(sum(a.sum(dtype=np.float64) for a in arrays))  # every train and validation row is read
    after = _memory()
    before = _state()["before"]
    return {
        "ready": ready,
        "fold": fold,
        "checksum": checksum,
        "pid": os.getpid(),
        "at": time.time(),
        **{key: after[key] - before[key] for key in after},
    }


def store_task(ref: str, plan_hash: str, fold: int) -> dict:
    """tlsearch, as its trial tasks do it: the worker opens the dataset from the host cache once and keeps
    it open, gets the fold plan from the host cache, and takes zero-copy fold views."""
    started = time.perf_counter()
    state = _state()
    if "dataset" not in state:
        state["dataset"] = state["cache"].open(state["store"], ref)
    plan = state["cache"].fold_plan(state["store"], plan_hash)
    views = state["dataset"].fold(plan, fold)
    ready = time.perf_counter() - started
    # Also timed, not used: a cold open, as a task that keeps nothing open would do (a store round trip for
    # the dataset's record, the integrity check against the marker, fresh mappings).
    cold_started = time.perf_counter()
    with state["cache"].open(state["store"], ref) as cold:
        cold.fold(plan, fold)
    cold_seconds = time.perf_counter() - cold_started
    del cold
    arrays = (views.train["X"], views.train["y"], views.validation["X"], views.validation["y"])
    return {**_finish(ready, fold, arrays), "cold": cold_seconds}


def baseline_task(database: str, file_id, n_splits: int, seed: int, fold: int) -> dict:
    """TensorHub / MongoTrials: download the pickled dataset from GridFS, unpickle it, split, copy rows."""
    from sklearn.model_selection import KFold

    started = time.perf_counter()
    client = _state()["client"]
    chunks = client[database]["baseline.chunks"]
    blob = b"".join(
        chunk["data"] for chunk in chunks.find({"files_id": file_id}, {"_id": 0, "data": 1}).sort("n", 1).batch_size(32)
    )
    data = pickle.loads(blob)
    del blob
    train, validation = list(KFold(n_splits, shuffle=True, random_state=seed).split(data["X"]))[fold]
    arrays = (data["X"][train], data["y"][train], data["X"][validation], data["y"][validation])
    return _finish(time.perf_counter() - started, fold, arrays)


# -- the driver -----------------------------------------------------------------------------------------------
def run_tasks(kind: str, uri: str, database: str, cache_dir: str, workers: int, submissions: list) -> list[dict]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(warm_up, kind, uri, database, cache_dir)
        futures = [client.submit(function, *arguments, pure=False) for function, arguments in submissions]
        return client.gather(futures)


def summarize(results: list[dict], dataset_bytes: int) -> dict:
    """Per-fold times, and the workers' combined memory at each moment a task sampled it: that worker's
    sample plus each other worker's latest sample (0 before its first task)."""
    ready = sorted(r["ready"] for r in results)
    latest: dict[int, dict] = {r["pid"]: {"uss": 0, "pss": 0, "anon": 0} for r in results}
    moments = []
    for r in sorted(results, key=lambda r: r["at"]):
        latest[r["pid"]] = r
        moments.append({key: sum(sample[key] for sample in latest.values()) for key in ("uss", "pss", "anon")})
    combined = {}
    for key in ("uss", "pss", "anon"):
        values = [moment[key] for moment in moments]
        combined[f"{key}_median"], combined[f"{key}_peak"] = statistics.median(values), max(values)
    return {"median": statistics.median(ready), "p90": ready[int(0.9 * (len(ready) - 1))], "max": ready[-1], **combined}


# -- --push-size: a push's peak memory and the copies on disk ----------------------------------------------
_FILL = """
import os, sys
from tlsearch.data import HostCache, open_dataset_store
with open_dataset_store(sys.argv[1] or None, database=os.environ["TLSEARCH_DATABASE"], home=sys.argv[2]) as store:
    HostCache(sys.argv[3], progress=False).open(store, "big").close()
"""


def _peak_rss(command: list[str], env: dict) -> tuple[int, float]:
    """Run `command` to completion under /usr/bin/time: its peak resident set in bytes, and its seconds. (Not
    os.wait4 here: a child's ru_maxrss starts at this process's RSS when it forks.)"""
    import subprocess

    started = time.perf_counter()
    with tempfile.NamedTemporaryFile("r") as report:
        subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", report.name, *command],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
        )
        return int(report.read().split()[-1]) * 1024, time.perf_counter() - started


def _write_table(path: Path, mib: float) -> tuple[int, int]:
    """A float32 table of about `mib` MiB (256 features + a whole-number label column), written in blocks."""
    n_rows = int(mib * 2**20 / ((N_FEATURES + 1) * 4))
    table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n_rows, N_FEATURES + 1))
    rng = np.random.default_rng(0)
    for start in range(0, n_rows, 16384):
        block = rng.standard_normal((min(16384, n_rows - start), N_FEATURES + 1), dtype=np.float32)
        block[:, -1] = rng.integers(0, 10, len(block))
        table[start : start + len(block)] = block
    table.flush()
    del table
    return n_rows, path.stat().st_size


def _copies(folders: list[Path], dataset_bytes: int) -> float:
    """Bytes of the distinct .npy files (by inode) under `folders`, in units of the dataset."""
    inodes = {}
    for folder in folders:
        for path in folder.rglob("*.npy"):
            stat = path.stat()
            if "fold_plans" not in path.parts and "plans" not in path.parts:
                inodes[(stat.st_dev, stat.st_ino)] = stat.st_size
    return sum(inodes.values()) / dataset_bytes


def push_figures(mib: float, mongo: str | None) -> int:
    from tlsearch.data._chunks import CHUNK_BYTES
    from tlsearch.testing import TestMongoServer

    work = Path(tempfile.mkdtemp(prefix="tlsearch-push-bench-"))
    server = None
    try:
        n_rows, file_bytes = _write_table(work / "big.npy", mib)
        _write_table(work / "tiny.npy", 0.01)
        labels_bytes = n_rows * (4 + 8)  # y as read (float32) and as stored (int64): held beside the chunk
        tlsearch = [str(Path(sys.executable).with_name("tlsearch"))]
        if not Path(tlsearch[0]).exists():
            tlsearch = [sys.executable, "-m", "tlsearch"]
        if mongo is None:
            server = TestMongoServer()
            mongo = server.start()
        print(
            f"file: {n_rows} rows × {N_FEATURES + 1} float32 columns = {file_bytes / 2**20:.1f} MiB; "
            f"push chunk {CHUNK_BYTES / 2**20:.0f} MiB; labels in memory {labels_bytes / 2**20:.1f} MiB",
            flush=True,
        )
        print(
            f"{'store':8}{'push peak RSS':>16}{'tiny push':>12}{'above tiny':>12}{'target':>10}"
            f"{'push time':>11}{'cache fill peak':>18}{'copies on disk':>16}"
        )
        for kind, uri in (("local", None), ("mongo", mongo)):
            home, cache = work / f"home-{kind}", work / f"cache-{kind}"
            env = {
                **os.environ,
                "TLSEARCH_HOME": str(home),
                "TLSEARCH_CACHE_DIR": str(cache),
                "TLSEARCH_DATABASE": f"push_bench_{uuid.uuid4().hex[:8]}",
            }
            env.pop("TLSEARCH_MONGO_URI", None)
            where = ["--mongo", uri] if uri else []
            tiny, _ = _peak_rss(
                [
                    *tlsearch,
                    "dataset",
                    "push",
                    "tiny",
                    str(work / "tiny.npy"),
                    "-q",
                    "--task",
                    "classification",
                    *where,
                ],
                env,
            )
            push, seconds = _peak_rss(
                [*tlsearch, "dataset", "push", "big", str(work / "big.npy"), "-q", "--task", "classification", *where],
                env,
            )
            stored = n_rows * N_FEATURES * 4 + n_rows * 8
            after_push = _copies([home], stored)
            fill, _ = _peak_rss([sys.executable, "-c", _FILL, uri or "", str(home), str(cache)], env)
            copies = _copies([home, cache], stored)
            above, target = push - tiny, 1.2 * CHUNK_BYTES + labels_bytes
            print(
                f"{kind:8}{push / 2**20:>12,.0f} MiB{tiny / 2**20:>8,.0f} MiB{above / 2**20:>8,.0f} MiB"
                f"{target / 2**20:>6,.0f} MiB{seconds:>9.1f} s{fill / 2**20:>14,.0f} MiB"
                f"{f'{after_push:.2f} + {copies - after_push:.2f}':>16}"
                f"   {'met' if above <= target else 'NOT met'}",
                flush=True,
            )
        print("copies on disk: after the push (the store's files under home) + what the cache fill added")
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 20 MiB dataset instead of 200 MiB")
    parser.add_argument("--mb", type=float, default=None, help="dataset size in MiB (default 200; --quick 20)")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mongo", metavar="URI", help="a real MongoDB to use instead of the bundled test server")
    parser.add_argument("--cache-dir", metavar="DIR", help="where the host cache goes (default: a temporary folder)")
    parser.add_argument("--push-size", metavar="MB", type=float, help="measure a push of an .npy of MB MiB instead")
    args = parser.parse_args(argv)
    if args.push_size:
        return push_figures(args.push_size, args.mongo)
    mib = args.mb or (20 if args.quick else 200)

    from pymongo import MongoClient
    from pymongo.uri_parser import parse_uri
    from sklearn.model_selection import KFold

    from tlsearch.data import HostCache, fold_plan_for
    from tlsearch.data._gridfs import MongoDatasetStore
    from tlsearch.testing import TestMongoServer

    server = None
    if args.mongo:
        uri = args.mongo
    else:
        server = TestMongoServer()
        uri = server.start()
    host, port = parse_uri(uri)["nodelist"][0]
    proxy = CountingProxy(host, port)
    database = f"tlsearch_bench_{uuid.uuid4().hex[:8]}"
    work = Path(args.cache_dir or tempfile.mkdtemp(prefix="tlsearch-bench-"))
    seed = 0
    try:
        n_rows = int(mib * 2**20 / (N_FEATURES * 4))
        rng = np.random.default_rng(0)
        X = rng.standard_normal((n_rows, N_FEATURES), dtype=np.float32)
        y = rng.integers(0, 10, n_rows)
        dataset_bytes = X.nbytes + y.nbytes
        print(
            f"dataset: {n_rows} rows × {N_FEATURES} float32 features + int64 labels = {dataset_bytes / 2**20:.1f} MiB; "
            f"{args.trials} trials × {args.folds} folds = {args.trials * args.folds} fold tasks on a Dask "
            f"LocalCluster of {args.workers} worker processes (one host)",
            flush=True,
        )
        print(
            f"MongoDB: {'the given server' if args.mongo else 'mongo-java-server'} behind a byte-counting proxy "
            f"on 127.0.0.1:{proxy.port}",
            flush=True,
        )

        # Setup, not measured: each approach stores the dataset its own way.
        direct = MongoClient(uri)
        import gridfs

        file_id = gridfs.GridFS(direct[database], collection="baseline").put(
            pickle.dumps({"X": X, "y": y}, protocol=pickle.HIGHEST_PROTOCOL)
        )
        setup_store = MongoDatasetStore(uri, database)
        info = setup_store.push("bench", {"X": X, "y": y})
        setup_store.close()
        del X, y
        submissions_base = [
            (baseline_task, (database, file_id, args.folds, seed, k))
            for _ in range(args.trials)
            for k in range(args.folds)
        ]

        # tlsearch: the driver opens the dataset (the host's one download) and computes the fold plan.
        cache_dir = str(work / "cache")
        before = proxy.snapshot()
        driver_store = MongoDatasetStore(proxy.uri(), database)
        started = time.perf_counter()
        with HostCache(cache_dir, progress=False).open(driver_store, info.ref) as dataset:
            download_seconds = time.perf_counter() - started
            plan = fold_plan_for(driver_store, dataset, KFold(args.folds, shuffle=True, random_state=seed))
        driver_store.close()
        submissions = [(store_task, (info.ref, plan.hash, k)) for _ in range(args.trials) for k in range(args.folds)]
        ours = run_tasks("store", proxy.uri(), database, cache_dir, args.workers, submissions)
        ours_bytes = proxy.snapshot() - before
        layout_bytes = sum(p.stat().st_size for p in (work / "cache" / "layouts").rglob("*.npy"))
        print(f"tlsearch done: host download + verify {download_seconds:.2f} s", flush=True)

        before = proxy.snapshot()
        baseline = run_tasks("baseline", proxy.uri(), database, cache_dir, args.workers, submissions_base)
        baseline_bytes = proxy.snapshot() - before
        print("baseline done", flush=True)
        sums = {(r["fold"], "ours"): r["checksum"] for r in ours} | {
            (r["fold"], "base"): r["checksum"] for r in baseline
        }
        if not all(np.isclose(sums[k, "ours"], sums[k, "base"], rtol=1e-9) for k in range(args.folds)):
            print("WARNING: the two approaches read different rows")

        s_base, s_ours = summarize(baseline, dataset_bytes), summarize(ours, dataset_bytes)
        mb = 1e6
        print()
        print(f"{'':44}{'baseline (pickle per task)':>28}{'tlsearch (store + cache)':>28}{'ratio':>12}")
        print(
            f"{'bytes sent by the MongoDB server':44}{baseline_bytes / mb:>25,.1f} MB{ours_bytes / mb:>25,.1f} MB"
            f"{baseline_bytes / max(ours_bytes, 1):>11.1f}×"
        )
        print(
            f"{'time to fold arrays, median per fold':44}{s_base['median'] * 1e3:>25,.1f} ms{s_ours['median'] * 1e3:>25,.2f} ms"
            f"{s_base['median'] / s_ours['median']:>11.0f}×"
        )
        cold = sorted(r["cold"] for r in ours)
        print(
            f"{'  cold open per task instead (see --help)':44}{'':>28}{statistics.median(cold) * 1e3:>25,.2f} ms"
            f"{s_base['median'] / statistics.median(cold):>11.0f}×"
        )
        print(
            f"{'  p90 / max':44}{s_base['p90'] * 1e3:>13,.1f} / {s_base['max'] * 1e3:>8,.1f} ms"
            f"{s_ours['p90'] * 1e3:>13,.2f} / {s_ours['max'] * 1e3:>8,.1f} ms"
        )
        for key, label in (
            ("uss", "workers' combined USS for the data"),
            ("anon", "  of which anonymous (heap)"),
            ("pss", "  PSS (shared pages split)"),
        ):
            for which in ("median", "peak"):
                b, o = s_base[f"{key}_{which}"], s_ours[f"{key}_{which}"]
                print(
                    f"{label + f', {which}':44}{b / 2**20:>16,.1f} MiB ({b / dataset_bytes:4.2f}×)"
                    f"{o / 2**20:>16,.1f} MiB ({o / dataset_bytes:4.2f}×)"
                )
        print()
        print(
            f"one-time, per host: download + verify {download_seconds:.2f} s; fold layout for all "
            f"{args.folds} folds: {layout_bytes / 2**20:.0f} MiB on disk, shared by all processes"
        )
        first = sorted(r["ready"] for r in ours)[-args.workers :]
        print(
            f"slowest tlsearch tasks (first fold on each worker: layout or its wait): "
            f"{', '.join(f'{t:.2f} s' for t in first)}"
        )
        targets = [
            ("server bytes ≥ 50× fewer", baseline_bytes / max(ours_bytes, 1) >= 50),
            ("time to fold data ≤ 1/100", s_ours["median"] * 100 <= s_base["median"]),
            ("combined USS ≤ 1.3× dataset (median)", s_ours["uss_median"] <= 1.3 * dataset_bytes),
            ("combined USS ≤ 1.3× dataset (peak)", s_ours["uss_peak"] <= 1.3 * dataset_bytes),
        ]
        print("targets: " + "; ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in targets))
        direct.drop_database(database)
        direct.close()
    finally:
        proxy.close()
        if server is not None:
            server.stop()
        if not args.cache_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
