"""A throwaway single-node Slurm (munged + slurmctld + slurmd) in a temporary folder, for the Slurm recipe's test.

It needs Debian's `slurmctld`, `slurmd`, `slurm-client` and `munge` (`.ci/setup` installs them where it runs as
root) and root, as Slurm's daemons do. Everything it writes stays under its folder; its daemons listen on
127.0.0.1 only and stop with it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch")


def missing() -> str | None:
    """Why a single-node Slurm cannot start on this machine, or None."""
    absent = [name for name in DAEMONS if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists()]
    if absent:
        return f"Slurm is not installed here ({', '.join(absent)} missing; Debian: slurmctld slurmd slurm-client munge)"
    if os.geteuid() != 0:
        return "a single-node Slurm needs root (its daemons switch users)"
    return None


class SingleNodeSlurm:
    """`with SingleNodeSlurm(folder) as conf:` a running Slurm whose config file is `conf` (set SLURM_CONF)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.conf = self.folder / "slurm.conf"
        self._pid_files: list[Path] = []

    def __enter__(self) -> Path:
        for sub in ("state", "spool", "log"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        self._start_munge()
        self.conf.write_text(self._config())
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([_binary(daemon), "-f", str(self.conf)], env=env, check=True, capture_output=True)
        self._wait_until_idle(env)
        return self.conf

    def __exit__(self, *exc) -> None:
        for pid_file in reversed(self._pid_files):
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
            except (OSError, ValueError, IndexError):
                pass

    def _start_munge(self) -> None:
        key = self.folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        pid_file = self.folder / "munged.pid"
        subprocess.run(
            [
                _binary("munged"),
                "--force",
                f"--key-file={key}",
                f"--socket={self._munge_socket}",
                f"--pid-file={pid_file}",
                f"--log-file={self.folder / 'log' / 'munged.log'}",
                f"--seed-file={self.folder / 'munged.seed'}",
            ],
            check=True,
            capture_output=True,
        )
        self._pid_files.append(pid_file)

    @property
    def _munge_socket(self) -> Path:
        return self.folder / "munge.socket"

    def _config(self) -> str:
        d, host = self.folder, socket.gethostname()
        self._pid_files += [d / "slurmctld.pid", d / "slurmd.pid"]
        return "\n".join(
            [
                "ClusterName=tlsearch-test",
                f"SlurmctldHost={host}(127.0.0.1)",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CryptoType=crypto/munge",
                f"AuthInfo=socket={self._munge_socket}",
                f"StateSaveLocation={d / 'state'}",
                f"SlurmdSpoolDir={d / 'spool'}",
                f"SlurmctldPidFile={d / 'slurmctld.pid'}",
                f"SlurmdPidFile={d / 'slurmd.pid'}",
                f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={d / 'log' / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "MpiDefault=none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "ReturnToService=2",
                f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} RealMemory={_memory_mb()} State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
                "",
            ]
        )

    def _wait_until_idle(self, env: dict, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            if state.stdout.strip() in ("idle", "mix", "alloc"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the single-node Slurm did not come up in {timeout:g} s; logs in {self.folder / 'log'}")


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _memory_mb() -> int:
    """The node's memory for Slurm (jobs that ask for memory, as dask-jobqueue's do, need it declared)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 - 512


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
