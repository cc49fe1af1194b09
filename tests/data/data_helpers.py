"""Helpers shared by the dataset tests."""

from __future__ import annotations

import multiprocessing

import numpy as np

from tlsearch.data._gridfs import MongoDatasetStore


def make_arrays(n_rows: int = 60, n_features: int = 5, seed: int = 0, **extra) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {"X": rng.normal(size=(n_rows, n_features)).astype(np.float32), "y": rng.integers(0, 3, size=n_rows)}
    arrays.update(extra)
    return arrays


def stored_objects(store) -> dict[str, int]:
    """What a store physically holds, independent of its records: files, chunks, contents, plans."""
    if isinstance(store, MongoDatasetStore):
        db = store._db
        return {
            name: db[name].count_documents({})
            for name in ("datasets", "datasets.contents", "datasets.files", "datasets.chunks", "fold_plans")
        }
    root = store.root
    return {
        name: sum(1 for p in (root / name).rglob("*") if p.is_file()) if (root / name).exists() else 0
        for name in ("records", "contents", "fold_plans", "tmp")
    }


def open_in_process(store, ref: str, cache_dir: str) -> tuple[str, float]:
    """Open `ref` from the host cache in `cache_dir` (run in a fresh process)."""
    from tlsearch.data import HostCache

    with HostCache(cache_dir).open(store, ref) as dataset:
        return dataset.info.hash, float(np.asarray(dataset["X"], dtype=np.float64).sum())


def run_in_processes(function, argument_lists: list[tuple]) -> list:
    """Call `function(*arguments)` in one fresh (spawned) process per argument tuple, all released at the
    same moment by a barrier once every process has started; returns the results in order."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(argument_lists))
    queue = context.Queue()
    processes = [
        context.Process(target=_report, args=(i, barrier, queue, function, arguments))
        for i, arguments in enumerate(argument_lists)
    ]
    for process in processes:
        process.start()
    try:
        outcomes = dict(queue.get(timeout=120) for _ in processes)
    finally:
        for process in processes:
            process.join(timeout=30)
    errors = [value for ok, value in outcomes.values() if not ok]
    if errors:
        raise AssertionError(f"a process failed: {errors[0]}")
    return [outcomes[i][1] for i in range(len(processes))]


def _report(index, barrier, queue, function, arguments) -> None:
    barrier.wait()
    try:
        queue.put((index, (True, function(*arguments))))
    except BaseException as error:
        queue.put((index, (False, f"{type(error).__name__}: {error}")))


def fold_plan_in_process(store, ref: str, cache_dir: str, splitter, plan_hash: str | None):
    """Run in a fresh process: compute (plan_hash None) or fetch a fold plan; returns its hash and folds."""
    from tlsearch.data import HostCache, fold_plan_for

    cache = HostCache(cache_dir)
    if plan_hash is None:
        with cache.open(store, ref) as dataset:
            plan = fold_plan_for(store, dataset, splitter)
    else:
        plan = store.get_fold_plan(plan_hash)
    return plan.hash, [(np.asarray(t).tolist(), np.asarray(v).tolist()) for t, v in plan.folds]
