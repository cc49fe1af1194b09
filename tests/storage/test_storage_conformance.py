"""Optuna's own storage conformance suite, run against MongoStorage."""

from __future__ import annotations

import pytest
from optuna.testing.pytest_storages import StorageTestCase


class TestMongoStorageConformance(StorageTestCase):
    @pytest.fixture
    def storage(self, mongo_storage):
        return mongo_storage
