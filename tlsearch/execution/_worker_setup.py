"""Prepares each Dask worker process for trials: CPU threads for its share of the host, Keras imported early."""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter

import distributed
from distributed.comm import get_address_host

log = logging.getLogger(__name__)


def workers_per_host(client: distributed.Client) -> dict[str, int]:
    """How many worker processes the cluster has on each host."""
    return dict(Counter(get_address_host(address) for address in client.scheduler_info()["workers"]))


def host_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class WorkerSetup(distributed.WorkerPlugin):
    """Gives each worker's Keras backend as many intra- and inter-op threads as the worker's share of its
    host's cores (not every core for every worker, which oversubscribes a host running several workers), and
    with `preload_keras` imports Keras before the worker's first trial starts (see tlsearch.models.prepare_worker:
    the import's objects are then kept out of the garbage collector's sight). Registering the plugin waits for
    that import (seconds), in a thread, so the worker keeps talking to the scheduler meanwhile: a trial's duration
    is then its own, not its worker's start-up.

    `workers` maps each host to its number of workers; a host it does not name counts as one worker.
    """

    name = "tlsearch-worker-setup"

    def __init__(self, workers: dict[str, int], preload_keras: bool) -> None:
        self.workers = workers
        self.preload_keras = preload_keras

    async def setup(self, worker: distributed.Worker) -> None:
        from tlsearch.models import import_keras, prepare_worker

        prepare_worker(max(1, host_cores() // self.workers.get(get_address_host(worker.address), 1)))
        if self.preload_keras:
            await asyncio.to_thread(self._preload, import_keras)

    @staticmethod
    def _preload(import_keras) -> None:
        try:
            import_keras()
        except Exception as error:  # the first trial imports it again and reports the error
            log.warning("importing Keras in the background failed: %s", error)
