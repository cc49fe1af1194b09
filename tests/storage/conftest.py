"""Fixtures for the MongoStorage tests: a storage on a fresh database of the session's server."""

from __future__ import annotations

import optuna
import pytest

from tlsearch.storage import MongoStorage


@pytest.fixture
def mongo_storage(mongo_uri, mongo_db_name):
    """A MongoStorage built from the URI, on a database dropped after the test."""
    storage = MongoStorage(mongo_uri, mongo_db_name)
    yield storage
    storage.close()


@pytest.fixture(autouse=True)
def _quiet_optuna():
    """Optuna logs every trial at INFO; the multi-process tests make hundreds."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(verbosity)
