"""Where trials run: the Dask cluster (local by default, or an existing one), GPU workers, dataset prefetch."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator

import dask
import distributed
from distributed.comm import get_address_host

from tlsearch.errors import TLSearchError
from tlsearch.stores import Stores, require_shared

log = logging.getLogger(__name__)

# The local cluster fails a task whose worker died at once (the driver fails and retries that trial
# itself), and its scheduler and nannies share the driver's process and the machine's cores with the
# workers: Dask's statistical profiler and a 10 Hz memory poll per worker cost more than they show there.
LOCAL_CLUSTER_CONFIG = {
    "distributed.scheduler.allowed-failures": 0,
    "distributed.worker.profile.enabled": False,
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.scheduler.work-stealing-interval": "1s",
    "distributed.scheduler.worker-saturation": 1.0,
}


@contextlib.contextmanager
def connect(scheduler: str | None = None, n_workers: int | None = None,
            client: distributed.Client | None = None) -> Iterator[distributed.Client]:
    """A Dask client: `client` as given, one connected to `scheduler`, or a new LocalCluster.

    The local cluster has one single-threaded worker process per core (Keras keeps global state per
    process, so one trial runs at a time in each) and fails a task whose worker died at once, so the
    driver can fail and retry that trial itself.
    """
    if client is not None:
        yield client
        return
    if scheduler:
        try:
            with distributed.Client(scheduler, timeout="10s") as remote:
                yield remote
        except OSError as error:
            raise TLSearchError(f"cannot reach the Dask scheduler at {scheduler}: {error}") from None
        return
    n_workers = n_workers or os.cpu_count() or 1
    if n_workers < 1:
        raise TLSearchError(f"--workers must be at least 1, got {n_workers}")
    if not log.isEnabledFor(logging.DEBUG):  # the scheduler and nannies run in this process; keep the terminal quiet
        logging.getLogger("distributed").setLevel(logging.ERROR)
    with dask.config.set(LOCAL_CLUSTER_CONFIG):
        with distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                      dashboard_address=":0", silence_logs=logging.ERROR) as cluster:
            with distributed.Client(cluster) as local:
                yield local


def workers_are_remote(client: distributed.Client) -> bool:
    """Whether any worker runs on another host than this one."""
    here = {"127.0.0.1", "localhost", socket.gethostname()}
    with contextlib.suppress(OSError):
        here.update(socket.gethostbyname_ex(socket.gethostname())[2])
    hosts = {get_address_host(address) for address in client.scheduler_info()["workers"]}
    return not hosts <= here


def check_stores_reachable(client: distributed.Client, stores: Stores) -> None:
    """Refuse a local (file) store when workers run on other hosts."""
    require_shared(stores, workers_are_remote(client))


def dashboard_link(client: distributed.Client) -> str | None:
    try:
        return client.dashboard_link
    except Exception:  # no dashboard (bokeh missing, or disabled on the scheduler)
        return None


def trial_resources(client: distributed.Client) -> dict[str, float] | None:
    """What one trial asks of a worker: the smallest GPU share any worker offers, or nothing on CPU clusters."""
    shares = [w.get("resources", {}).get("GPU") for w in client.scheduler_info()["workers"].values()]
    shares = [share for share in shares if share]
    return {"GPU": min(shares)} if shares else None


class DatasetPrefetch(distributed.WorkerPlugin):
    """Fetches a study's dataset into each worker host's cache when the worker starts (or joins later),
    so the first trial on a host does not wait for the download."""

    def __init__(self, stores: Stores, dataset_ref: str) -> None:
        self.stores = stores
        self.dataset_ref = dataset_ref
        self.name = f"tlsearch-prefetch-{dataset_ref}"

    def setup(self, worker: distributed.Worker) -> None:
        # In the background: the worker's event loop must stay responsive; a trial that needs the data
        # first simply waits on the cache's file lock.
        threading.Thread(target=self._fetch, name=self.name, daemon=True).start()

    def _fetch(self) -> None:
        from tlsearch.trial_task import _open_dataset

        try:
            _open_dataset(self.stores, self.dataset_ref)
        except Exception as error:  # the trial that needs it will report the error
            log.warning("prefetching dataset %s failed: %s", self.dataset_ref, error)


def visible_gpus() -> list[str]:
    """GPU ids on this host: `$CUDA_VISIBLE_DEVICES` when set, else what `nvidia-smi -L` lists."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return [g for g in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip() not in ("", "-1")]
    if not shutil.which("nvidia-smi"):
        return []
    result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return [str(i) for i, line in enumerate(result.stdout.splitlines()) if line.startswith("GPU ")]


def worker_specs(gpus: str, trials_per_gpu: int, cpu_workers: int | None = None) -> list[dict]:
    """One Dask worker process per trial slot: `trials_per_gpu` per GPU, each pinned with
    CUDA_VISIBLE_DEVICES and advertising its GPU share; with no GPU, one CPU worker per core."""
    if trials_per_gpu < 1:
        raise TLSearchError(f"--trials-per-gpu must be at least 1, got {trials_per_gpu}")
    ids = visible_gpus() if gpus == "all" else [g.strip() for g in gpus.split(",") if g.strip()]
    if not ids:
        return [{"env": {"CUDA_VISIBLE_DEVICES": ""}, "resources": {}}
                for _ in range(cpu_workers or os.cpu_count() or 1)]
    share = 1.0 / trials_per_gpu
    return [{"env": {"CUDA_VISIBLE_DEVICES": gpu}, "resources": {"GPU": share}}
            for gpu in ids for _ in range(trials_per_gpu)]


async def run_workers(scheduler: str, specs: list[dict]) -> None:
    """Start one Nanny-supervised worker per spec against `scheduler` and run until they stop."""
    nannies = [distributed.Nanny(scheduler, nthreads=1, env=spec["env"], resources=spec["resources"] or None)
               for spec in specs]
    for nanny in nannies:
        await nanny
    for nanny in nannies:
        await nanny.finished()


def prepare_workers(client: distributed.Client, spec) -> None:
    """Give each worker's Keras backend its share of its host's cores and, for a Keras study, import Keras in
    the workers now (see tlsearch.worker_setup)."""
    from tlsearch.study import KerasModel
    from tlsearch.worker_setup import WorkerSetup, workers_per_host

    client.register_plugin(WorkerSetup(workers_per_host(client), preload_keras=isinstance(spec.model, KerasModel)))
