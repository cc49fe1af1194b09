"""`tlsearch worker`: start Dask workers on this host, one per GPU (or trial slot), for a study cluster."""

from __future__ import annotations

import asyncio

from tlsearch import config
from tlsearch.errors import TLSearchError


def register(subparsers, parent) -> None:
    worker = subparsers.add_parser(
        "worker", parents=[parent], help="start Dask workers on this host",
        description="Start Dask worker processes on this host connected to a scheduler: one per GPU slot "
                    "(--trials-per-gpu processes per GPU, each pinned with CUDA_VISIBLE_DEVICES and advertising "
                    "its GPU share), or one per CPU core when the host has no GPU. Start the scheduler with "
                    "`dask scheduler`; workers fetch each study's dataset into this host's cache when it starts.",
        epilog="example: tlsearch worker --scheduler tcp://10.0.0.5:8786 --gpus all --trials-per-gpu 2")
    worker.add_argument("--scheduler", metavar="ADDR", help="scheduler address (default: $TLSEARCH_SCHEDULER)")
    worker.add_argument("--gpus", default="all", help="'all' or a comma-separated list of GPU ids (default: all)")
    worker.add_argument("--trials-per-gpu", type=int, default=1, metavar="N", help="trials packed on one GPU (default: 1)")
    worker.add_argument("--cpu-workers", type=int, metavar="N", help="worker processes when there is no GPU (default: one per core)")
    worker.set_defaults(func=_worker)


def _worker(args) -> int:
    from tlsearch import cluster

    scheduler = config.scheduler(args.scheduler)
    if not scheduler:
        raise TLSearchError("give the scheduler's address: --scheduler tcp://HOST:8786 (or set TLSEARCH_SCHEDULER)")
    specs = cluster.worker_specs(args.gpus, args.trials_per_gpu, args.cpu_workers)
    gpus = sorted({s["env"]["CUDA_VISIBLE_DEVICES"] for s in specs if s["resources"]})
    where = f"GPUs {','.join(gpus)}" if gpus else "CPU"
    print(f"starting {len(specs)} worker(s) on {where} for {scheduler} (Ctrl-C to stop)")
    asyncio.run(cluster.run_workers(scheduler, specs))
    return 0
