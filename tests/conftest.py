"""Shared fixtures: a real MongoDB wire-protocol server for the whole test session.

`$TLSEARCH_TEST_MONGO_URI` selects a real MongoDB; otherwise mongo-java-server is started on a free port
and stopped at the end of the session.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import subprocess
import uuid

import numpy as np
import pymongo
import pytest
from sklearn.datasets import load_digits

from tlsearch.testing import TestMongoServer, test_mongo_uri

# ---- the fast loop: `pytest -m "not slow"` starts no cluster and no process ----------------------------------------

_RUNNING = {"test": None, "shared_service": False}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _RUNNING["test"] = item  # before its fixtures, so a module-scoped one that starts a cluster is seen too


@contextlib.contextmanager
def _shared_service():
    """Processes started here (the session's MongoDB server) serve every test: no test starts them."""
    _RUNNING["shared_service"] = True
    try:
        yield
    finally:
        _RUNNING["shared_service"] = False


def _only_in_slow_tests(owner, name: str, what: str) -> None:
    """Make `owner.name` fail the running test, naming `what` it starts, unless the test is marked slow."""
    original = getattr(owner, name)

    def guarded(*args, **kwargs):
        test = _RUNNING["test"]
        if test is not None and not _RUNNING["shared_service"] and test.get_closest_marker("slow") is None:
            pytest.fail(f"{test.nodeid} starts {what}: mark it @pytest.mark.slow", pytrace=False)
        return original(*args, **kwargs)

    setattr(owner, name, guarded)


def pytest_sessionstart(session):
    # Not at pytest_configure: distributed configures logging at import, and imported before pytest's logging
    # plugin it left `caplog` without the records of a test's run.
    import distributed

    _only_in_slow_tests(distributed.LocalCluster, "__init__", "a Dask LocalCluster")
    _only_in_slow_tests(subprocess.Popen, "__init__", "a subprocess")
    _only_in_slow_tests(multiprocessing.process.BaseProcess, "start", "a process")


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
    server = TestMongoServer()
    with _shared_service():
        uri = server.start()
    try:
        yield uri
    finally:
        server.stop()


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
