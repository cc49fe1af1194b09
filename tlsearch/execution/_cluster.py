"""Where trials run: the Dask cluster (local by default, or an existing one), GPU workers, dataset prefetch."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import dask
import distributed
import distributed.core
import distributed.diagnostics.plugin
from distributed.comm import get_address_host, parse_address
from optuna.trial import TrialState

from tlsearch.errors import TLSearchError
from tlsearch.stores._stores import Stores, require_shared

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


# Nothing of a local cluster listens beyond this host, and nothing of `tlsearch worker` unless told to:
# a Dask worker runs whatever task reaches it.
LOOPBACK = "127.0.0.1"


def tls_security(
    ca_file: str | None = None, cert: str | None = None, key: str | None = None
) -> distributed.Security | None:
    """Dask TLS for every connection (driver, scheduler, workers), or None when no file is given.

    Each side presents `cert`/`key` and accepts only peers whose certificate `ca_file` signed.
    """
    files = {"--tls-ca-file": ca_file, "--tls-cert": cert, "--tls-key": key}
    if not any(files.values()):
        return None
    missing = [flag for flag, value in files.items() if not value]
    if missing:
        raise TLSearchError(f"TLS needs a CA file, a certificate and its key: add {', '.join(missing)}")
    for flag, value in files.items():
        if not os.path.isfile(value):
            raise TLSearchError(f"{flag} {value}: no such file")
    return distributed.Security(
        tls_ca_file=ca_file,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
        require_encryption=True,
    )


def local_security() -> distributed.Security:
    """Mutual TLS with a throw-away certificate made for one local cluster: only this process (the driver,
    the scheduler and the nannies it starts) holds it, so another local account that reaches the
    scheduler's port cannot connect, and cannot run code as this user."""
    return distributed.Security.temporary()


@dataclasses.dataclass(frozen=True)
class ClusterOptions:
    """Which Dask cluster runs the trials: `client` as given, else the scheduler at `scheduler`, else a new
    LocalCluster of `n_workers` processes (default: one per core); `security` (see `tls_security`): TLS."""

    client: distributed.Client | None = None
    scheduler: str | None = None
    n_workers: int | None = None
    security: distributed.Security | None = None

    @property
    def is_local(self) -> bool:
        """Whether `connect` starts a LocalCluster."""
        return self.client is None and not self.scheduler


@contextlib.contextmanager
def connect(options: ClusterOptions) -> Iterator[distributed.Client]:
    """A Dask client: `options.client` as given, one connected to `options.scheduler`, or a new LocalCluster.

    The local cluster has one single-threaded worker process per core (Keras keeps global state per
    process, so one trial runs at a time in each) and fails a task whose worker died at once, so the
    driver can fail and retry that trial itself. It listens on 127.0.0.1 only (dashboard included), and
    every connection to it is mutual TLS: with `security` (see `tls_security`), or else throw-away
    certificates only this process holds (`local_security`).
    """
    client, scheduler, n_workers, security = options.client, options.scheduler, options.n_workers, options.security
    if client is not None:
        yield client
        return
    if scheduler:
        if scheduler.startswith("tls://") and security is None:
            raise TLSearchError(
                f"the scheduler at {scheduler} speaks TLS: pass --tls-ca-file, --tls-cert and "
                "--tls-key (or tls_ca_file, tls_cert, tls_key in the config file)"
            )
        try:
            with distributed.Client(scheduler, timeout="10s", security=security) as remote:
                yield remote
        except OSError as error:
            raise TLSearchError(f"cannot reach the Dask scheduler at {scheduler}: {error}") from None
        return
    n_workers = n_workers or os.cpu_count() or 1
    if n_workers < 1:
        raise TLSearchError(f"--workers must be at least 1, got {n_workers}")
    if not log.isEnabledFor(logging.DEBUG):  # the scheduler and nannies run in this process; keep the terminal quiet
        logging.getLogger("distributed").setLevel(logging.ERROR)
    quiet = logging.DEBUG if log.isEnabledFor(logging.DEBUG) else logging.CRITICAL  # no shutdown tracebacks
    security = security or local_security()
    with dask.config.set(LOCAL_CLUSTER_CONFIG), _local_cluster(n_workers, quiet, security) as cluster:
        with distributed.Client(cluster, security=security) as local:
            yield local


@contextlib.contextmanager
def _local_cluster(
    n_workers: int, silence_logs: int, security: distributed.Security | None
) -> Iterator[distributed.LocalCluster]:
    """A LocalCluster on 127.0.0.1 whose worker processes ignore Ctrl-C and SIGTERM (see `dask_setup`)."""
    try:
        cluster = distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            host=LOOPBACK,
            dashboard_address=f"{LOOPBACK}:0",
            protocol="tls" if security else None,
            security=security,
            silence_logs=silence_logs,
            preload=[__name__],
        )
    except Exception as error:  # e.g. a script without a main guard, re-run by each spawned worker
        raise TLSearchError(
            f"the local Dask cluster did not start ({error}); if you call tlsearch.run from "
            'a script, put the call under `if __name__ == "__main__":`'
        ) from None
    with cluster:
        yield cluster


def dask_setup(worker: distributed.Worker) -> None:
    """Run by each local worker process as it starts (this module is its Dask preload): a terminal sends
    Ctrl-C to the whole process group, and `timeout` SIGTERM, but the driver alone decides what happens to
    running trials; its nanny stops the worker (a message, then SIGKILL)."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


def is_loopback(address: str) -> bool:
    """Whether a Dask address (tcp://HOST:PORT) names this host's loopback interface."""
    host = get_address_host(address)
    return host == "localhost" or host.startswith("127.") or host == "::1"


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


def trial_capacity(client: distributed.Client) -> tuple[int, dict[str, float] | None]:
    """How many trials the cluster runs at once, and what one trial asks of a worker.

    On a cluster with GPU workers a trial asks for the smallest GPU share any worker offers, and only the
    workers offering shares run trials, each as many as its shares hold (at most its threads): a mixed
    cluster's CPU-only workers count for none, so no trial waits RUNNING for a GPU slot. Elsewhere a trial asks
    for nothing and every worker thread runs one."""
    workers = list(client.scheduler_info()["workers"].values())
    shares = [w.get("resources", {}).get("GPU") or 0.0 for w in workers]
    if not any(shares):
        return sum(w["nthreads"] for w in workers), None
    share = min(s for s in shares if s)
    slots = sum(min(w["nthreads"], math.floor(s / share + 1e-9)) for w, s in zip(workers, shares))
    return slots, {"GPU": share}


def trial_resources(client: distributed.Client) -> dict[str, float] | None:
    """What one trial asks of a worker (see trial_capacity): a GPU share, or nothing on CPU clusters."""
    return trial_capacity(client)[1]


class DatasetPrefetch(distributed.WorkerPlugin):
    """Fetches a study's dataset into each worker host's cache when the worker starts (or joins later),
    so the first trial on a host does not wait for the download."""

    def __init__(self, stores: Stores, dataset_ref: str, dataset_hash: str) -> None:
        self.stores = stores
        self.dataset_ref, self.dataset_hash = dataset_ref, dataset_hash
        self.name = f"tlsearch-prefetch-{dataset_ref}-{dataset_hash[:16]}"

    def setup(self, worker: distributed.Worker) -> None:
        # In the background: the worker's event loop must stay responsive; a trial that needs the data
        # first simply waits on the cache's file lock.
        threading.Thread(target=self._fetch, name=self.name, daemon=True).start()

    def _fetch(self) -> None:
        from tlsearch.execution._trial_task import _open_dataset

        try:
            _open_dataset(self.stores, self.dataset_ref, self.dataset_hash)
        except Exception as error:  # the trial that needs it will report the error
            log.warning("prefetching dataset %s failed: %s", self.dataset_ref, error)


class StudyDefinition(distributed.WorkerPlugin):
    """The packed study definition (`trial_task.pack_spec`), held by every worker: the scheduler gives a
    plugin to each worker that joins or restarts, so no worker's death loses it (data scattered to workers
    can be lost: Dask's memory manager keeps a single replica)."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.name = f"tlsearch-spec-{hashlib.sha256(payload).hexdigest()[:16]}"

    def setup(self, worker: distributed.Worker) -> None:
        pass


def run_trial_task(job, definition: str):
    """The task the driver submits for each trial: `trial_task.run_trial` with the study definition that the
    worker plugin named `definition` holds. A trial that calls `sys.exit` fails like one that raises."""
    from tlsearch.execution._trial_task import TrialOutcome, run_trial

    try:
        return run_trial(job, distributed.get_worker().plugins[definition].payload)
    except SystemExit as exit:  # would stop the worker process, and every trial that later lands on it
        return TrialOutcome(
            TrialState.FAIL,
            error={
                "error_type": "SystemExit",
                "error_message": f"the trial called sys.exit({exit.code!r}); raise an exception to fail a trial",
            },
        )


WORKER_EXITS = "tlsearch-worker-exits"  # the scheduler's event topic: {"worker": address, "exitcode": int}


class WorkerExits(distributed.diagnostics.plugin.NannyPlugin):
    """Each nanny reports to the scheduler how its worker process ended (exit code, or minus the signal)
    before it starts a new one, so the driver can say why a trial's worker died (`death_cause`)."""

    name = "tlsearch-worker-exits"

    def setup(self, nanny: distributed.Nanny) -> None:
        # Dask offers no hook for a worker's exit: wrap the nanny's own callback, for the running process
        # (which holds a reference to it) and for those the nanny starts later. Without it (another Dask
        # version), deaths are reported without their exit code.
        on_exit = getattr(nanny, "_on_worker_exit_sync", None)
        if on_exit is None:
            return

        def report_exit(exitcode: int) -> None:
            if nanny.status == distributed.core.Status.running:  # not when the nanny itself is closing
                nanny.log_event(WORKER_EXITS, {"worker": nanny.worker_address, "exitcode": exitcode})
            on_exit(exitcode)

        nanny._on_worker_exit_sync = report_exit
        if nanny.process is not None:
            nanny.process.on_exit = report_exit


def worker_exit_code(client: distributed.Client, address: str, timeout: float = 10.0) -> int | None:
    """How the worker at `address` ended, as its nanny reported it (`WorkerExits`); None if no report came
    within `timeout` seconds (no nanny, or a nanny without the plugin)."""
    deadline = time.monotonic() + timeout
    while True:
        for _, event in reversed(client.get_events(WORKER_EXITS)):
            if event.get("worker") == address:
                return int(event["exitcode"])
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def death_cause(exitcode: int | None) -> str:
    """What a user can act on, from a worker process's exit code (minus the signal that killed it)."""
    if exitcode is None:
        return "its worker process died (no exit code reported)"
    if exitcode >= 0:
        return f"exit code {exitcode}"
    name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else f"signal {-exitcode}"
    return f"{name}: out of memory?" if -exitcode == signal.SIGKILL else name


def restart_now(client: distributed.Client, workers: list[str]) -> None:
    """Stop the worker processes at `workers` at once, whatever they run; their nannies start new ones.
    (`Client.restart_workers` first waits for the running task to end: a hung one never does.)"""
    if not workers:
        return
    try:
        client.run(os._exit, 1, workers=workers, on_error="return")
    except Exception as error:  # the reply never comes: the process is gone
        log.debug("stopping workers %s: %s", workers, error)


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
    CUDA_VISIBLE_DEVICES, advertising its GPU share and allocating GPU memory on demand (`gpu_memory_env`);
    with no GPU, one CPU worker per core."""
    if trials_per_gpu < 1:
        raise TLSearchError(f"--trials-per-gpu must be at least 1, got {trials_per_gpu}")
    ids = visible_gpus() if gpus == "all" else [g.strip() for g in gpus.split(",") if g.strip()]
    if not ids:
        return [
            {"env": {"CUDA_VISIBLE_DEVICES": ""}, "resources": {}} for _ in range(cpu_workers or os.cpu_count() or 1)
        ]
    share = 1.0 / trials_per_gpu
    return [
        {"env": {"CUDA_VISIBLE_DEVICES": gpu, **gpu_memory_env(trials_per_gpu)}, "resources": {"GPU": share}}
        for gpu in ids
        for _ in range(trials_per_gpu)
    ]


def gpu_memory_env(trials_per_gpu: int) -> dict[str, str]:
    """Environment for a worker sharing its GPU with `trials_per_gpu - 1` others: every backend allocates
    GPU memory as it needs it instead of reserving most of the GPU at start (TensorFlow: memory growth;
    JAX: no preallocation), and JAX caps each worker at its share of the GPU, with some room left for the
    CUDA context of each. A value already set in this host's environment wins."""
    wanted = {
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{0.9 / trials_per_gpu:.3f}",
    }
    return {name: os.environ.get(name, value) for name, value in wanted.items()}


async def run_workers(
    scheduler: str,
    specs: list[dict],
    *,
    host: str = LOOPBACK,
    listen_address: str | None = None,
    dashboard_address: str | None = None,
    security: distributed.Security | None = None,
) -> None:
    """Start one Nanny-supervised worker per spec against `scheduler` and run until they stop.

    They listen on `host` (default 127.0.0.1: reachable from this host only), or on the host and protocol
    of `listen_address` (e.g. tls://10.0.0.7; each process picks a free port), serve a dashboard only at
    `dashboard_address`, and use `security` when given.
    """
    listen = {"host": host, "protocol": "tls" if security else None}
    if listen_address:
        listen = {"host": get_address_host(listen_address), "protocol": parse_address(listen_address)[0]}
    dashboard = {"dashboard": True, "dashboard_address": dashboard_address} if dashboard_address else {}
    nannies = [
        distributed.Nanny(
            scheduler,
            nthreads=1,
            env=spec["env"],
            resources=spec["resources"] or None,
            security=security,
            **listen,
            **dashboard,
        )
        for spec in specs
    ]
    for nanny in nannies:
        await nanny
    for nanny in nannies:
        await nanny.finished()


def prepare_workers(client: distributed.Client, spec) -> None:
    """Give each worker's Keras backend its share of its host's cores and, for a Keras study, import Keras in
    the workers now (see tlsearch.execution._worker_setup)."""
    from tlsearch.execution._worker_setup import WorkerSetup, workers_per_host

    client.register_plugin(WorkerSetup(workers_per_host(client), preload_keras=spec.model.framework == "keras"))
