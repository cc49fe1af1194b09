"""The study half of `MongoStorage`: study documents (names, directions, attributes, parameter
distributions, the trial-slot and fold counters) and the per-process cache of each study (`_cache.StudyCache`).

Study ids come from a counter document; a study's name is unique by index. Trials are `MongoStorage`'s own.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import pymongo
from optuna.distributions import BaseDistribution
from optuna.exceptions import DuplicatedStudyError
from optuna.study import StudyDirection
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from tlsearch._compat.optuna import DEFAULT_STUDY_NAME_PREFIX, FrozenStudy
from tlsearch.errors import SlotCounterError
from tlsearch.storage import _codec as codec
from tlsearch.storage._cache import StudyCache
from tlsearch.storage._mongo_connection import Collections, MongoConnection

_logger = logging.getLogger(__name__)

_STUDY_ID_COUNTER = "study_id"
_SLOTS = "trial_slots"  # taken trial slots of a study with a budget (tlsearch drivers)
_FOLDS = "folds_claimed"  # folds trained or claimed by running trials (tlsearch drivers)


class MongoStudies(MongoConnection):
    """Optuna's study calls on MongoDB, and the cache of the studies this process has read."""

    def _start(self, client: pymongo.MongoClient | None) -> None:
        super()._start(client)
        self._studies: dict[int, StudyCache] = {}
        self._slot_counters: set[int] = set()  # studies whose trial-slot counter this process knows exists
        self._fold_counters: set[int] = set()  # studies whose fold counter this process knows exists

    # Studies

    def create_new_study(self, directions: Sequence[StudyDirection], study_name: str | None = None) -> int:
        if study_name is None:
            study_name = DEFAULT_STUDY_NAME_PREFIX + secrets.token_hex(16)
        study_id = self._next_study_id()
        document = codec.study_document(study_id, study_name, list(directions), self._token())
        if not self._insert("studies", document):
            raise DuplicatedStudyError(f"Another study with name '{study_name}' already exists.")
        with self._lock:
            cache = self._remember_study(document)
            cache.loaded = True  # a new study has no trials to read
        _logger.info("A new study created in MongoDB with name: %s", study_name)
        return study_id

    def _next_study_id(self) -> int:
        # $inc with ReturnDocument.BEFORE: the old value is ours alone. A lost reply wastes an id, no more.
        def increment(collections: Collections) -> int | None:
            try:
                before = collections.counters.find_one_and_update(
                    {"_id": _STUDY_ID_COUNTER},
                    {"$inc": {"next": 1}},
                    upsert=True,
                    return_document=ReturnDocument.BEFORE,
                )
            except DuplicateKeyError:  # two first-ever upserts raced; the counter now exists
                return None
            return int(before["next"]) if before else 0

        while True:
            study_id = self._retrying(increment)
            if study_id is not None:
                return study_id

    def _remember_study(self, document: dict[str, Any]) -> StudyCache:
        cache = StudyCache(int(document["_id"]), document["name"], codec.decode_directions(document))
        for field, distribution in document.get("param_distributions", {}).items():
            cache.param_distributions[codec.decode_name(field)] = codec.decode_distribution(distribution)
        self._studies[cache.study_id] = cache
        return cache

    def _study(self, study_id: int) -> StudyCache:
        """The cache of a study, reading the study once per process (lock held); KeyError if it does not exist."""
        cache = self._studies.get(study_id)
        if cache is None:
            projection = {"name": 1, "directions": 1, "param_distributions": 1}
            document = self._retrying(lambda c: c.studies.find_one({"_id": study_id}, projection))
            if document is None:
                raise KeyError(f"No study with study_id {study_id} exists.")
            cache = self._remember_study(document)
        return cache

    def delete_study(self, study_id: int) -> None:
        with self._lock:
            self._studies.pop(study_id, None)
        attempts = 0

        def delete(collections: Collections) -> int:
            nonlocal attempts
            attempts += 1
            return collections.studies.delete_one({"_id": study_id}).deleted_count

        # A study deleted by a lost first attempt is not missing.
        if not self._retrying(delete) and attempts == 1:
            raise KeyError(f"No study with study_id {study_id} exists.")
        self._retrying(lambda c: c.trials.delete_many({"study_id": study_id}))

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self._set_study_field(study_id, f"user_attrs.{codec.encode_name(key)}", codec.encode_value(value))

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self._set_study_field(study_id, f"system_attrs.{codec.encode_name(key)}", codec.encode_value(value))

    def _set_study_field(self, study_id: int, field: str, value: Any) -> None:
        result = self._retrying(lambda c: c.studies.update_one({"_id": study_id}, {"$set": {field: value}}))
        if not result.matched_count:
            raise KeyError(f"No study with study_id {study_id} exists.")

    def get_study_id_from_name(self, study_name: str) -> int:
        document = self._retrying(lambda c: c.studies.find_one({"name": study_name}, {"_id": 1}))
        if document is None:
            raise KeyError(f"No such study {study_name}.")
        return int(document["_id"])

    def get_study_name_from_id(self, study_id: int) -> str:
        with self._lock:
            return self._study(study_id).name

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        with self._lock:
            return list(self._study(study_id).directions)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._study_attrs(study_id, "user_attrs")

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._study_attrs(study_id, "system_attrs")

    def _study_attrs(self, study_id: int, field: str) -> dict[str, Any]:
        document = self._retrying(lambda c: c.studies.find_one({"_id": study_id}, {field: 1}))
        if document is None:
            raise KeyError(f"No study with study_id {study_id} exists.")
        return codec.decode_attrs(document.get(field, {}))

    def get_all_studies(self) -> list[FrozenStudy]:
        documents = self._retrying(lambda c: list(c.studies.find({}).sort("_id", 1)))
        return [codec.decode_study(document) for document in documents]

    def _study_distribution(self, cache: StudyCache, name: str, distribution: BaseDistribution) -> BaseDistribution:
        """The distribution of parameter `name` in the study: the first one anyone registered (this one if none)."""
        with self._lock:
            known = cache.param_distributions.get(name)
        if known is not None:
            return known
        field = f"param_distributions.{codec.encode_name(name)}"
        # Compare-and-set: register ours unless one is there. A repeat after a lost reply finds ours.
        result = self._retrying(
            lambda c: c.studies.update_one(
                {"_id": cache.study_id, field: {"$exists": False}},
                {"$set": {field: codec.encode_distribution(distribution)}},
            )
        )
        if result.matched_count:
            known = distribution
        else:
            document = self._retrying(lambda c: c.studies.find_one({"_id": cache.study_id}, {field: 1}))
            if document is None:
                raise KeyError(f"No study with study_id {cache.study_id} exists.")
            known = codec.decode_distribution(document["param_distributions"][codec.encode_name(name)])
        with self._lock:
            return cache.param_distributions.setdefault(name, known)

    # The exact budget of tlsearch's drivers: a counter of trial slots on the study document

    def claim_trial_slot(self, study_id: int, limit: int, claimed: Callable[[], int]) -> int | None:
        """Take one of `limit` trial slots of the study: the slots taken after the claim, or None when all are
        taken. A study without a counter starts at `claimed()` (its finished and running trials). A conditional
        `$inc` on one document: atomic."""
        if study_id not in self._slot_counters:
            self._retrying(
                lambda c: c.studies.update_one(
                    {"_id": study_id, _SLOTS: {"$exists": False}}, {"$set": {_SLOTS: claimed()}}
                )
            )
            self._slot_counters.add(study_id)
        document = self._retrying(
            lambda c: c.studies.find_one_and_update(
                {"_id": study_id, _SLOTS: {"$gte": 0, "$lt": limit}},
                {"$inc": {_SLOTS: 1}},
                projection={_SLOTS: 1},
                return_document=ReturnDocument.AFTER,
            )
        )
        if document is not None:
            return int(document[_SLOTS])
        self._check_slot_counter(study_id)
        return None

    def _check_slot_counter(self, study_id: int) -> None:
        """A counter no driver wrote (not a count, or below zero) is refused, not obeyed; one at or above the
        limit means the budget's slots are taken (also after a run with a larger budget)."""
        document = self._retrying(lambda c: c.studies.find_one({"_id": study_id}, {_SLOTS: 1})) or {}
        value = document.get(_SLOTS)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SlotCounterError(
                f"the trial-slot counter of study id {study_id} holds {value!r}, not a count of trials: not obeyed; "
                f"remove the field {_SLOTS!r} from its document in the studies collection to start counting afresh"
            )

    def release_trial_slot(self, study_id: int) -> None:
        """Give back a slot taken by `claim_trial_slot` (its trial failed)."""
        self._retrying(lambda c: c.studies.update_one({"_id": study_id, _SLOTS: {"$gt": 0}}, {"$inc": {_SLOTS: -1}}))

    # The fold budget of tlsearch's drivers: a counter of folds claimed on the study document

    def claim_folds(self, study_id: int, n: int, limit: int, used: Callable[[], int]) -> int | None:
        """Claim `n` folds if no more than `limit` are then claimed: the count after, or None. A study without a
        counter starts at `used()`. A conditional `$inc` on one document: atomic (a reply lost and retried
        claims twice: folds are wasted, never overrun)."""
        if study_id not in self._fold_counters:
            self._retrying(
                lambda c: c.studies.update_one(
                    {"_id": study_id, _FOLDS: {"$exists": False}}, {"$set": {_FOLDS: used()}}
                )
            )
            self._fold_counters.add(study_id)
        document = self._retrying(
            lambda c: c.studies.find_one_and_update(
                {"_id": study_id, _FOLDS: {"$gte": 0, "$lte": limit - n}},
                {"$inc": {_FOLDS: n}},
                projection={_FOLDS: 1},
                return_document=ReturnDocument.AFTER,
            )
        )
        if document is not None:
            return int(document[_FOLDS])
        self.folds_claimed(study_id)  # refuses a counter no driver wrote
        return None

    def release_folds(self, study_id: int, n: int) -> None:
        """Give back `n` folds claimed by `claim_folds`, never going below zero."""
        result = self._retrying(
            lambda c: c.studies.update_one({"_id": study_id, _FOLDS: {"$gte": n}}, {"$inc": {_FOLDS: -n}})
        )
        if not result.matched_count:
            self._retrying(
                lambda c: c.studies.update_one({"_id": study_id, _FOLDS: {"$gt": 0, "$lt": n}}, {"$set": {_FOLDS: 0}})
            )

    def folds_claimed(self, study_id: int) -> int | None:
        """The study's fold counter, None where there is none; `SlotCounterError` for a value no driver wrote."""
        document = self._retrying(lambda c: c.studies.find_one({"_id": study_id}, {_FOLDS: 1})) or {}
        if _FOLDS not in document:
            return None
        value = document[_FOLDS]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SlotCounterError(
                f"the fold counter of study id {study_id} holds {value!r}, not a count of folds: not obeyed; "
                f"remove the field {_FOLDS!r} from its document in the studies collection to start counting afresh"
            )
        return value
