"""MongoStorage: an Optuna storage (with heartbeats) whose studies and trials are MongoDB documents.

Every race is settled by one of two primitives that are atomic on every server we support, with no
transactions: a single-document update whose filter states the expected old state (compare-and-set), and an
insert guarded by a unique index. Trial numbers are claimed by inserting the trial document itself at the
next number (the unique `_id` refuses a taken one), and a number is only ever tried once its predecessor
exists, so numbers are dense even when a process dies at any point. Reads go through a per-study cache
(`_cache.StudyCache`); writes go straight to the server.

Besides what the class docstring says, two more reads are answered without a round trip: `get_trial` of the
trial this thread has just reported to returns what the report left (every trial write adds 1 to the trial's
`version` and gets the old one back: the one we wrote means nobody else wrote in between), and the reads of a
sampling step (right after this thread created or took a trial, back to back, with no command from this process
in between, within a second) share one refresh. Every write is sent before its call returns, except inside a
`one_write` block, whose writes to its trial are sent together when it ends.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import threading
import time
from collections.abc import Callable, Container, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import optuna
import pymongo
from optuna.distributions import BaseDistribution, check_distribution_compatibility
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from pymongo import ReturnDocument

from tlsearch._compat import optuna as compat
from tlsearch._compat.optuna import BaseHeartbeat
from tlsearch._renamed import renamed_keywords
from tlsearch.storage import _codec as codec
from tlsearch.storage._cache import StudyCache
from tlsearch.storage._extensions import HeldWrites, TrialsSummary
from tlsearch.storage._mongo_connection import Collections
from tlsearch.storage._mongo_studies import MongoStudies

_MAX_WRITTEN = 1024  # documents of unfinished trials this process has written, kept for their next write
_SHARE_SECONDS = 1.0  # see get_all_trials

HeartbeatStaleTrialCallback = Callable[["optuna.study.Study", FrozenTrial], None]


class MongoStorage(MongoStudies, BaseStorage, BaseHeartbeat):
    """Optuna studies and trials in a MongoDB database, safe for any number of concurrent processes.

    Args:
        uri_or_client: a MongoDB URI (``mongodb://user:pass@host/?...``), or a ``pymongo.MongoClient``.
            Built from a URI, the storage can be pickled (it reconnects lazily in the new process);
            built from a client, it cannot.
        database: the database holding the ``studies``, ``trials`` and ``counters`` collections (default: the
            one the URI names, ``mongodb://host/mydb``, else ``tlsearch``; a different name is an error).
        heartbeat_interval: seconds between heartbeats of a running trial (None: no heartbeats), as in
            ``optuna.storages.RDBStorage``; heartbeats use the server's clock.
        grace_period: seconds without a heartbeat after which a running trial is stale (default: twice the
            interval); ``optuna.storages.fail_stale_trials`` then fails it.
        heartbeat_stale_trial_callback: called with (study, trial) for each stale trial failed, e.g.
            ``optuna.storages.RetryHeartbeatStaleTrialCallback()``.

    Raises:
        MongoUnavailableError: the server cannot be reached (said within about 3 seconds, for a URI; a client
            keeps its own timeouts), or a connection stayed lost for longer than 30 seconds mid-study.
        ValueError: the URI is invalid, or a heartbeat setting is not a positive number.

    What a read returns: finished trials come from this process's cache (they never change); unfinished ones
    are read afresh, except that `get_trial` of the trial this thread has just created or taken from the
    queue returns what it wrote. A study's name and directions are read once per process: a study another
    process deletes stays visible here until this process next writes to one of its trials.
    """

    @renamed_keywords(url_or_client="uri_or_client")
    def __init__(
        self,
        uri_or_client: str | pymongo.MongoClient,
        database: str | None = None,
        *,
        heartbeat_interval: float | None = None,
        grace_period: float | None = None,
        heartbeat_stale_trial_callback: HeartbeatStaleTrialCallback | None = None,
    ) -> None:
        for name, value in (("heartbeat_interval", heartbeat_interval), ("grace_period", grace_period)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"{name} must be None or a positive number of seconds, not {value!r}")
        self.heartbeat_interval = heartbeat_interval
        self.grace_period = grace_period
        self.heartbeat_stale_trial_callback = heartbeat_stale_trial_callback
        super().__init__(uri_or_client, database)
        self._collections()  # fail now, not at the first trial, if the server cannot be reached

    def _start(self, client: pymongo.MongoClient | None) -> None:
        super()._start(client)
        self._just_written = threading.local()  # see _remember_written
        self._step = threading.local()  # see get_all_trials
        self._written: dict[int, dict[str, Any]] = {}  # see _remember_written (lock held)
        self._held = HeldWrites()  # this thread's one_write block: the fields it holds
        self._tickets = itertools.count()  # one number per command this process sends (see get_all_trials)

    # Pickling: the settings travel with the URI, the cache does not.

    _SETTINGS = ("heartbeat_interval", "grace_period", "heartbeat_stale_trial_callback")

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), **{name: getattr(self, name) for name in self._SETTINGS}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in self._SETTINGS:
            setattr(self, name, state[name])
        super().__setstate__(state)

    def _retrying(self, operation: Callable[[Collections], Any]) -> Any:
        self._just_written.trial = None  # talking to the server again: see _remember_written
        self._step.shared = None  # see get_all_trials
        self._step.ticket = next(self._tickets)
        return super()._retrying(operation)

    def _remember_written(self, document: dict[str, Any]) -> None:
        """Read-your-own-write: `document` is what the server holds now for a trial this thread has just
        written (created, taken from the queue, updated). The next get_trial of this thread returns it without
        a round trip if it asks before talking to the server again: Optuna asks for the trial it has just
        created or taken, and, to tell it, for the trial it has just reported to. Its version lets the next
        write to the trial know the document after it as well (see _write_known)."""
        trial_id = int(document["_id"])
        with self._lock:
            self._written.pop(trial_id, None)
            if len(self._written) >= _MAX_WRITTEN:
                del self._written[next(iter(self._written))]
            self._written[trial_id] = document
        self._just_written.trial = trial_id

    def _forget_written(self, trial_id: int) -> None:
        with self._lock:
            self._written.pop(trial_id, None)

    def _take_written(self, trial_id: int) -> FrozenTrial | None:
        taken = getattr(self._just_written, "trial", None)
        self._just_written.trial = None
        if taken != trial_id:
            return None
        with self._lock:
            document = self._written.get(trial_id)
        return codec.decode_trial(document) if document is not None else None

    # Trials: creation

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        with self._lock:
            cache = self._study(study_id)
            if not cache.loaded:
                self._refresh(cache)
            number = len(cache.trials)  # the next number after those known: its predecessor exists
        if template_trial is not None:
            for name, distribution in template_trial.distributions.items():
                check_distribution_compatibility(self._study_distribution(cache, name, distribution), distribution)
        created_by = self._token()
        now = datetime.now()
        taken = 0
        while True:
            document = codec.trial_document(study_id, number, template_trial, now, created_by)
            if self._insert("trials", document):
                break
            # Taken by another process: try the next (whose predecessor now exists, so numbers stay dense),
            # and after a few misses catch up on all the numbers taken meanwhile.
            taken += 1
            number += 1
            if taken % 3 == 0:
                with self._lock:
                    self._refresh(cache)
                    number = max(number, len(cache.trials))
        trial = codec.decode_trial(document)
        with self._lock:
            cache.add(trial, document)
        if not trial.state.is_finished():
            self._remember_written(document)
        if trial.state == TrialState.RUNNING:
            self._start_step(study_id)
        return compat.trial_id(trial)

    # Trials: writes (compare-and-set on the state: a finished trial never changes)

    def set_trial_param(
        self, trial_id: int, param_name: str, param_value_internal: float, distribution: BaseDistribution
    ) -> None:
        study_id, _ = codec.study_id_and_number(trial_id)
        with self._lock:
            cache = self._study_or_missing_trial(study_id, trial_id)
        try:
            check_distribution_compatibility(self._study_distribution(cache, param_name, distribution), distribution)
        except ValueError:
            self._check_updatable(trial_id)  # a finished or missing trial says so first
            raise
        field = f"params.{codec.encode_name(param_name)}"
        self._update_unfinished(trial_id, {field: codec.encode_param(param_value_internal, distribution)})

    def set_trial_intermediate_value(self, trial_id: int, step: int, intermediate_value: float) -> None:
        self._update_unfinished(trial_id, {f"intermediate_values.{int(step)}": float(intermediate_value)})

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self.set_trial_user_attrs(trial_id, {key: value})

    def set_trial_user_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> None:
        """Set several user attributes of an unfinished trial in one write (an extension of BaseStorage:
        a trial's k-fold results are a dozen attributes)."""
        fields = self._user_attr_fields(attrs)
        if fields:
            self._update_unfinished(trial_id, fields)
        else:
            self._check_updatable(trial_id)  # nothing to write, but the same errors as a write

    @staticmethod
    def _user_attr_fields(attrs: Mapping[str, Any]) -> dict[str, Any]:
        return {f"user_attrs.{codec.encode_name(key)}": codec.encode_value(value) for key, value in attrs.items()}

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._update_unfinished(trial_id, {f"system_attrs.{codec.encode_name(key)}": codec.encode_value(value)})

    def one_write(self, trial_id: int) -> AbstractContextManager[None]:
        """This thread's writes to the unfinished trial `trial_id` inside the block, sent as one update when it
        ends (`tlsearch.storage._extensions.BatchedWrites`). A parameter's distribution is checked as it comes."""
        return self._held.block(trial_id, {}, functools.partial(self._update_unfinished, trial_id))

    def _update_unfinished(self, trial_id: int, fields: dict[str, Any]) -> None:
        """`$set` fields of a trial, provided it is unfinished: compare-and-set on its state (held instead, inside
        this thread's `one_write` block for the trial).

        A repeat after a lost reply rewrites the same values, so retrying is safe; the filter matching is
        what counts, as rewriting a value already there modifies nothing."""
        if self._held.holds(trial_id):
            self._held.writes.update(fields)
            return
        update = {"$set": fields, "$inc": {codec.VERSION: 1}}
        with self._lock:
            known = self._written.get(trial_id)
        expected = known["state"] if known is not None else TrialState.RUNNING.name
        while True:
            if known is not None:
                if self._write_known(trial_id, known, expected, update, fields):
                    return
                known = None
            elif self._retrying(
                lambda c: c.trials.update_one({"_id": trial_id, "state": expected}, update)
            ).matched_count:
                return
            expected = self._check_updatable(trial_id).name

    def _write_known(
        self, trial_id: int, known: dict[str, Any], expected: str, update: dict[str, Any], fields: dict[str, Any]
    ) -> bool:
        """The update of a trial whose document this process knows; False if the state filter did not match.

        The old version comes back (BEFORE, projected: a few bytes): if it is the one we know, nobody else wrote
        in between, and the document now is ours with `fields` applied."""
        before = self._retrying(
            lambda c: c.trials.find_one_and_update(
                {"_id": trial_id, "state": expected},
                update,
                projection={codec.VERSION: True, "_id": False},
                return_document=ReturnDocument.BEFORE,
            )
        )
        if before is None:
            self._forget_written(trial_id)
            return False
        if before.get(codec.VERSION, 0) == known.get(codec.VERSION, 0):
            after = codec.apply_set(known, fields)
            after[codec.VERSION] = known.get(codec.VERSION, 0) + 1
            self._remember_written(after)
        else:
            self._forget_written(trial_id)
        return True

    def _check_updatable(self, trial_id: int) -> TrialState:
        """The trial's state; KeyError if it does not exist, UpdateFinishedTrialError if it is finished."""
        document = self._retrying(lambda c: c.trials.find_one({"_id": trial_id}, {"state": 1, "number": 1}))
        if document is None:
            raise KeyError(f"No trial with trial_id {trial_id} exists.")
        state = TrialState[document["state"]]
        if state.is_finished():
            raise UpdateFinishedTrialError(f"Trial#{document['number']} has already finished and can not be updated.")
        return state

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Sequence[float] | None = None) -> bool:
        token = self._token()
        now = datetime.now()
        fields: dict[str, Any] = {"state": state.name, "state_changed_by": token}
        if values is not None:
            fields["values"] = [float(value) for value in values]
        if state == TrialState.RUNNING:
            fields.update(codec.datetime_fields("datetime_start", now))
        if state.is_finished():
            fields.update(codec.datetime_fields("datetime_complete", now))
        update = {"$set": fields, "$inc": {codec.VERSION: 1}}
        # WAITING -> RUNNING is how a worker takes an enqueued trial; anything else starts from RUNNING.
        expected = TrialState.WAITING if state == TrialState.RUNNING else TrialState.RUNNING
        with self._lock:
            known = self._written.get(trial_id)
        while True:
            if state == TrialState.RUNNING and expected == TrialState.RUNNING:
                return False
            # Compare-and-set: exactly one caller moves the trial out of `expected`. BEFORE: the old
            # document (only its version when we know the document), to which we apply our own fields.
            if known is not None and known["state"] == expected.name:
                before = self._retrying(
                    lambda c: c.trials.find_one_and_update(
                        {"_id": trial_id, "state": expected.name},
                        update,
                        projection={codec.VERSION: True, "_id": False},
                        return_document=ReturnDocument.BEFORE,
                    )
                )
                if before is not None and before.get(codec.VERSION, 0) != known.get(codec.VERSION, 0):
                    before = self._retrying(lambda c: c.trials.find_one({"_id": trial_id}))  # ours, then others'
                    after = before
                elif before is not None:
                    after = {**codec.apply_set(known, fields), codec.VERSION: known.get(codec.VERSION, 0) + 1}
            else:
                before = self._retrying(
                    lambda c: c.trials.find_one_and_update(
                        {"_id": trial_id, "state": expected.name}, update, return_document=ReturnDocument.BEFORE
                    )
                )
                if before is not None:
                    after = {**codec.apply_set(before, fields), codec.VERSION: before.get(codec.VERSION, 0) + 1}
            if before is not None:
                self._settled(state, after)
                return True
            known = None
            current = self._retrying(lambda c: c.trials.find_one({"_id": trial_id}))
            if current is None:
                raise KeyError(f"No trial with trial_id {trial_id} exists.")
            if current.get("state_changed_by") == token:  # our attempt landed, its reply was lost
                self._settled(state, current)
                return True
            expected = TrialState[current["state"]]
            if expected.is_finished():
                self._forget_written(trial_id)
                raise UpdateFinishedTrialError(
                    f"Trial#{current['number']} has already finished and can not be updated."
                )

    def _settled(self, state: TrialState, document: dict[str, Any]) -> None:
        """Take in the document of a trial whose state this thread has just changed."""
        if state.is_finished():
            self._forget_written(int(document["_id"]))
            self._remember_finished(document)
        else:  # a worker took it from the queue: Trial() reads it next
            self._remember_written(document)
            self._start_step(int(document["study_id"]))

    def _remember_finished(self, document: dict[str, Any]) -> None:
        with self._lock:
            cache = self._studies.get(int(document["study_id"]))
            if cache is not None:
                cache.merge([document], codec.decode_trial)

    # Trials: reads

    def _study_or_missing_trial(self, study_id: int, trial_id: int) -> StudyCache:
        try:
            return self._study(study_id)
        except KeyError:
            raise KeyError(f"No trial with trial_id {trial_id} exists.") from None

    def get_trial(self, trial_id: int) -> FrozenTrial:
        trial = self._take_written(trial_id)
        if trial is not None:
            return trial
        study_id, number = codec.study_id_and_number(trial_id)
        with self._lock:
            cache = self._studies.get(study_id)
            trial = cache.finished_trial(number) if cache is not None else None
        if trial is not None:
            return trial
        document = self._retrying(lambda c: c.trials.find_one({"_id": trial_id}))
        if document is None:
            raise KeyError(f"No trial with trial_id {trial_id} exists.")
        trial = codec.decode_trial(document)
        with self._lock:
            if cache is not None:
                cache.add(trial, document)
            if trial_id in self._written:  # newer than the one remembered: the next write knows what it changes
                self._written[trial_id] = document
        return trial

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        with self._lock:
            cache = self._study(study_id)
            if cache.knows(trial_number):
                return codec.trial_id_of(study_id, trial_number)
        missing = KeyError(f"No trial with trial number {trial_number} exists in study with study_id {study_id}.")
        try:
            trial_id = codec.trial_id_of(study_id, trial_number)
        except ValueError:
            raise missing from None
        if self._retrying(lambda c: c.trials.find_one({"_id": trial_id}, {"_id": 1})) is None:
            raise missing
        return trial_id

    def get_trial_number_from_id(self, trial_id: int) -> int:
        study_id, number = codec.study_id_and_number(trial_id)
        with self._lock:
            cache = self._studies.get(study_id)
            if cache is not None and cache.knows(number):
                return number
        if self._retrying(lambda c: c.trials.find_one({"_id": trial_id}, {"_id": 1})) is None:
            raise KeyError(f"No trial with trial_id {trial_id} exists.")
        return number

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        # Read afresh, except within a sampling step (see _start_step): a sampler reads the study several times
        # while it samples a new trial (TPE twice, before the trial's first write). Those reads, when back to
        # back in one thread with no command from this process in between, and within _SHARE_SECONDS of the
        # first, share the first one's refresh. A read of the WAITING trials alone (Optuna's `ask` looks for
        # enqueued trials first) reads back no RUNNING trial: none can be WAITING again.
        with self._lock:
            cache = self._study(study_id)
            if not self._shares_refresh(study_id):
                if _waiting_only(states) and cache.loaded:
                    self._refresh(cache, waiting_only=True)
                else:
                    armed = getattr(self._step, "armed", None) == study_id
                    self._step.armed = None
                    self._refresh(cache)
                    if armed:  # the first read of a sampling step: the next ones may share it
                        self._step.shared = (study_id, self._step.ticket, time.monotonic() + _SHARE_SECONDS)
            trials = cache.view(states)
        return copy.deepcopy(trials) if deepcopy else trials

    def _shares_refresh(self, study_id: int) -> bool:
        """Whether this thread's last refresh of the study may serve this call too: it began the sampling step
        and nothing (no command from any thread of this process, no time) has passed since."""
        shared = getattr(self._step, "shared", None)
        if shared is None or shared[0] != study_id or time.monotonic() > shared[2]:
            return False
        ticket = next(self._tickets)  # the next one after this thread's last command: nobody sent one since
        if ticket != shared[1] + 1:
            self._step.shared = None
            return False
        self._step.shared = (study_id, ticket, shared[2])
        return True

    def _start_step(self, study_id: int) -> None:
        """This thread has just created or taken a trial of the study: a sampler is about to sample it."""
        self._step.armed = study_id

    def _refresh(self, cache: StudyCache, waiting_only: bool = False) -> None:
        """Read what changed in the study since the last call: its unfinished trials (`waiting_only`: its WAITING
        ones) and new ones (lock held).

        This process's own writes are taken in from their documents first, so that reading the same document
        back costs no decoding."""
        if not cache.loaded:
            documents = self._retrying(
                lambda c: list(c.trials.find({"study_id": cache.study_id}).sort("number", 1).batch_size(1000))
            )
            cache.merge(documents, codec.decode_trial)
            cache.loaded = True
            return
        unfinished, window = cache.ids_to_refresh(waiting_only)
        written = [self._written[trial_id] for trial_id in unfinished if trial_id in self._written]
        if written:
            cache.merge(written, codec.decode_trial)
        ids = unfinished + list(window)
        while True:
            documents = self._retrying(lambda c: list(c.trials.find({"_id": {"$in": ids}})))
            if not cache.merge(documents, codec.decode_trial, window):
                return
            _, window = cache.ids_to_refresh()  # a full window: more new trials may follow
            ids = list(window)

    # Summaries the server computes: `tlsearch status` and `best` on a large study load no trial

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        best = self._best_document(study_id)
        if best is None:
            raise ValueError("No trials are completed yet.")
        return self.get_trial(int(best["_id"]))

    def _best_document(self, study_id: int) -> dict[str, Any] | None:
        """The `_id` and first `value` of the complete trial Optuna's `get_best_trial` picks (the lowest-numbered of
        the best), None if there is none; RuntimeError for several objectives, as Optuna's."""
        directions = self.get_study_directions(study_id)
        complete = {"study_id": study_id, "state": TrialState.COMPLETE.name}
        if len(directions) > 1:
            if self._retrying(lambda c: c.trials.find_one(complete, {"_id": 1})) is None:
                return None
            raise RuntimeError("Best trial can be obtained only for single-objective optimization.")
        order = -1 if directions[0] == StudyDirection.MAXIMIZE else 1
        # An aggregation, not find().sort("values.0"): not every server we support sorts by an array element.
        pipeline = [
            {"$match": complete},
            {"$project": {"value": {"$arrayElemAt": ["$values", 0]}, "number": 1}},
            {"$sort": {"value": order, "number": 1}},
            {"$limit": 1},
        ]
        return next(iter(self._retrying(lambda c: list(c.trials.aggregate(pipeline)))), None)

    def summarize_trials(self, study_id: int) -> TrialsSummary:
        """The study's trials summed up by the server, none loaded (what `tlsearch status` and `best` read):
        counts by state, first start, last activity and, for one objective, the best value, the lowest-numbered
        trial reaching it and how many do. One aggregation, and two more reads for the best."""
        groups = self._retrying(
            lambda c: list(
                c.trials.aggregate(
                    [
                        {"$match": {"study_id": study_id}},
                        {
                            "$group": {
                                "_id": "$state",
                                "n": {"$sum": 1},
                                "first_start": {"$min": "$datetime_start"},
                                "last_start": {"$max": "$datetime_start"},
                                "last_complete": {"$max": "$datetime_complete"},
                            }
                        },
                    ]
                )
            )
        )
        moments = [codec.decode_datetime(g[key]) for g in groups for key in ("last_start", "last_complete") if g[key]]
        starts = [codec.decode_datetime(g["first_start"]) for g in groups if g["first_start"]]
        summary = TrialsSummary(
            counts={str(g["_id"]): int(g["n"]) for g in groups},
            first_start=min(starts, default=None),
            last_activity=max(moments, default=None),
        )
        if len(self.get_study_directions(study_id)) > 1:
            return summary
        best = self._best_document(study_id)
        if best is None:
            return summary
        value = float(best["value"])
        ties = self._retrying(
            lambda c: c.trials.count_documents(
                {"study_id": study_id, "state": TrialState.COMPLETE.name, "values.0": value}
            )
        )
        return dataclasses.replace(
            summary, best_value=value, best_number=codec.study_id_and_number(best["_id"])[1], best_ties=ties
        )

    # Heartbeats (on the server's clock)

    def record_heartbeat(self, trial_id: int) -> None:
        self.record_heartbeats([trial_id])

    def record_heartbeats(self, trial_ids: Sequence[int]) -> None:
        """A heartbeat for each of the trials still RUNNING among `trial_ids`, in one write."""
        self._retrying(
            lambda c: c.trials.update_many(
                {"_id": {"$in": list(trial_ids)}, "state": TrialState.RUNNING.name},
                {"$currentDate": {"heartbeat": True}},
            )
        )

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        """RUNNING trials whose last sign of life (their heartbeat, or their start before the first one) is older
        than the grace period on the server's clock. A sign of life dated in the future (a skewed clock, a
        forged value) is first moved back to the server's present, so it ages like any other."""
        assert self.heartbeat_interval is not None
        grace_period = self.grace_period if self.grace_period is not None else 2 * self.heartbeat_interval
        running = {"study_id": study_id, "state": TrialState.RUNNING.name}
        last_alive = {"$ifNull": ["$heartbeat", "$datetime_start"]}
        future = {**running, "$expr": {"$gt": [last_alive, "$$NOW"]}}
        stale = {**running, "$expr": {"$lt": [last_alive, {"$subtract": ["$$NOW", int(grace_period * 1000)]}]}}

        def find(c: Collections) -> list[dict[str, Any]]:
            c.trials.update_many(future, {"$currentDate": {"heartbeat": True}})
            return list(c.trials.find(stale, {"_id": 1}))

        return sorted(int(document["_id"]) for document in self._retrying(find))

    def get_heartbeat_interval(self) -> int | None:
        return self.heartbeat_interval  # type: ignore[return-value]

    def get_heartbeat_stale_trial_callback(self) -> HeartbeatStaleTrialCallback | None:
        return self.heartbeat_stale_trial_callback


def _waiting_only(states: Container[TrialState] | None) -> bool:
    """Whether `states` asks for WAITING trials alone."""
    try:
        return states is not None and set(states) == {TrialState.WAITING}  # type: ignore[call-overload]
    except TypeError:  # a Container that cannot be iterated
        return False
