"""Opening the dataset store a user names: MongoDB (GridFS) or the local folder."""

from __future__ import annotations

from pathlib import Path

from tlsearch._renamed import renamed_keywords
from tlsearch.config import Settings
from tlsearch.data._gridfs import MongoDatasetStore
from tlsearch.data._local import LocalDatasetStore
from tlsearch.data._store import DatasetStore


@renamed_keywords(mongo_uri="mongo", root="home")
def open_dataset_store(
    mongo: str | None = None, *, database: str | None = None, home: str | Path | None = None
) -> DatasetStore:
    """The MongoDB (GridFS) store when the URI `mongo` is given, else the local store under `home`/datasets
    (`home` defaults to the settings' `home`, see `tlsearch.Settings`). `mongo_uri=` and `root=` are the
    deprecated names of `mongo=` and `home=`."""
    if mongo:
        return MongoDatasetStore(mongo, database)
    home = Path(home).expanduser().absolute() if home else Settings.resolve().home
    return LocalDatasetStore(home / "datasets")
