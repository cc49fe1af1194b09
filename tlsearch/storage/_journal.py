"""The embedded default's study store: Optuna's journal file, with batched user attributes and a queued lock."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, distribution_to_json
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages.journal import BaseJournalBackend, JournalFileSymlinkLock

from tlsearch._compat import optuna as compat
from tlsearch._compat.optuna import BaseJournalFileLock, JournalOperation
from tlsearch.errors import JournalDamagedError
from tlsearch.storage._extensions import HeldWrites
from tlsearch.storage._slots import claim_folds_in_file, claim_in_file, count_in_file, release_in_file

log = logging.getLogger(__name__)

try:
    import fcntl
except ImportError:  # Windows: Optuna's own lock alone
    fcntl = None  # type: ignore[assignment]


class JournalStorage(optuna.storages.JournalStorage):
    """`optuna.storages.JournalStorage` plus tlsearch's extensions (`tlsearch.storage._extensions`): batched
    writes, `set_trial_user_attrs` and `one_write`, that append several operations in one locked, synced write
    instead of one each (a k-fold trial stores a dozen attributes, a few per fold), and trial slots and claimed
    folds in counter files beside the journal file."""

    def __init__(self, backend: CrashTolerantJournalFile) -> None:
        super().__init__(backend)
        self.file_path = backend.file_path
        self._batched = compat.can_batch_journal_writes(self)  # fixed by the installed Optuna: asked once
        self._held = HeldWrites()  # this thread's one_write block: the operations it holds

    def set_trial_user_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> None:
        if self._batched:
            self._append(self._user_attr_logs(trial_id, attrs))
        else:
            for key, value in attrs.items():
                self.set_trial_user_attr(trial_id, key, value)

    def one_write(self, trial_id: int) -> AbstractContextManager[None]:
        """This thread's parameters, intermediate values and user attributes of trial `trial_id` set inside the
        block, appended in one write when it ends (`tlsearch.storage._extensions.BatchedWrites`); written one by
        one where the installed Optuna cannot batch."""
        return self._held.block(trial_id, [], self._append) if self._batched else nullcontext()

    def set_trial_param(
        self, trial_id: int, param_name: str, param_value_internal: float, distribution: BaseDistribution
    ) -> None:
        held = self._hold(
            trial_id,
            "SET_TRIAL_PARAM",
            param_name=param_name,
            param_value_internal=param_value_internal,
            distribution=distribution_to_json(distribution),
        )
        if not held:
            super().set_trial_param(trial_id, param_name, param_value_internal, distribution)

    def set_trial_intermediate_value(self, trial_id: int, step: int, intermediate_value: float) -> None:
        if not self._hold(trial_id, "SET_TRIAL_INTERMEDIATE_VALUE", step=step, intermediate_value=intermediate_value):
            super().set_trial_intermediate_value(trial_id, step, intermediate_value)

    def _hold(self, trial_id: int, operation: str, **fields: Any) -> bool:
        """Keep the journal operation `operation` (a `JournalOperation` name) for the end of this thread's
        one_write block, if the block is `trial_id`'s; whether it was kept."""
        if not self._held.holds(trial_id):
            return False
        self._held.writes.append({"op_code": getattr(JournalOperation, operation), "trial_id": trial_id, **fields})
        return True

    def claim_trial_slot(self, study_id: int, limit: int, claimed: Callable[[], int]) -> int | None:
        return claim_in_file(self._slot_counter_path(study_id), limit, claimed)

    def release_trial_slot(self, study_id: int) -> None:
        release_in_file(self._slot_counter_path(study_id))

    def _slot_counter_path(self, study_id: int) -> str:
        # A counter file under an exclusive flock beside the journal file (tlsearch.storage._slots).
        return f"{self.file_path}.slots-{study_id}"

    def claim_folds(self, study_id: int, n: int, limit: int, used: Callable[[], int]) -> int | None:
        return claim_folds_in_file(self._fold_counter_path(study_id), n, limit, used)

    def release_folds(self, study_id: int, n: int) -> None:
        release_in_file(self._fold_counter_path(study_id), n, "fold counter")

    def folds_claimed(self, study_id: int) -> int | None:
        return count_in_file(self._fold_counter_path(study_id))

    def _fold_counter_path(self, study_id: int) -> str:
        return f"{self.file_path}.folds-{study_id}"

    @staticmethod
    def _user_attr_logs(trial_id: int, attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
        # One attribute per operation: Optuna's replay takes no more.
        return [
            {"op_code": JournalOperation.SET_TRIAL_USER_ATTR, "trial_id": trial_id, "user_attr": {key: value}}
            for key, value in attrs.items()
        ]

    def _append(self, logs: list[dict[str, Any]]) -> None:
        if not logs:
            return
        if self._held.holds(logs[0]["trial_id"]):
            self._held.writes.extend(logs)
            return
        try:
            # Replaying them raises if the trial is finished or missing, or a parameter's distribution clashes.
            compat.append_journal_operations(self, logs)
        except (KeyError, UpdateFinishedTrialError, ValueError):
            self._replay_rejected(len(logs))
            raise

    def _replay_rejected(self, n_operations: int) -> None:
        """Replay the rest of a rejected batch of `n_operations`: each replay stops at the first operation it
        refuses, having counted it as read, and each following one of the batch, refused too, would otherwise
        raise in some later call. At most one replay per operation: one that still refuses after that is not
        moving past what it refused, and raises."""
        for _ in range(n_operations):
            try:
                compat.replay_journal(self)
                return
            except (KeyError, UpdateFinishedTrialError, ValueError):
                continue
        compat.replay_journal(self)


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

    def __getstate__(self) -> dict[str, Any]:
        # A copy in another process holds nothing yet: the thread-local state stays behind.
        return {name: value for name, value in self.__dict__.items() if name != "_held"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._held = threading.local()

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


@contextmanager
def _locked(lock: BaseJournalFileLock) -> Iterator[None]:
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


class CrashTolerantJournalFile(BaseJournalBackend):
    """Optuna's journal file format (one JSON operation a line, as `JournalFileBackend` writes it), surviving a
    writer killed mid-append.

    A cut-off last line (no newline) is skipped, with a warning if it stays cut off while the lock is held (a
    writer still writing it holds the lock), and the next append cuts it off the file
    before writing (under the file lock), so no later operation is glued to it. A damaged complete line
    raises `JournalDamagedError` naming the file and the line number. Plain Optuna reads the same file.
    """

    def __init__(self, file_path: str, lock_obj: BaseJournalFileLock | None = None) -> None:
        self.file_path = file_path
        self._lock = lock_obj or JournalFileSymlinkLock(file_path)
        open(file_path, "ab").close()
        self._log_number_offset: dict[int, int] = {0: 0}  # byte offset of each line read so far

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        with open(self.file_path, "rb") as f:
            offsets = self._log_number_offset
            # Usually a line already read: a scan of every offset on every sync grew with the journal.
            log_number = (
                log_number_from if log_number_from in offsets else max(n for n in offsets if n <= log_number_from)
            )
            f.seek(offsets[log_number])
            for line in f:
                if not line.endswith(b"\n"):  # being written now, or left by a writer that died: read no further
                    if self._left_by_a_dead_writer(self._log_number_offset[log_number]):
                        log.warning(
                            "journal file %s: ignoring a cut-off last line (a process stopped while writing "
                            "it); the next write removes it",
                            self.file_path,
                        )
                    return
                self._log_number_offset[log_number + 1] = self._log_number_offset[log_number] + len(line)
                if log_number >= log_number_from:
                    yield self._decode(line, log_number)
                log_number += 1

    def _left_by_a_dead_writer(self, offset: int) -> bool:
        """Whether the line at byte `offset` is still unfinished while we hold the lock every append holds: then
        no writer is writing it."""
        with _locked(self._lock), open(self.file_path, "rb") as f:
            f.seek(offset)
            line = f.readline()
        return bool(line) and not line.endswith(b"\n")

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        with _locked(self._lock):
            self._cut_partial_last_line()
            text = "".join(json.dumps(entry, separators=(",", ":")) + "\n" for entry in logs)
            with open(self.file_path, "ab") as f:
                f.write(text.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())

    def _decode(self, line: bytes, log_number: int) -> dict[str, Any]:
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a value nested deeper than Python's stack
            entry = None
        if not isinstance(entry, dict) or "op_code" not in entry:
            raise JournalDamagedError(
                f"journal file {self.file_path} is damaged at line {log_number + 1} ({line[:60]!r}): restore it "
                "from a backup, or delete that line to lose the operation it held"
            )
        return entry

    def _cut_partial_last_line(self) -> None:
        with open(self.file_path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            keep = size
            while keep > 0:  # back to the end of the last complete line
                start = max(0, keep - 65536)
                f.seek(start)
                block = f.read(keep - start)
                newline = block.rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                keep = start
            f.truncate(keep)
            log.warning("journal file %s: removed a cut-off last line of %d bytes", self.file_path, size - keep)


def open_journal(path: str) -> JournalStorage:
    """The journal study store at `path`, shared safely by the processes of one machine."""
    lock = QueuedJournalLock(path) if fcntl is not None else None
    return JournalStorage(CrashTolerantJournalFile(path, lock_obj=lock))
