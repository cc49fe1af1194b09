"""Fixtures for the dataset store tests: every store test runs on both backends."""

from __future__ import annotations

import pytest

from tlsearch.data import HostCache
from tlsearch.data._gridfs import MongoDatasetStore
from tlsearch.data._local import LocalDatasetStore

# Small GridFS chunks, so that even tiny test arrays span several chunks and batches.
TEST_CHUNK_BYTES = 4096


@pytest.fixture(params=["local", "mongo"])
def store(request, tmp_path):
    """A fresh dataset store: the local-directory backend or the MongoDB (GridFS) backend."""
    if request.param == "local":
        store = LocalDatasetStore(tmp_path / "home" / "datasets")
    else:
        store = MongoDatasetStore(
            request.getfixturevalue("mongo_uri"), request.getfixturevalue("mongo_db_name"), chunk_bytes=TEST_CHUNK_BYTES
        )
    yield store
    store.close()


@pytest.fixture
def cache(tmp_path):
    return HostCache(tmp_path / "cache")
