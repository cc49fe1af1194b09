"""The dataset store contract, on both backends (local directory and MongoDB GridFS)."""

from __future__ import annotations

import pickle
import threading
from datetime import datetime, timezone

import numpy as np
import pytest
from bson import ObjectId
from data_helpers import make_arrays, stored_objects

from tlsearch.data import hash_arrays
from tlsearch.data._gridfs import MongoDatasetStore
from tlsearch.errors import DatasetCorruptedError, DatasetExistsError, DatasetNotFoundError, DatasetValidationError

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]


def test_every_practical_dtype_round_trips_bit_for_bit(store, cache):
    rng = np.random.default_rng(1)
    for dtype in DTYPES:
        if dtype == "bool":
            X = rng.random((40, 3)) > 0.5
        elif dtype.startswith("float"):
            X = rng.normal(size=(40, 3)).astype(dtype)
            X[0, 0], X[1, 1] = np.nan, -np.nan  # pushed with allow_missing
        else:
            info = np.iinfo(dtype)
            X = rng.integers(info.min, info.max, size=(40, 3), dtype=dtype, endpoint=True)
        y = X[:, 0] if dtype in ("bool", "uint8", "int8") else np.arange(40).astype(dtype)
        arrays = {"X": X, "y": y, "groups": np.arange(40) % 4, "sample_weight": np.ones(40, np.float32)}
        info = store.push(f"dtype-{dtype}", arrays, allow_missing=True)
        assert info.hash == hash_arrays(arrays)
        assert info.arrays["X"] == {"dtype": np.dtype(dtype).str, "shape": [40, 3]}
        with cache.open(store, f"dtype-{dtype}") as dataset:
            for name, array in arrays.items():
                assert dataset[name].dtype == array.dtype and dataset[name].shape == array.shape
                assert dataset[name].tobytes() == array.tobytes(), (dtype, name)
        assert store.verify(f"dtype-{dtype}").hash == info.hash


def test_one_row_dataset_round_trips(store, cache):
    arrays = make_arrays(n_rows=1, y=np.array([0.5]))  # a regression target: one class would be refused
    info = store.push("tiny", arrays)
    assert info.n_rows == 1
    with cache.open(store, "tiny") as dataset:
        assert dataset["X"].shape == (1, 5)
        np.testing.assert_array_equal(dataset["y"], arrays["y"])
    store.verify("tiny")


@pytest.mark.parametrize(
    ("arrays", "says"), [(make_arrays(n_rows=0), "0 rows"), (make_arrays(n_rows=4, y=np.full(4, 2)), "one class only")]
)
def test_empty_and_single_class_datasets_are_refused_at_push(store, arrays, says):
    with pytest.raises(DatasetValidationError, match=says):
        store.push("tiny", arrays)
    assert store.list() == []


def test_pushing_stored_content_transfers_nothing(store):
    arrays = make_arrays()
    first = store.push("iris-like", arrays)
    sent = store.stats.bytes_sent
    assert sent > 0
    objects = stored_objects(store)
    again = store.push("iris-like", {k: v.copy() for k, v in arrays.items()})
    assert (again.ref, again.hash) == (first.ref, first.hash)
    other_name = store.push("alias", arrays)
    assert other_name.ref == "alias@1" and other_name.hash == first.hash
    assert store.stats.bytes_sent == sent  # neither push moved a byte
    after = stored_objects(store)
    assert {k: v for k, v in after.items() if k not in ("datasets", "records")} == {
        k: v for k, v in objects.items() if k not in ("datasets", "records")
    }


def test_hash_ignores_byte_order_and_memory_layout(store):
    X = np.arange(12, dtype=">f8").reshape(4, 3)
    y = np.arange(4)
    native = store.push("order", {"X": np.asfortranarray(X), "y": y})
    assert native.hash == hash_arrays({"X": X.astype("<f8"), "y": y})


def test_a_name_with_new_content_needs_a_new_version(store):
    store.push("data", make_arrays(seed=1))
    with pytest.raises(DatasetExistsError, match="--new-version"):
        store.push("data", make_arrays(seed=2))
    v2 = store.push("data", make_arrays(seed=2), new_version=True)
    assert v2.version == 2
    assert store.info("data").version == 2
    assert store.info("data@1").hash == hash_arrays(make_arrays(seed=1))
    assert store.push("data", make_arrays(seed=2), new_version=True).version == 2  # identical to latest
    v3 = store.push("data", make_arrays(seed=1), new_version=True)  # old content, new version: no upload
    assert v3.version == 3 and v3.hash == store.info("data@1").hash
    assert [i.ref for i in store.list()] == ["data@1", "data@2", "data@3"]
    with pytest.raises(DatasetNotFoundError, match="data@9"):
        store.info("data@9")
    with pytest.raises(DatasetValidationError, match="version"):
        store.info("data@x")


def test_deleting_removes_chunks_and_fold_plans_no_other_version_uses(store, cache):
    from sklearn.model_selection import KFold

    store.push("a", make_arrays(seed=1))
    store.push("a", make_arrays(seed=2), new_version=True)
    store.push("same-as-a1", make_arrays(seed=1))
    for ref in ("a@1", "a@2"):
        with cache.open(store, ref) as dataset:
            from tlsearch.data import fold_plan_for

            fold_plan_for(store, dataset, KFold(3))
    full = stored_objects(store)

    assert [i.ref for i in store.delete("a@1")] == ["a@1"]  # content still used by same-as-a1
    with pytest.raises(DatasetNotFoundError):
        store.info("a@1")
    assert store.verify("same-as-a1")
    store.delete("same-as-a1")
    reduced = stored_objects(store)
    assert all(reduced[k] <= full[k] for k in full) and reduced != full

    assert [i.ref for i in store.delete("a", all_versions=True)] == ["a@2"]
    assert store.list() == []
    assert all(count == 0 for count in stored_objects(store).values()), stored_objects(store)


def test_object_arrays_are_refused_and_nothing_is_written(store):
    with pytest.raises(DatasetValidationError, match=r"'X' holds object.*pickle"):
        store.push("objects", {"X": np.array([{"a": 1}, None], dtype=object), "y": np.array([0, 1])})
    with pytest.raises(DatasetValidationError, match=r"'y' holds strings"):
        store.push("strings", {"X": np.zeros((2, 1)), "y": np.array(["a", "b"])})
    assert store.list() == [] and all(v == 0 for v in stored_objects(store).values())


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"X": np.zeros((5, 2)), "y": np.zeros(4)}, r"'X' has 5 rows but 'y' has 4"),
        (
            {"X": np.zeros((3, 2)), "y": np.array([0.0, np.nan, 1.0])},
            r"label array 'y' has 1 row\(s\) with NaN values \(first at row 1\)",
        ),
        ({"X": np.zeros((3, 2)), "y": np.array([0.0, 1.0, np.inf])}, r"label array 'y' .* infinite .* row 2"),
        (
            {"X": np.zeros((3, 2)), "y": np.zeros(3), "sample_weight": np.array([1.0, -1.0, 1.0])},
            r"'sample_weight' .* negative",
        ),
        ({"X": np.zeros((3, 2)), "y": np.zeros(3), "groups": np.zeros((3, 2))}, r"'groups' must be 1-D"),
        ({"X": np.zeros((3, 2)), "y": np.zeros(3), "extra": np.zeros(3)}, r"unknown array name\(s\) 'extra'"),
        ({"X": np.zeros((3, 2))}, r"missing array\(s\) 'y'"),
        ({"X": np.zeros((3, 2), dtype="datetime64[s]"), "y": np.zeros(3)}, r"'X' holds datetimes"),
    ],
)
def test_invalid_arrays_are_refused_with_the_array_and_the_problem(store, arrays, message):
    with pytest.raises(DatasetValidationError, match=message):
        store.push("bad", arrays)
    assert store.list() == [] and all(v == 0 for v in stored_objects(store).values())


def test_invalid_names_and_metadata_are_refused(store):
    for name in ("", "a/b", "x@1", "-lead", "sklearn:digits"):
        with pytest.raises(DatasetValidationError, match="invalid dataset name"):
            store.push(name, make_arrays())
    with pytest.raises(DatasetValidationError, match="metadata"):
        store.push("meta", make_arrays(), metadata={"when": object()})
    info = store.push(
        "meta",
        make_arrays(),
        metadata={"source": "unit test", "scale": np.float32(2.5), "feature_names": np.array(["a", "b"])},
    )
    assert store.info("meta").metadata == {"source": "unit test", "scale": 2.5, "feature_names": ["a", "b"]}
    assert info.created.tzinfo is not None and store.info("meta").size_bytes == info.size_bytes


def test_an_interrupted_push_leaves_nothing_behind(store):
    def fail_midway(nbytes):
        raise KeyboardInterrupt

    big = make_arrays(n_rows=3000, n_features=8)  # several chunks and pieces
    with pytest.raises(KeyboardInterrupt):
        store.push("interrupted", big, progress=fail_midway)
    assert store.list() == [] and all(v == 0 for v in stored_objects(store).values()), stored_objects(store)
    assert store.push("interrupted", big).version == 1


def test_concurrent_pushes_of_the_same_content_upload_it_once(store):
    arrays = make_arrays(n_rows=2000)
    stores = [pickle.loads(pickle.dumps(store)) for _ in range(4)]
    results, errors = [], []

    def push(s):
        try:
            results.append(s.push("shared", arrays))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=push, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert {r.ref for r in results} == {"shared@1"}
    assert sum(s.stats.arrays_sent for s in stores) == 2  # X and y, once
    assert [i.ref for i in store.list()] == ["shared@1"]


def test_verify_detects_damaged_stored_bytes(store):
    info = store.push("fragile", make_arrays(n_rows=500))
    if isinstance(store, MongoDatasetStore):
        chunks = store._db["datasets.chunks"]
        chunk = chunks.find_one({"n": 1})
        data = bytearray(chunk["data"])
        data[10] ^= 0xFF
        chunks.update_one({"_id": chunk["_id"]}, {"$set": {"data": bytes(data)}})
    else:
        path = store.root / "contents" / info.hash / "X.npy"
        raw = bytearray(path.read_bytes())
        raw[-5] ^= 0xFF
        path.write_bytes(bytes(raw))
    with pytest.raises(DatasetCorruptedError, match="fragile@1"):
        store.verify("fragile")


def test_stores_pickle_by_location(store):
    store.push("p", make_arrays())
    clone = pickle.loads(pickle.dumps(store))
    assert clone.info("p").hash == store.info("p").hash


def test_mongo_push_takes_over_an_upload_whose_process_died(mongo_uri, mongo_db_name):
    store = MongoDatasetStore(mongo_uri, mongo_db_name, chunk_bytes=4096)
    arrays = make_arrays()
    content_hash = hash_arrays(arrays)
    dead_owner = ObjectId()
    store._ensure_indexes()
    store._contents.insert_one(
        {
            "_id": content_hash,
            "state": "uploading",
            "owner": dead_owner,
            "refs": [ObjectId()],
            "heartbeat": datetime(2001, 1, 1, tzinfo=timezone.utc),
            "files": {},
        }
    )
    store._upload(
        [memoryview(b"x" * 10000)],
        f"{content_hash}/X.npy",
        {"kind": "array", "dataset_hash": content_hash, "array": "X", "upload": dead_owner},
        None,
    )
    info = store.push("revived", arrays)
    assert store._files.count_documents({"metadata.upload": dead_owner}) == 0
    assert store.verify("revived").hash == info.hash
    store.delete("revived")
    assert all(v == 0 for v in stored_objects(store).values())
    store.close()


def test_mongo_reads_chunks_in_bounded_batches(mongo_uri, mongo_db_name, monkeypatch, cache):
    """A file larger than one reply batch is read with several getMore round trips, never in one reply."""
    from pymongo import monitoring

    from tlsearch.data import _gridfs

    monkeypatch.setattr(_gridfs, "READ_BATCH_BYTES", 3 * 4096)
    replies = []

    class Listener(monitoring.CommandListener):
        def started(self, event):
            pass

        def succeeded(self, event):
            if event.command_name in ("find", "getMore"):
                batch = (
                    event.reply.get("cursor", {}).get("firstBatch")
                    or event.reply.get("cursor", {}).get("nextBatch")
                    or []
                )
                if batch and "data" in batch[0]:
                    replies.append(len(batch))

        def failed(self, event):
            pass

    import pymongo

    client = pymongo.MongoClient(mongo_uri, event_listeners=[Listener()], tz_aware=True)
    store = MongoDatasetStore(client, mongo_db_name, chunk_bytes=4096)
    store.push("batched", make_arrays(n_rows=1000))  # X: 20 kB → 5 chunks
    with cache.open(store, "batched") as dataset:
        assert dataset["X"].shape == (1000, 5)
    assert replies and max(replies) <= 3 and len(replies) >= 2
    client.close()
