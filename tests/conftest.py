"""Shared fixtures: a real MongoDB wire-protocol server for the whole test session.

`$TLSEARCH_TEST_MONGO_URI` selects a real MongoDB; otherwise mongo-java-server is started on a free port
and stopped at the end of the session.
"""

from __future__ import annotations

import os
import uuid

import numpy as np
import pymongo
import pytest
from sklearn.datasets import load_digits

from tlsearch.testing import TestMongoServer, test_mongo_uri

# Tests never need a GPU, and TensorFlow should not grab every core of a shared 2-core machine.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session", autouse=True)
def user_data_dir(tmp_path_factory):
    """The user's data directory (this machine's study-file records), private to the test session."""
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("user-data")
        patch.setenv("XDG_DATA_HOME", str(path))
        yield path


@pytest.fixture(scope="session")
def mongo_uri():
    """URI of the MongoDB server shared by the test session."""
    uri = test_mongo_uri()
    if uri:
        yield uri
        return
    with TestMongoServer() as uri:
        yield uri


@pytest.fixture(scope="session")
def mongo_client(mongo_uri):
    client = pymongo.MongoClient(mongo_uri)
    yield client
    client.close()


@pytest.fixture
def mongo_db_name(mongo_client):
    """A fresh database name for one test; the database is dropped afterwards."""
    name = f"tlsearch_test_{uuid.uuid4().hex[:12]}"
    yield name
    mongo_client.drop_database(name)


@pytest.fixture
def persistent_mongo_server(tmp_path):
    """A mongo-java-server on an H2 file, for tests that restart the server mid-study (real MongoDB: skipped)."""
    if test_mongo_uri():
        pytest.skip("restarting the server needs the bundled test server")
    server = TestMongoServer(tmp_path / "mongo.h2")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """Digits as read-only memory-mapped arrays, like a worker's host cache gives them."""
    folder = tmp_path_factory.mktemp("digits")
    X, y = load_digits(return_X_y=True)
    np.save(folder / "X.npy", X)
    np.save(folder / "y.npy", y)
    return {"X": np.load(folder / "X.npy", mmap_mode="r"), "y": np.load(folder / "y.npy", mmap_mode="r")}
