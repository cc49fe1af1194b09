"""The connection half of `MongoStorage`: URI or client, lazy (re)connection after pickling, indexes, retries
while the connection is lost, and inserts that are safe to repeat.

`MongoConnection` holds no study state; `MongoStorage` (in `_mongo`) adds Optuna's storage API on top.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections.abc import Callable
from datetime import timezone
from typing import Any, NamedTuple

import pymongo
from bson.codec_options import CodecOptions
from pymongo import IndexModel
from pymongo.errors import DuplicateKeyError

from tlsearch.config import database_name
from tlsearch.errors import MongoUnavailableError
from tlsearch.mongo import connect, mask_uri, ping, retrying

STUDIES = "studies"
TRIALS = "trials"
COUNTERS = "counters"
_CODEC_OPTIONS = CodecOptions(tz_aware=True, tzinfo=timezone.utc)
_HOST = socket.gethostname()


class Collections(NamedTuple):
    studies: pymongo.collection.Collection
    trials: pymongo.collection.Collection
    counters: pymongo.collection.Collection


class MongoConnection:
    """A lazily opened connection to the study collections of one database.

    Built from a URI it can be pickled (the URI travels, the connection does not, and the new process
    reconnects on first use); built from a client it cannot. Subclasses add their settings to the pickled
    state by extending `__getstate__`/`__setstate__`, and their per-process state in `_start`.
    """

    def __init__(self, uri_or_client: str | pymongo.MongoClient, database: str | None = None) -> None:
        if database is not None and (not isinstance(database, str) or not database):
            raise ValueError(f"database must be a non-empty string, not {database!r}")
        if isinstance(uri_or_client, str):
            self._uri: str | None = uri_or_client
            client = None
        elif isinstance(uri_or_client, pymongo.MongoClient):
            self._uri = None
            client = uri_or_client
        else:
            raise TypeError(
                f"MongoStorage needs a MongoDB URI or a pymongo.MongoClient, not {type(uri_or_client).__name__}"
            )
        self._database_name = database_name(uri_or_client, database)
        self._start(client)

    def _start(self, client: pymongo.MongoClient | None) -> None:
        self._client = client
        self._db: Collections | None = None
        self._lock = threading.RLock()

    # Pickling: the URI travels, the connection does not.

    def __getstate__(self) -> dict[str, Any]:
        if self._uri is None:
            raise TypeError(
                "a MongoStorage built from a MongoClient cannot be pickled (a client cannot cross processes); "
                "build it from a URI, MongoStorage('mongodb://...'), to send it to other processes"
            )
        return {"uri": self._uri, "database": self._database_name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._uri = state["uri"]
        self._database_name = state["database"]
        self._start(None)

    def __repr__(self) -> str:
        where = repr(mask_uri(self._uri)) if self._uri is not None else "<MongoClient>"
        return f"{type(self).__name__}({where}, database={self._database_name!r})"

    def close(self) -> None:
        """Close the connection this storage opened (a client passed in is left to its owner)."""
        with self._lock:
            if self._uri is not None and self._client is not None:
                self._client.close()
                self._client = None
            self._db = None

    # Connection

    def _describe(self) -> str:
        where = mask_uri(self._uri) if self._uri is not None else "the given MongoClient's server"
        return f"{where} (database {self._database_name!r})"

    def _collections(self) -> Collections:
        db = self._db
        if db is None:
            with self._lock:
                if self._db is None:
                    self._db = self._open()
                db = self._db
        return db

    def _open(self) -> Collections:
        if self._client is None:
            self._client = connect(self._uri)  # type: ignore[arg-type]
        else:
            try:
                ping(self._client)
            except MongoUnavailableError as exc:
                raise MongoUnavailableError(f"cannot reach MongoDB at {self._describe()}: {exc}") from None
        db = self._client.get_database(self._database_name, codec_options=_CODEC_OPTIONS)
        collections = Collections(db[STUDIES], db[TRIALS], db[COUNTERS])
        retrying(lambda: self._create_indexes(collections), self._describe)
        return collections

    @staticmethod
    def _create_indexes(collections: Collections) -> None:
        """Create the indexes the queries need (one command per collection; existing ones are left alone)."""
        collections.studies.create_indexes([IndexModel([("name", 1)], unique=True, name="name_unique")])
        collections.trials.create_indexes(
            [
                IndexModel([("study_id", 1), ("number", 1)], unique=True, name="study_number_unique"),
                IndexModel([("study_id", 1), ("state", 1)], name="study_state"),
                # Redundant on MongoDB (the _id index serves {_id, state}), but servers whose planner only uses
                # a unique index matching the whole filter need it to run compare-and-set updates in constant time.
                IndexModel([("_id", 1), ("state", 1)], unique=True, name="id_state"),
            ]
        )

    def _retrying(self, operation: Callable[[Collections], Any]) -> Any:
        """Run an operation that is safe to repeat, retrying while the connection is lost."""
        return retrying(lambda: operation(self._collections()), self._describe)

    def _insert(self, collection: str, document: dict[str, Any]) -> bool:
        """Insert `document`; False if its unique keys are taken by another document.

        After a lost connection the first attempt may have landed: a duplicate carrying our own
        `created_by` token is then ours."""
        attempts = 0

        def insert(collections: Collections) -> bool:
            nonlocal attempts
            attempts += 1
            target = getattr(collections, collection)
            try:
                target.insert_one(document)
                return True
            except DuplicateKeyError:
                if attempts > 1:
                    existing = target.find_one({"_id": document["_id"]}, {"created_by": 1})
                    if existing is not None and existing.get("created_by") == document["created_by"]:
                        return True
                return False

        return self._retrying(insert)

    @staticmethod
    def _token() -> str:
        """A write's unique signature, naming the host and process that made it."""
        return f"{_HOST}:{os.getpid()}:{secrets.token_hex(4)}"
