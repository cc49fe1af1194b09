"""The driver's heartbeat: while trials run on the workers, their driver beats for them, so that no driver
takes them for the trials of a dead one (`retries.fail_abandoned_trials`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from optuna.storages import BaseStorage

from tlsearch._compat import optuna as compat

log = logging.getLogger(__name__)


class Heartbeat:
    """Records a heartbeat for each trial of `trials_in_flight()` (their ids, each once) every heartbeat interval of
    `storage`, on a thread of its own between `start` and `stop`; a storage without heartbeats gets none."""

    def __init__(self, storage: BaseStorage, trials_in_flight: Callable[[], Iterable[int]]) -> None:
        self.storage, self._trials_in_flight = storage, trials_in_flight
        self._stopped = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._beat_until_stopped, name="tlsearch-heartbeat", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def beat(self, trial_id: int) -> None:
        """Record one heartbeat for `trial_id` now; a failure is logged, and the next beat retries."""
        if not compat.heartbeat_interval(self.storage):
            return
        try:
            self.storage.record_heartbeat(trial_id)
        except Exception as error:  # the server may be restarting; the next beat retries
            log.warning("heartbeat for trial %s failed: %s", trial_id, error)

    def _beat_until_stopped(self) -> None:
        interval = compat.heartbeat_interval(self.storage)
        while interval and not self._stopped.wait(interval):
            for trial_id in self._trials_in_flight():
                self.beat(trial_id)
