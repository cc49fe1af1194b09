"""`tlsearch dataset push` of an .npy table streams it: the file stays mapped and is checked, hashed and written
a block of rows at a time, with the same content hash and bytes as when it was read whole."""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytest

from tlsearch.cli import main
from tlsearch.data import HostCache, _chunks, open_dataset_store
from tlsearch.data._store import DatasetStore

# What the push before streaming gave for `_table()` (features: all but the last column; --task classification).
HASH_ALL_BUT_LAST = "f0d16c1eec4250fa013273704a3ab34d724c9b32bba44cc168fece6753e25846"
HASH_COLUMNS_0_2_5 = "ee2e5484e95bb871002103107b369489e4a709a9e1218ccf53ce3ad39767ef8c"
HASH_COLUMNS_1_3_5_7 = "a48959d8c73e956f4041efc785c8cab86bb90014a49f5e1d28b2ca42bf615812"
CHUNK = 64 << 10  # the 2 MB table below is 32 chunks


def _table(path) -> np.ndarray:
    n_rows, n_columns = 2000, 257
    table = (np.arange(n_rows * n_columns, dtype=np.int64) % 1009 / 7).astype(np.float32).reshape(n_rows, n_columns)
    table[:, -1] = np.arange(n_rows) % 3
    np.save(path, table)
    return table


@pytest.fixture(params=["local", "mongo"])
def where(request, tmp_path, monkeypatch):
    monkeypatch.delenv("TLSEARCH_MONGO_URI", raising=False)
    monkeypatch.setattr(_chunks, "CHUNK_BYTES", CHUNK)
    if request.param == "local":
        return {"home": str(tmp_path / "home")}
    return {"mongo": request.getfixturevalue("mongo_uri"), "database": request.getfixturevalue("mongo_db_name")}


def _options(where: dict) -> list[str]:
    return [text for key, value in where.items() for text in (f"--{key}", value)]


@pytest.mark.parametrize(
    "features, expected_hash, columns",
    [
        (None, HASH_ALL_BUT_LAST, slice(0, 256)),
        ("1,3,5,7", HASH_COLUMNS_1_3_5_7, slice(1, 8, 2)),  # evenly spaced: a strided view of the mapping
        ("0,2,5", HASH_COLUMNS_0_2_5, [0, 2, 5]),  # not: copied into memory
    ],
)
def test_a_pushed_npy_table_is_streamed_and_round_trips_byte_identical(
    where, tmp_path, monkeypatch, capsys, features, expected_hash, columns
):
    table = _table(tmp_path / "table.npy")
    pushed = {}
    push = DatasetStore.push

    def spy(self, name, arrays, **options):
        pushed.update(arrays)
        return push(self, name, arrays, **options)

    monkeypatch.setattr(DatasetStore, "push", spy)
    argv = ["dataset", "push", "t", str(tmp_path / "table.npy"), "--task", "classification", *_options(where)]
    np.save(tmp_path / "tiny.npy", table[:10])
    assert main(["dataset", "push", "tiny", str(tmp_path / "tiny.npy"), *_options(where)]) == 0  # imports, not data
    tracemalloc.start()
    try:
        code = main([*argv, *(["--features", features] if features else [])])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0 and f"sha256 {expected_hash[:12]}" in capsys.readouterr().out
    if features != "0,2,5":  # the features are a view of the mapped file, never a copy of it
        assert isinstance(pushed["X"], np.memmap) and not pushed["X"].flags.c_contiguous
        if (
            "home" in where and features is None
        ):  # GridFS batches its chunks in memory; the local store writes a block at a time
            assert peak < table.nbytes / 4, peak

    expected_X, expected_y = np.ascontiguousarray(table[:, columns]), table[:, -1].astype(np.int64)
    with open_dataset_store(where.get("mongo"), database=where.get("database"), home=where.get("home")) as store:
        info = store.info("t")
        assert info.hash == expected_hash
        for name, expected in (("X", expected_X), ("y", expected_y)):
            stored, reference = io.BytesIO(), io.BytesIO()
            store.read_array(info, name, stored)
            np.save(reference, expected, allow_pickle=False)
            assert stored.getvalue() == reference.getvalue()
        store.verify("t")
        with HostCache(tmp_path / "cache").open(store, "t") as dataset:
            np.testing.assert_array_equal(dataset["X"], expected_X)
            np.testing.assert_array_equal(dataset["y"], expected_y)


def test_missing_and_infinite_values_are_found_chunk_by_chunk_in_a_mapped_table(where, tmp_path, capsys):
    table = _table(tmp_path / "table.npy")
    table[1500, 7] = np.nan  # far past the first chunk
    table[1999, 3] = np.inf
    np.save(tmp_path / "bad.npy", table)
    argv = ["dataset", "push", "bad", str(tmp_path / "bad.npy"), *_options(where)]
    assert main(argv) == 1
    assert "infinite feature values: column 3 in 1 row" in capsys.readouterr().err
    table[1999, 3] = 0
    np.save(tmp_path / "bad.npy", table)
    assert main(argv) == 1
    assert "missing feature values (NaN): column 7 in 1 row" in capsys.readouterr().err
    assert main([*argv, "--allow-missing"]) == 0


def test_a_copy_on_write_mapping_is_pushed_with_its_changes(tmp_path, monkeypatch):
    import tlsearch

    monkeypatch.setattr(_chunks, "CHUNK_BYTES", CHUNK)
    np.save(tmp_path / "X.npy", _table(tmp_path / "table.npy")[:, :-1])
    X = np.load(tmp_path / "X.npy", mmap_mode="c")
    X[1500] = 7.0  # changed in memory only: its pages must not be dropped, or the file's rows come back
    ref = tlsearch.push_dataset((X, np.arange(len(X)) % 3), home=tmp_path / "home")
    with open_dataset_store(home=tmp_path / "home") as store, HostCache(tmp_path / "cache").open(store, ref) as data:
        assert (data["X"][1500] == 7.0).all() and (X[1500] == 7.0).all()
