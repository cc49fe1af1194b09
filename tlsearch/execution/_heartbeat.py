"""The driver's heartbeat: while trials run on the workers, their driver beats for them, so that no driver
takes them for the trials of a dead one (`retries.fail_abandoned_trials`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from optuna.storages import BaseStorage

from tlsearch._compat import optuna as compat

log = logging.getLogger(__name__)

COALESCE_SECONDS = 0.05  # a new trial's first beat waits this long for others to share its write


class Heartbeat:
    """Records a heartbeat for each trial of `trials_in_flight()` (their ids) every heartbeat interval of `storage`,
    and for each trial given to `soon` as soon as it can, on a thread of its own between `start` and `stop`; a
    storage without heartbeats gets none. A storage with `record_heartbeats(trial_ids)` (MongoStorage) gets one
    write for all the trials of a beat."""

    def __init__(self, storage: BaseStorage, trials_in_flight: Callable[[], Iterable[int]]) -> None:
        self.storage, self._trials_in_flight = storage, trials_in_flight
        self._interval = compat.heartbeat_interval(storage)
        self._stopped = threading.Event()
        self._woken = threading.Event()
        self._new: set[int] = set()  # trials started since the last beat (lock held)
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._interval:
            threading.Thread(target=self._beat_until_stopped, name="tlsearch-heartbeat", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        self._woken.set()

    def soon(self, trial_id: int) -> None:
        """Have the thread beat for a trial just started, without waiting for its write here: a trial's first
        beat comes from the server's clock at once, not after an interval from its start on this host's."""
        if not self._interval:
            return
        with self._lock:
            self._new.add(trial_id)
        self._woken.set()

    def beat(self, trial_ids: Iterable[int]) -> None:
        """Record one heartbeat for each of `trial_ids` now; a failure is logged, and the next beat retries."""
        trial_ids = sorted(set(trial_ids))
        if not trial_ids or not self._interval:
            return
        try:
            record_many = getattr(self.storage, "record_heartbeats", None)
            if record_many is not None:
                record_many(trial_ids)
            else:
                for trial_id in trial_ids:
                    self.storage.record_heartbeat(trial_id)
        except Exception as error:  # the server may be restarting; the next beat retries
            log.warning("heartbeat for trials %s failed: %s", _ids(trial_ids), error)

    def _beat_until_stopped(self) -> None:
        assert self._interval
        next_round = time.monotonic() + self._interval
        while not self._stopped.is_set():
            self._woken.wait(max(0.0, next_round - time.monotonic()))
            self._stopped.wait(COALESCE_SECONDS)  # the other trials of a wave, started at once, share the write
            self._woken.clear()
            with self._lock:
                due, self._new = self._new, set()
            if self._stopped.is_set():
                return
            if time.monotonic() >= next_round:  # an interval has passed: every trial in flight
                due |= set(self._trials_in_flight())
                next_round = time.monotonic() + self._interval
            self.beat(due)


def _ids(trial_ids: list[int]) -> str:
    shown = ", ".join(map(str, trial_ids[:5]))
    return shown + (f" and {len(trial_ids) - 5} more" if len(trial_ids) > 5 else "")
