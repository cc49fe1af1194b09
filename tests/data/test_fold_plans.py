"""Fold plans: computed once, stored by hash, identical on every process and after a server restart."""

from __future__ import annotations

import numpy as np
import pytest
from data_helpers import fold_plan_in_process, make_arrays, run_in_processes
from sklearn.model_selection import (
    GroupKFold,
    KFold,
    RepeatedStratifiedKFold,
    ShuffleSplit,
    StratifiedGroupKFold,
    StratifiedKFold,
    TimeSeriesSplit,
)

from tlsearch.data import FoldPlan, HostCache, describe_splitter, fold_plan_for
from tlsearch.data._gridfs import MongoDatasetStore
from tlsearch.errors import DatasetCorruptedError, DatasetValidationError, FoldPlanMismatchError, FoldPlanNotFoundError


class EveryThirdRow:
    """A hand-written splitter: anything with `split` will do."""

    def __init__(self, offset=0):
        self.offset = offset

    def split(self, X, y=None, groups=None):
        rows = np.arange(len(X))
        for k in range(3):
            validation = rows[(rows + self.offset) % 3 == k]
            yield np.setdiff1d(rows, validation), validation


SPLITTERS = [
    KFold(4),
    KFold(5, shuffle=True, random_state=0),
    StratifiedKFold(3, shuffle=True, random_state=1),
    GroupKFold(3),
    StratifiedGroupKFold(3),
    TimeSeriesSplit(3),
    RepeatedStratifiedKFold(n_splits=3, n_repeats=2, random_state=0),
    ShuffleSplit(2, test_size=0.25, random_state=0),
    EveryThirdRow(),
]


@pytest.fixture
def dataset(store, cache):
    store.push("folds", make_arrays(n_rows=90, groups=np.arange(90) // 5, sample_weight=np.linspace(1, 2, 90)))
    with cache.open(store, "folds") as dataset:
        yield dataset


@pytest.mark.filterwarnings("ignore:The groups parameter is ignored")
@pytest.mark.parametrize("splitter", SPLITTERS, ids=lambda s: type(s).__name__)
def test_plans_are_stored_by_hash_and_served_as_zero_copy_folds(store, cache, dataset, splitter):
    plan = fold_plan_for(store, dataset, splitter)
    expected = list(splitter.split(dataset["X"], dataset["y"], dataset["groups"]))
    assert plan.n_splits == len(expected) and plan.dataset_hash == dataset.info.hash
    for (train, validation), (exp_train, exp_validation) in zip(plan.folds, expected):
        assert train.dtype == np.int64
        np.testing.assert_array_equal(train, exp_train)
        np.testing.assert_array_equal(validation, exp_validation)
    for fetched in (store.get_fold_plan(plan.hash), cache.fold_plan(store, plan.hash)):
        assert fetched.hash == plan.hash and fetched.splitter == plan.splitter
        for (a, b), (c, d) in zip(fetched.folds, plan.folds):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, d)
    assert fold_plan_for(store, dataset, splitter).hash == plan.hash  # idempotent
    for k, (train, validation) in enumerate(plan.folds):
        fold = dataset.fold(plan, k)
        assert sorted(fold.train_index.tolist()) == sorted(train.tolist())
        assert sorted(fold.validation_index.tolist()) == sorted(validation.tolist())
        copied = dataset.fold(plan, k, layout=False)
        assert fold.index == copied.index == k
        np.testing.assert_array_equal(copied.train_index, train)
        for name in ("X", "y", "groups", "sample_weight"):
            np.testing.assert_array_equal(fold.train[name], dataset[name][fold.train_index])
            np.testing.assert_array_equal(fold.validation[name], dataset[name][fold.validation_index])
            np.testing.assert_array_equal(copied.train[name], dataset[name][train])
    plan.check_matches(dataset.info, splitter)


@pytest.mark.slow
def test_folds_are_identical_across_processes_even_when_unseeded(store, dataset, tmp_path):
    seeded = KFold(5, shuffle=True, random_state=7)
    results = run_in_processes(
        fold_plan_in_process, [(store, "folds", str(tmp_path / f"c{i}"), seeded, None) for i in range(2)]
    )
    assert results[0] == results[1]

    unseeded = KFold(5, shuffle=True)  # random at creation; stored, so everyone after sees the same folds
    plan = fold_plan_for(store, dataset, unseeded)
    results = run_in_processes(
        fold_plan_in_process, [(store, "folds", str(tmp_path / f"c{i}"), None, plan.hash) for i in range(2)]
    )
    expected = [(t.tolist(), v.tolist()) for t, v in plan.folds]
    assert results[0] == results[1] == (plan.hash, expected)
    plan.check_matches(dataset.info, KFold(5, shuffle=True))


@pytest.mark.slow
def test_plans_survive_a_server_restart(persistent_mongo_server, tmp_path):
    store = MongoDatasetStore(persistent_mongo_server.uri, "restart", chunk_bytes=4096)
    store.push("kept", make_arrays(n_rows=200))
    with HostCache(tmp_path / "driver").open(store, "kept") as dataset:
        plan = fold_plan_for(store, dataset, StratifiedKFold(4, shuffle=True))
    store.close()
    uri = persistent_mongo_server.restart()

    store = MongoDatasetStore(uri, "restart", chunk_bytes=4096)
    resumed = store.get_fold_plan(plan.hash)
    resumed.check_matches(store.info("kept"), StratifiedKFold(4, shuffle=True))
    with HostCache(tmp_path / "worker").open(store, "kept") as dataset:
        for k in range(plan.n_splits):
            np.testing.assert_array_equal(
                dataset.fold(resumed, k).validation_index, dataset.fold(plan, k).validation_index
            )
            np.testing.assert_array_equal(resumed.folds[k][0], plan.folds[k][0])
    store.verify("kept")
    store.close()


def test_a_resume_with_other_data_or_splitter_says_what_changed(store, cache, dataset):
    plan = fold_plan_for(store, dataset, KFold(5, shuffle=True, random_state=0))
    changed = store.push("folds", make_arrays(n_rows=91), new_version=True)
    with pytest.raises(FoldPlanMismatchError, match=r"the dataset changed: .*\(90 rows\).*folds@2 .*\(91 rows\)"):
        plan.check_matches(changed, KFold(5, shuffle=True, random_state=0))
    with pytest.raises(
        FoldPlanMismatchError,
        match=r"the splitter changed: .*KFold\(n_splits=5, random_state=0.*now it is KFold\(n_splits=3",
    ):
        plan.check_matches(dataset.info, KFold(3, shuffle=True, random_state=0))
    with pytest.raises(FoldPlanMismatchError, match="dataset changed.*; the splitter changed"):
        plan.check_matches(changed, StratifiedKFold(5))
    with cache.open(store, "folds@2") as other, pytest.raises(FoldPlanMismatchError, match="not for folds@2"):
        other.fold(plan, 0)


def test_splitter_descriptions_are_deterministic():
    assert describe_splitter(KFold(5, shuffle=True, random_state=np.random.RandomState(0))) == describe_splitter(
        KFold(5, shuffle=True, random_state=np.random.RandomState(1))
    )
    assert "0x" not in describe_splitter(KFold(5, shuffle=True, random_state=np.random.RandomState(0)))
    assert describe_splitter(EveryThirdRow(2)) == "EveryThirdRow(offset=2)"
    with pytest.raises(DatasetValidationError, match="not a splitter"):
        describe_splitter(object())


def test_group_splitters_need_groups(store, cache):
    store.push("no-groups", make_arrays())
    with cache.open(store, "no-groups") as dataset, pytest.raises(DatasetValidationError, match="--groups"):
        fold_plan_for(store, dataset, GroupKFold(3))


def test_damaged_or_unknown_plans_are_refused(store, dataset):
    plan = fold_plan_for(store, dataset, KFold(3))
    with pytest.raises(FoldPlanNotFoundError, match="no fold plan"):
        store.get_fold_plan("0" * 64)
    if isinstance(store, MongoDatasetStore):
        chunks = store._db["datasets.chunks"]
        file_id = store._db["fold_plans"].find_one({"_id": plan.hash})["file"]["id"]
        chunk = chunks.find_one({"files_id": file_id, "n": 0})
        data = bytearray(chunk["data"])
        data[-1] ^= 0x01
        chunks.update_one({"_id": chunk["_id"]}, {"$set": {"data": bytes(data)}})
    else:
        path = store.root / "fold_plans" / plan.hash / "indices.npy"
        raw = bytearray(path.read_bytes())
        raw[-1] ^= 0x01
        path.write_bytes(bytes(raw))
    with pytest.raises(DatasetCorruptedError, match="damaged"):
        store.get_fold_plan(plan.hash)


def test_plan_rows_are_checked():
    with pytest.raises(DatasetValidationError, match="outside 0..9"):
        FoldPlan.build("h", "S()", 10, [(np.arange(8), np.array([8, 10]))])
    with pytest.raises(DatasetValidationError, match="no folds"):
        FoldPlan.build("h", "S()", 10, [])
