"""What keeps a running driver safe: a lock saying which drivers of a study are alive on this host, and
Ctrl-C / SIGTERM counted instead of raised."""

from __future__ import annotations

import os
import signal
import threading

from tlsearch.stores._stores import Stores

try:
    import fcntl
except ImportError:  # Windows: no driver lock; abandoned trials of the embedded default stay RUNNING
    fcntl = None  # type: ignore[assignment]


class DriverLock:
    """Which drivers of a study are alive on this host (the embedded default has no heartbeats).

    Every live driver holds a shared `flock` on the study's lock file. One that gets it exclusively at
    start is alone: every RUNNING trial was left by a dead driver. It keeps the lock exclusive while it
    fails them (no other driver starts a trial meanwhile), then shares it. MongoDB studies use heartbeats.
    """

    def __init__(self, stores: Stores, name: str) -> None:
        self.alone = False
        self._fd = None
        if stores.is_local and fcntl is not None:
            path = stores.home / "locks" / f"{name.replace('/', '_')}.lock"
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def __enter__(self) -> DriverLock:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.alone = True
            except BlockingIOError:
                fcntl.flock(self._fd, fcntl.LOCK_SH)
        return self

    def share(self) -> None:
        """Let other drivers join (a no-op unless this one was alone)."""
        if self._fd is not None and self.alone:
            fcntl.flock(self._fd, fcntl.LOCK_SH)

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file releases its flock


class Interrupts:
    """Ctrl-C and SIGTERM while a driver runs: counted, not raised, so that no store write is cut in half.
    (Only the main thread can catch signals; elsewhere Ctrl-C stays a KeyboardInterrupt.)"""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._caught)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _caught(self, signum, frame) -> None:
        self.signum = self.signum or signum
        self.count += 1
