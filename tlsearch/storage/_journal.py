"""The embedded default's study store: Optuna's journal file, with batched user attributes and a queued lock."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.storages.journal._file import BaseJournalFileLock
from optuna.storages.journal._storage import JournalOperation

try:
    import fcntl
except ImportError:  # Windows: Optuna's own lock alone
    fcntl = None  # type: ignore[assignment]


class JournalStorage(optuna.storages.JournalStorage):
    """`optuna.storages.JournalStorage` plus two batched writes that append several operations in one
    locked, synced write instead of one each (a k-fold trial stores a dozen attributes, a few per fold)."""

    def set_trial_user_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> None:
        self._append(self._user_attr_logs(trial_id, attrs))

    def set_trial_intermediate_value_and_user_attrs(
        self, trial_id: int, step: int, intermediate_value: float, attrs: Mapping[str, Any]
    ) -> None:
        report = {"op_code": JournalOperation.SET_TRIAL_INTERMEDIATE_VALUE, "trial_id": trial_id, "step": step,
                  "intermediate_value": intermediate_value}
        self._append([report, *self._user_attr_logs(trial_id, attrs)])

    @staticmethod
    def _user_attr_logs(trial_id: int, attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
        # One attribute per operation: Optuna's replay takes no more.
        return [{"op_code": JournalOperation.SET_TRIAL_USER_ATTR, "trial_id": trial_id, "user_attr": {key: value}}
                for key, value in attrs.items()]

    def _append(self, logs: list[dict[str, Any]]) -> None:
        if not logs:
            return
        with self._thread_lock:
            worker_id = self._replay_result.worker_id
            self._backend.append_logs([{**log, "worker_id": worker_id} for log in logs])
            try:
                self._sync_with_backend()  # replaying our own operations raises if the trial is finished or missing
            except (KeyError, UpdateFinishedTrialError):
                self._replay_rejected()
                raise

    def _replay_rejected(self) -> None:
        """Replay the rest of a rejected batch: the replay stops at the first operation refused, and each
        following one of the batch, refused too, would otherwise raise in some later call."""
        while True:
            try:
                self._sync_with_backend()
                return
            except (KeyError, UpdateFinishedTrialError):
                continue


class QueuedJournalLock(BaseJournalFileLock):
    """Optuna's symlink lock, entered through a kernel-queued `flock` on a side file.

    Optuna's lock polls, doubling its sleep after each miss (up to 1 s): with a dozen worker processes
    appending at the same moment, the file sits unlocked while the losers sleep. Here writers queue in the
    kernel and take the symlink lock in turn, at once; the symlink lock still keeps out plain Optuna
    processes writing to the same file, and the kernel drops the queue's lock of a process that dies.
    """

    def __init__(self, file_path: str) -> None:
        self._queue_path = file_path + ".queue"
        self._symlink_lock = JournalFileSymlinkLock(file_path)
        self._held = threading.local()  # this thread's open queue file while it holds the lock

    def acquire(self) -> bool:
        fd = os.open(self._queue_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._symlink_lock.acquire()
        except BaseException:
            os.close(fd)
            raise
        self._held.fd = fd
        return True

    def release(self) -> None:
        try:
            self._symlink_lock.release()
        finally:
            os.close(self._held.fd)  # closing the file releases its flock


def open_journal(path: str) -> JournalStorage:
    """The journal study store at `path`, shared safely by the processes of one machine."""
    lock = QueuedJournalLock(path) if fcntl is not None else None
    return JournalStorage(JournalFileBackend(path, lock_obj=lock))
