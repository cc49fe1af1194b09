"""Optuna's own storage conformance suite, run against both of tlsearch's study stores: MongoStorage and the
embedded default's JournalStorage (its batched writes included)."""

from __future__ import annotations

import pytest
from optuna.testing.pytest_storages import StorageTestCase

from tlsearch.storage._journal import open_journal


class TestMongoStorageConformance(StorageTestCase):
    @pytest.fixture
    def storage(self, mongo_storage):
        return mongo_storage


class TestJournalStorageConformance(StorageTestCase):
    @pytest.fixture
    def storage(self, tmp_path):
        return open_journal(str(tmp_path / "studies.journal"))
