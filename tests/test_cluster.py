"""Workers started by `tlsearch worker` against an existing scheduler, and the GPU slot layout."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time

import distributed
import pytest
from optuna.trial import TrialState

from tlsearch.errors import TLSearchError
from tlsearch.execution import _cluster as cluster
from tlsearch.execution import _driver as driver
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.spec._spec import load_study_file
from tlsearch.stores._stores import Stores

pytestmark = pytest.mark.timeout(240)

STUDY = """
import tlsearch

def fit(params, fold, report):
    return float(params["x"])

study = tlsearch.StudySpec(name="on-workers", dataset="sklearn:iris", model=tlsearch.CustomLoop(fit),
                           space=lambda trial: {"x": trial.suggest_float("x", 0, 1)}, cv=2,
                           direction="maximize", n_trials=4)
"""


@pytest.mark.slow
def test_worker_command_joins_a_scheduler_and_runs_trials(tmp_path):
    study_file = tmp_path / "study.py"
    study_file.write_text(STUDY)
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None) as empty:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tlsearch",
                "worker",
                "--scheduler",
                empty.scheduler_address,
                "--gpus",
                "all",
                "--cpu-workers",
                "1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            with distributed.Client(empty) as client:
                client.wait_for_workers(1, timeout=60)
                assert cluster.trial_resources(client) is None  # a CPU worker offers no GPU share
            study = driver.run(
                load_study_file(study_file),
                stores=Stores(home=tmp_path),
                scheduler=empty.scheduler_address,
                progress="off",
            )
        finally:
            _stop(worker)
    assert "starting 1 worker(s) on CPU" in worker.stdout.read()
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 4


PACKED = """
import os
import time

LOG = LOG_PATH

import tlsearch

def fit(params, fold, report):
    started = time.time()
    time.sleep(1.5)
    memory = [os.environ.get(name, "-") for name in ("TF_FORCE_GPU_ALLOW_GROWTH", "XLA_PYTHON_CLIENT_PREALLOCATE",
                                                     "XLA_PYTHON_CLIENT_MEM_FRACTION")]
    with open(LOG, "a") as log:  # when each fold ran, and its GPU memory settings, as the worker saw them
        log.write(f"{fold.trial_number} {started} {time.time()} {' '.join(memory)}\\n")
    return float(params["x"])

study = tlsearch.StudySpec(name="packed", dataset="sklearn:iris", model=tlsearch.CustomLoop(fit),
                           space=lambda trial: {"x": trial.suggest_float("x", 0, 1)}, cv=2,
                           direction="maximize", n_trials=4)
"""


@pytest.mark.slow
def test_two_trials_share_one_gpu_and_a_third_waits(tmp_path):
    """`tlsearch worker --gpus 0 --trials-per-gpu 2` (CUDA_VISIBLE_DEVICES=0 is harmless on a CPU-only
    host): two trials run on GPU 0 at the same time, never three, and each records its worker and GPU."""
    from tlsearch import cli

    study_file = tmp_path / "study.py"
    study_file.write_text(PACKED.replace("LOG_PATH", repr(str(tmp_path / "folds.log"))))
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None) as empty:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tlsearch", "worker", "--scheduler", empty.scheduler_address]
            + ["--gpus", "0", "--trials-per-gpu", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**_without_gpu_memory_settings(os.environ), "CUDA_VISIBLE_DEVICES": "0"},
        )
        try:
            with distributed.Client(empty) as client:
                client.wait_for_workers(2, timeout=60)
                assert cluster.trial_resources(client) == {"GPU": 0.5}
            code = cli.main(
                ["run", str(study_file), "--scheduler", empty.scheduler_address, "--home", str(tmp_path / "home")]
                + ["--progress", "off", "--no-report"]
            )
        finally:
            _stop(worker)
    assert code == 0
    assert "starting 2 worker(s) on GPUs 0" in worker.stdout.read()
    study = study_attrs.load(Stores(home=tmp_path / "home"), "packed")
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 4
    assert {t.user_attrs["gpu"] for t in trials} == {"0"}
    assert len({t.user_attrs["worker"] for t in trials}) == 2
    spans: dict[str, list[float]] = {}
    for line in (tmp_path / "folds.log").read_text().splitlines():
        number, started, ended, *memory = line.split()
        # each packed worker's own TensorFlow and JAX memory settings (JAX: half the GPU, less the CUDA contexts)
        assert memory == ["true", "false", "0.450"], line
        span = spans.setdefault(number, [float(started), float(ended)])
        span[:] = [min(span[0], float(started)), max(span[1], float(ended))]
    running_at = [sum(s <= start < e for s, e in spans.values()) for start, _ in spans.values()]
    assert len(spans) == 4 and max(running_at) == 2, running_at  # two at once on GPU 0, never a third
    frame = tlsearch_results(tmp_path / "home")
    assert set(frame["user_attrs_gpu"]) == {"0"} and frame["user_attrs_worker"].nunique() == 2


@pytest.mark.slow
def test_on_a_mixed_cluster_only_gpu_slots_count_so_no_trial_waits_running(tmp_path, capsys):
    """Two GPU slots (`--gpus 0 --trials-per-gpu 2`) beside two CPU-only workers: trials ask for a GPU share, so
    the driver keeps two in flight, not four (two of which would wait RUNNING for a slot)."""
    from tlsearch import cli

    study_file = tmp_path / "study.py"
    study_file.write_text(PACKED.replace("LOG_PATH", repr(str(tmp_path / "folds.log"))))
    command = [sys.executable, "-m", "tlsearch", "worker"]
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None) as empty:
        workers = [
            subprocess.Popen(
                command + ["--scheduler", empty.scheduler_address, *options],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "CUDA_VISIBLE_DEVICES": gpus},
            )
            for gpus, options in [("0", ["--gpus", "0", "--trials-per-gpu", "2"]), ("", ["--cpu-workers", "2"])]
        ]
        try:
            with distributed.Client(empty) as client:
                client.wait_for_workers(4, timeout=60)
                assert cluster.trial_capacity(client) == (2, {"GPU": 0.5})
            code = cli.main(
                ["run", str(study_file), "--scheduler", empty.scheduler_address, "--home", str(tmp_path / "home")]
                + ["--progress", "log", "--no-report"]
            )
        finally:
            for worker in workers:
                _stop(worker)
    assert code == 0
    output = capsys.readouterr()
    assert "2 trials at a time" in output.out + output.err
    trials = study_attrs.load(Stores(home=tmp_path / "home"), "packed").get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 4 and {t.user_attrs["gpu"] for t in trials} == {"0"}


JOINING = """
import pathlib, time

STARTED = pathlib.Path(STARTED_PATH)

import tlsearch

def fit(params, fold, report):
    (STARTED / str(fold.trial_number)).touch()
    deadline = time.monotonic() + 90
    while len(list(STARTED.iterdir())) < 2:  # holds the first trial until a second one runs beside it
        if time.monotonic() > deadline:
            raise RuntimeError("no second trial started")
        time.sleep(0.1)
    return float(params["x"])

study = tlsearch.StudySpec(name="joining", dataset="sklearn:iris", model=tlsearch.CustomLoop(fit),
                           space=lambda trial: {"x": trial.suggest_float("x", 0, 1)}, cv=2,
                           direction="maximize", n_trials=3)
"""


@pytest.mark.slow
def test_a_worker_that_joins_during_a_run_gets_trials(tmp_path):
    """The run starts on one worker; a second joins while the first trial runs, and the driver, following
    the cluster's capacity, starts a second trial on it (the first trial waits for that to finish)."""
    from tlsearch import cli

    (tmp_path / "started").mkdir()
    study_file = tmp_path / "study.py"
    study_file.write_text(JOINING.replace("STARTED_PATH", repr(str(tmp_path / "started"))))
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None) as empty:
        command = [sys.executable, "-m", "tlsearch", "worker", "--scheduler", empty.scheduler_address]
        workers = [_cpu_worker(command)]
        try:
            with distributed.Client(empty) as client:
                client.wait_for_workers(1, timeout=60)
                run = concurrent.futures.ThreadPoolExecutor(1).submit(
                    cli.main,
                    ["run", str(study_file), "--scheduler", empty.scheduler_address, "--home", str(tmp_path / "home")]
                    + ["--progress", "off", "--no-report"],
                )
                while not any((tmp_path / "started").iterdir()) and not run.done():
                    time.sleep(0.1)
                workers.append(_cpu_worker(command))
                assert run.result(timeout=200) == 0
        finally:
            for worker in workers:
                _stop(worker)
    trials = study_attrs.load(Stores(home=tmp_path / "home"), "joining").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3  # none failed waiting for a second trial
    assert len({t.user_attrs["worker"] for t in trials}) == 2


def _cpu_worker(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        command + ["--cpu-workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )


def _without_gpu_memory_settings(environ) -> dict:
    names = ("TF_FORCE_GPU_ALLOW_GROWTH", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION")
    return {name: value for name, value in environ.items() if name not in names}


def tlsearch_results(home):
    from tlsearch.reading._trials_table import results

    return results("packed", home=home)


def test_gpu_slots_pin_devices_and_advertise_shares(monkeypatch):
    for name in ("TF_FORCE_GPU_ALLOW_GROWTH", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
        monkeypatch.delenv(name, raising=False)
    specs = cluster.worker_specs("0,1", trials_per_gpu=2)
    assert [s["env"]["CUDA_VISIBLE_DEVICES"] for s in specs] == ["0", "0", "1", "1"]
    assert all(s["resources"] == {"GPU": 0.5} for s in specs)
    assert all(
        s["env"]["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
        and s["env"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
        and s["env"]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.450"  # half the GPU each, less the CUDA contexts
        for s in specs
    )
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.3")  # the host's own setting wins
    assert cluster.worker_specs("0", trials_per_gpu=4)[0]["env"]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert [s["env"]["CUDA_VISIBLE_DEVICES"] for s in cluster.worker_specs("all", 1)] == ["3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    cpu = cluster.worker_specs("all", 1, cpu_workers=3)
    assert len(cpu) == 3 and all(not s["resources"] for s in cpu)
    with pytest.raises(TLSearchError, match="at least 1"):
        cluster.worker_specs("0", trials_per_gpu=0)


@pytest.mark.slow
def test_the_local_cluster_listens_on_loopback_only():
    """Scheduler, dashboard and workers of `tlsearch run`'s local cluster: nothing reachable from another host."""
    import psutil

    from tlsearch.execution._cluster import ClusterOptions, connect

    with connect(ClusterOptions(n_workers=1)) as client:
        pids = [os.getpid(), *client.run(os.getpid).values()]
        listening = [
            c.laddr
            for pid in pids
            for c in psutil.Process(pid).net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        ]
    assert listening and all(address.ip in ("127.0.0.1", "::1") for address in listening), listening


def _handshake(address: str, **connection_args) -> None:
    """Open a Dask comm to `address` and complete Dask's handshake, or raise.

    A raw comm, not a `distributed.Client`: a client that failed to connect is garbage, and its `__del__`
    takes Dask's class-wide loop lock, which deadlocks when it runs inside the next client's starting thread."""
    import asyncio

    from distributed.comm import connect as open_comm

    async def handshake():
        comm = await open_comm(address, timeout=30, **connection_args)
        await comm.close()

    asyncio.run(handshake())


def _tls_without_certificate() -> dict:
    """Connection arguments for a TLS client that presents no certificate and trusts any server."""
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return {"ssl_context": context}


@pytest.mark.slow
def test_the_local_cluster_refuses_a_client_without_its_certificate():
    """Another local account can reach the scheduler's port, but not connect: plain TCP, TLS without a
    certificate and TLS with a certificate of its own are all refused; the driver's own certificate works."""
    from tlsearch.execution._cluster import ClusterOptions, connect

    with connect(ClusterOptions(n_workers=1)) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert "127.0.0.1" in client.dashboard_link
        assert client.submit(sum, [1, 2]).result(timeout=60) == 3
        _handshake(address, **client.security.get_connection_args("client"))
        port = address.rsplit(":", 1)[1]
        for target, connection_args in (
            (f"tcp://127.0.0.1:{port}", {}),
            (address, _tls_without_certificate()),
            (address, distributed.Security.temporary().get_connection_args("client")),
        ):
            with pytest.raises(Exception):  # noqa: B017 (refused in whichever way the transport refuses it)
                _handshake(target, **connection_args)


@pytest.mark.slow
def test_worker_and_driver_find_the_scheduler_through_its_scheduler_file(tmp_path):
    from tlsearch import cli

    study_file = tmp_path / "study.py"
    study_file.write_text(STUDY)
    scheduler_file = tmp_path / "scheduler.json"  # written by the scheduler itself, as `dask scheduler` does
    with distributed.LocalCluster(
        n_workers=0, processes=True, dashboard_address=None, scheduler_kwargs={"scheduler_file": str(scheduler_file)}
    ):
        worker = subprocess.Popen(
            [sys.executable, "-m", "tlsearch", "worker", "--scheduler-file", str(scheduler_file), "--cpu-workers", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            code = cli.main(
                ["run", str(study_file), "--scheduler-file", str(scheduler_file), "--home", str(tmp_path / "home")]
                + ["--progress", "off", "--no-report"]
            )
        finally:
            _stop(worker)
    assert code == 0
    study = study_attrs.load(Stores(home=tmp_path / "home"), "on-workers")
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 4


def test_a_scheduler_file_without_an_address_is_one_clear_line(tmp_path, capsys):
    from tlsearch import cli

    bad = tmp_path / "scheduler.json"
    bad.write_text('{"type": "Scheduler"}')
    assert cli.main(["worker", "--scheduler-file", str(bad)]) == 1
    assert "names no scheduler address" in capsys.readouterr().err


def _stop(worker: subprocess.Popen) -> None:
    """Ctrl-C to the `tlsearch worker` process group, as a terminal sends it; SIGKILL if it hangs."""
    os.killpg(worker.pid, signal.SIGINT)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


@pytest.mark.parametrize(
    "exitcode, cause",
    [
        (3, "exit code 3"),
        (-signal.SIGKILL, "SIGKILL: out of memory?"),
        (-signal.SIGSEGV, "SIGSEGV"),
        (None, "its worker process died (no exit code reported)"),
    ],
)
def test_a_dead_workers_exit_code_reads_as_a_cause_a_user_can_act_on(exitcode, cause):
    assert cluster.death_cause(exitcode) == cause


@pytest.mark.slow
def test_a_run_on_a_client_that_is_not_dasks_default_collects_its_trials_through_that_client(tmp_path):
    """A notebook with two clients: the one given to tlsearch, and a later one, which Dask makes the default.
    The later client's event loop is kept busy for the whole run, so a run that tracked its results there
    (Dask's `as_completed` does unless given a loop) would wait forever; it must not need that loop at all."""
    import threading

    study_file = tmp_path / "study.py"
    study_file.write_text(STUDY)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as given,
        distributed.Client(given) as client,
        distributed.LocalCluster(n_workers=0, dashboard_address=None) as other,
        distributed.Client(other) as later,
    ):
        assert distributed.default_client() is later and later.loop is not client.loop
        run_over = threading.Event()
        later.loop.add_callback(run_over.wait)
        try:
            study = driver.run(load_study_file(study_file), stores=Stores(home=tmp_path), client=client, progress="off")
        finally:
            run_over.set()
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 4
