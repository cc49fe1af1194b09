"""Which stores a study uses: MongoDB (study store, dataset store, artifacts) or the embedded default.

`Stores` is a small picklable description that travels to Dask workers; each process opens the real
stores from it once and reuses them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import optuna

from tlsearch.config import Settings, database_name, journal_path
from tlsearch.errors import TLSearchError
from tlsearch.mongo import mask_uri

# A study name is a key in the study store's unique index and part of local file names (reports, models).
STUDY_NAME_MAX = 200
_FORBIDDEN_IN_NAMES = re.compile(r"[/\\\x00-\x1f\x7f]")

# Heartbeats let a resumed study fail the trials a dead driver left RUNNING.
HEARTBEAT_INTERVAL = 10
GRACE_PERIOD = 60


@dataclass(frozen=True)
class Stores:
    """Where a study's trials, datasets and artifacts live.

    With `mongo` (a MongoDB URI), all three are in that MongoDB database; otherwise they are files under `home`
    (the embedded default), which only processes on this host can reach.
    """

    mongo: str | None = None
    database: str | None = None  # None: the database `mongo` names, else DEFAULT_DATABASE
    home: Path = Path(".tlsearch")
    heartbeat_interval: int = HEARTBEAT_INTERVAL
    grace_period: int = GRACE_PERIOD

    @classmethod
    def resolve(
        cls, mongo: str | None = None, database: str | None = None, home: str | Path | None = None, **heartbeat
    ) -> Stores:
        """The stores these values select, each not given taken from `Settings.resolve` (environment, config
        file, default)."""
        return cls.of(Settings.resolve(mongo=mongo, database=database, home=home), **heartbeat)

    @classmethod
    def of(cls, settings: Settings, **heartbeat) -> Stores:
        """The stores `settings` select."""
        return cls(settings.mongo, settings.database, settings.home, **heartbeat)

    @property
    def is_local(self) -> bool:
        return self.mongo is None

    def describe(self) -> str:
        """A human description, with any credentials masked."""
        if self.is_local:
            return f"local folder {self.home}"
        return f"MongoDB {mask_uri(self.mongo)} (database {database_name(self.mongo, self.database)!r})"

    def study_storage(self) -> optuna.storages.BaseStorage:
        return _open_study_storage(self)

    def dataset_store(self):
        return _open_dataset_store(self)

    def artifact_store(self):
        return _open_artifact_store(self)


@functools.cache
def _open_study_storage(stores: Stores) -> optuna.storages.BaseStorage:
    # The stores are imported on first use (here and below): every CLI command imports this module.
    from tlsearch.storage import MongoStorage
    from tlsearch.storage._journal import open_journal

    if stores.is_local:
        path = journal_path(stores.home)
        path.parent.mkdir(parents=True, exist_ok=True)
        return open_journal(str(path))

    return MongoStorage(
        stores.mongo,
        stores.database,
        heartbeat_interval=stores.heartbeat_interval,
        grace_period=stores.grace_period,
    )


@functools.cache
def _open_artifact_store(stores: Stores):
    from tlsearch.stores._artifacts import open_artifact_store

    return open_artifact_store(stores.mongo, database=stores.database, home=stores.home)


@functools.cache
def _open_dataset_store(stores: Stores):
    from tlsearch.data import open_dataset_store

    return open_dataset_store(stores.mongo, database=stores.database, home=stores.home)


def check_study_name(name: object) -> str:
    """`name` when the stores accept it as a study name and it is safe as a file name; else TLSearchError."""
    if not isinstance(name, str) or not name.strip():
        raise TLSearchError(f"invalid study name {name!r}: give a non-empty name (--name)")
    if len(name) > STUDY_NAME_MAX:
        raise TLSearchError(
            f"study name {name[:40]!r}... is {len(name)} characters long: the stores take at most "
            f"{STUDY_NAME_MAX}; choose a shorter --name"
        )
    if name in (".", "..") or _FORBIDDEN_IN_NAMES.search(name):
        raise TLSearchError(
            f"invalid study name {name!r}: no '/', '\\' or control characters, and not '.' or "
            "'..' (it names report and model files); choose another --name"
        )
    return name


def require_shared(stores: Stores, remote_cluster: bool) -> None:
    """Workers on other hosts cannot read this host's files: refuse a local store with a remote cluster."""
    if remote_cluster and stores.is_local:
        raise TLSearchError(
            "a remote Dask cluster needs the study and dataset stores in MongoDB: "
            "pass --mongo URI (or set TLSEARCH_MONGO_URI)"
        )
