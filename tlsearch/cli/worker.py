"""`tlsearch worker`: start Dask workers on this host, one per GPU (or trial slot), for a study cluster."""

from __future__ import annotations

import asyncio

from tlsearch.cli import security_of, tls_options
from tlsearch.errors import TLSearchError


def register(subparsers, parent) -> None:
    worker = subparsers.add_parser(
        "worker",
        parents=[parent, tls_options()],
        help="start Dask workers on this host",
        description="Start Dask worker processes on this host connected to a scheduler: one per GPU slot "
        "(--trials-per-gpu processes per GPU, each pinned with CUDA_VISIBLE_DEVICES and advertising "
        "its GPU share), or one per CPU core when the host has no GPU. Start the scheduler with "
        "`dask scheduler`; workers fetch each study's dataset into this host's cache when it starts. "
        "Workers run any task sent to them: they listen on 127.0.0.1 unless --host or "
        "--listen-address says otherwise; across hosts, use TLS (--tls-ca-file, --tls-cert, --tls-key).",
        epilog="example: tlsearch worker --scheduler tls://10.0.0.5:8786 --host 10.0.0.7 --tls-ca-file ca.pem "
        "--tls-cert node.pem --tls-key node.key --gpus all",
    )
    where = worker.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDR", help="scheduler address (default: $TLSEARCH_SCHEDULER)")
    where.add_argument(
        "--scheduler-file",
        metavar="PATH",
        help="JSON file naming the scheduler, as `dask scheduler --scheduler-file PATH` writes it "
        "(waits up to a minute for it to appear)",
    )
    worker.add_argument("--gpus", default="all", help="'all' or a comma-separated list of GPU ids (default: all)")
    worker.add_argument(
        "--trials-per-gpu", type=int, default=1, metavar="N", help="trials packed on one GPU (default: 1)"
    )
    worker.add_argument(
        "--cpu-workers", type=int, metavar="N", help="worker processes when there is no GPU (default: one per core)"
    )
    worker.add_argument(
        "--host",
        default=None,
        metavar="HOST",
        help="address the workers listen on (default: 127.0.0.1, this host only)",
    )
    worker.add_argument("--listen-address", metavar="ADDR", help="protocol and host to listen on, e.g. tls://10.0.0.7")
    worker.add_argument(
        "--dashboard-address", metavar="ADDR", help="serve each worker's dashboard there (default: none)"
    )
    worker.set_defaults(func=_worker)


def _worker(args) -> int:
    from tlsearch.execution import _cluster as cluster

    scheduler = args.settings.scheduler_address()
    if not scheduler:
        raise TLSearchError(
            "give the scheduler's address: --scheduler tcp://HOST:8786 or --scheduler-file PATH "
            "(or set TLSEARCH_SCHEDULER)"
        )
    if args.host and args.listen_address:
        raise TLSearchError("give --host or --listen-address, not both")
    security = security_of(args)
    specs = cluster.worker_specs(args.gpus, args.trials_per_gpu, args.cpu_workers)
    gpus = sorted({s["env"]["CUDA_VISIBLE_DEVICES"] for s in specs if s["resources"]})
    where = f"GPUs {','.join(gpus)}" if gpus else "CPU"
    print(f"starting {len(specs)} worker(s) on {where} for {scheduler} (Ctrl-C to stop)")
    if not (args.host or args.listen_address) and not cluster.is_loopback(scheduler):
        print(
            "note: the workers listen on 127.0.0.1 only, which a scheduler on another host cannot reach: "
            "pass --host THIS-HOST (and TLS options, see docs/guides/security.md)"
        )
    asyncio.run(
        cluster.run_workers(
            scheduler,
            specs,
            host=args.host or cluster.LOOPBACK,
            listen_address=args.listen_address,
            dashboard_address=args.dashboard_address,
            security=security,
        )
    )
    return 0
