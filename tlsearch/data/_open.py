"""Opening the dataset store a user names: MongoDB (GridFS) or the local folder."""

from __future__ import annotations

from pathlib import Path

from tlsearch.config import DEFAULT_DATABASE, Settings
from tlsearch.data._gridfs import MongoDatasetStore
from tlsearch.data._local import LocalDatasetStore
from tlsearch.data._store import DatasetStore


def open_dataset_store(
    mongo_uri: str | None = None, *, database: str = DEFAULT_DATABASE, root: Path | None = None
) -> DatasetStore:
    """The MongoDB (GridFS) store when `mongo_uri` is given, else the local store under `root`/datasets
    (`root` defaults to the settings' `home`, see `tlsearch.Settings`)."""
    if mongo_uri:
        return MongoDatasetStore(mongo_uri, database)
    home = Path(root).expanduser().absolute() if root else Settings.resolve().home
    return LocalDatasetStore(home / "datasets")
