"""Artifacts on GridFS (MongoArtifactStore) and on the local file system, through optuna.artifacts."""

from __future__ import annotations

import hashlib
import io
import pickle
import tracemalloc
from pathlib import Path

import optuna
import pymongo
import pytest
from gridfs.errors import CorruptGridFile
from optuna.artifacts import FileSystemArtifactStore, download_artifact, upload_artifact
from optuna.artifacts.exceptions import ArtifactNotFound
from pymongo import monitoring

from tlsearch.stores import _artifacts
from tlsearch.stores._artifacts import MongoArtifactStore, open_artifact_store

MiB = 1024 * 1024


@pytest.fixture
def store(mongo_uri, mongo_db_name):
    store = MongoArtifactStore(mongo_uri, mongo_db_name)
    yield store
    store.close()


@pytest.fixture
def chunks(mongo_client, mongo_db_name):
    return mongo_client[mongo_db_name]["artifacts.chunks"]


@pytest.fixture
def files(mongo_client, mongo_db_name):
    return mongo_client[mongo_db_name]["artifacts.files"]


def _study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study()


def _write_pseudo_random_file(path: Path, size: int) -> str:
    """Write `size` bytes one MiB at a time (never whole in memory); return their sha256."""
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for i in range(0, size, MiB):
            block = hashlib.sha256(i.to_bytes(8, "little")).digest() * (MiB // 32)
            block = block[: min(MiB, size - i)]
            digest.update(block)
            f.write(block)
    return digest.hexdigest()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(MiB):
            digest.update(block)
    return digest.hexdigest()


def _read_all(store, artifact_id: str) -> bytes:
    with store.open_reader(artifact_id) as reader:
        return reader.read()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mongo", "filesystem"])
def test_100mb_round_trip_streams_with_bounded_memory(backend, tmp_path, mongo_uri, mongo_db_name, chunks):
    if backend == "mongo":
        store = MongoArtifactStore(mongo_uri, mongo_db_name)
    else:
        store = open_artifact_store(None, home=tmp_path)
    size = 100 * MiB
    source = tmp_path / "model.bin"
    expected = _write_pseudo_random_file(source, size)
    study = _study()
    trial = study.ask()

    artifact_id = upload_artifact(artifact_store=store, file_path=str(source), study_or_trial=trial)
    study.tell(trial, 0.5)
    if backend == "mongo":
        assert chunks.count_documents({}) == size // MiB

    target = tmp_path / "downloaded.bin"
    tracemalloc.start()
    try:
        download_artifact(artifact_store=store, file_path=str(target), artifact_id=artifact_id)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert target.stat().st_size == size
    assert _sha256_file(target) == expected
    # One batch of chunk documents (8 MiB) is held at most twice (the reply and its decoded documents).
    assert peak < 32 * MiB, f"peak Python memory while reading {peak / MiB:.1f} MiB"


def test_small_artifact_round_trip_through_optuna(store, tmp_path):
    source = tmp_path / "notes.txt"
    source.write_bytes(b"fold 0: 0.91\nfold 1: 0.93\n")
    study = _study()
    artifact_id = upload_artifact(artifact_store=store, file_path=str(source), study_or_trial=study)
    target = tmp_path / "back.txt"
    download_artifact(artifact_store=store, file_path=str(target), artifact_id=artifact_id)
    assert target.read_bytes() == source.read_bytes()


def test_reader_reads_in_pieces_and_seeks(mongo_uri, mongo_db_name):
    store = MongoArtifactStore(mongo_uri, mongo_db_name, chunk_size_bytes=1000)
    data = bytes(range(256)) * 40  # 10,240 bytes: 11 chunks, the last one short
    store.write("a", io.BytesIO(data))
    with store.open_reader("a") as reader:
        assert reader.read(10) == data[:10]
        assert reader.read(2500) == data[10:2510]
        assert reader.tell() == 2510
        reader.seek(-5, io.SEEK_END)
        assert reader.read() == data[-5:]
        assert reader.read(1) == b""
        reader.seek(999)
        assert reader.read(3) == data[999:1002]
        reader.seek(0)
        assert reader.read() == data
    store.close()


def test_empty_artifact(store):
    store.write("empty", io.BytesIO(b""))
    assert _read_all(store, "empty") == b""


@pytest.mark.parametrize("backend", ["mongo", "filesystem"])
def test_missing_artifact_raises_artifact_not_found(backend, store, tmp_path):
    if backend == "filesystem":
        store = open_artifact_store(None, home=tmp_path)
    with pytest.raises(ArtifactNotFound):
        store.open_reader("no-such-artifact")
    with pytest.raises(ArtifactNotFound):
        store.remove("no-such-artifact")


def test_remove_deletes_the_file_and_its_chunks(mongo_uri, mongo_db_name, chunks, files):
    store = MongoArtifactStore(mongo_uri, mongo_db_name, chunk_size_bytes=1024)
    store.write("keep", io.BytesIO(b"k" * 3000))
    store.write("gone", io.BytesIO(b"g" * 10_000))
    gone_id = files.find_one({"filename": "gone"})["_id"]
    assert chunks.count_documents({"files_id": gone_id}) == 10

    store.remove("gone")

    assert chunks.count_documents({"files_id": gone_id}) == 0
    assert files.count_documents({"filename": "gone"}) == 0
    assert chunks.count_documents({}) == 3  # the other artifact is untouched
    with pytest.raises(ArtifactNotFound):
        store.open_reader("gone")
    assert _read_all(store, "keep") == b"k" * 3000


def test_rewrite_replaces_the_artifact_and_drops_the_old_chunks(mongo_uri, mongo_db_name, chunks, files):
    store = MongoArtifactStore(mongo_uri, mongo_db_name, chunk_size_bytes=1024)
    store.write("model", io.BytesIO(b"old" * 2000))
    store.write("model", io.BytesIO(b"new!" * 300))
    assert _read_all(store, "model") == b"new!" * 300
    assert files.count_documents({"filename": "model"}) == 1
    assert chunks.count_documents({}) == 2


def test_reader_of_a_replaced_version_never_mixes_versions(mongo_uri, mongo_db_name, monkeypatch):
    monkeypatch.setattr(_artifacts, "_READ_BATCH_BYTES", 2 * 1024)  # two chunks per batch
    store = MongoArtifactStore(mongo_uri, mongo_db_name, chunk_size_bytes=1024)
    old, new = b"o" * 10_240, b"n" * 10_240
    store.write("model", io.BytesIO(old))
    with store.open_reader("model") as reader:
        head = reader.read(1024)
        store.write("model", io.BytesIO(new))  # deletes the version being read
        try:  # an open cursor may still yield the old chunks (servers differ); it never yields new ones
            assert head + reader.read(3000) == old[:4024]
        except CorruptGridFile:
            pass
        reader.seek(6000)  # a fresh query for the old version's chunks finds none
        with pytest.raises(CorruptGridFile, match="missing chunk"):
            reader.read()
    assert _read_all(store, "model") == new


def test_reader_fetches_chunks_in_bounded_batches(mongo_uri, mongo_db_name, monkeypatch):
    monkeypatch.setattr(_artifacts, "_READ_BATCH_BYTES", 4 * 1024)

    class Replies(monitoring.CommandListener):
        def __init__(self):
            self.batch_sizes, self.batch_lengths = [], []

        def started(self, event):
            command = event.command
            if command.get("find") == "artifacts.chunks" or (
                event.command_name == "getMore" and command.get("collection") == "artifacts.chunks"
            ):
                self.batch_sizes.append(command.get("batchSize"))

        def succeeded(self, event):
            cursor = event.reply.get("cursor", {}) if event.command_name in ("find", "getMore") else {}
            if cursor.get("ns", "").endswith("artifacts.chunks"):
                self.batch_lengths.append(len(cursor.get("firstBatch", cursor.get("nextBatch", []))))

        def failed(self, event):
            pass

    replies = Replies()
    client = pymongo.MongoClient(mongo_uri, event_listeners=[replies])
    store = MongoArtifactStore(client, mongo_db_name, chunk_size_bytes=1024)
    data = bytes(range(256)) * 100  # 25,600 bytes: 25 chunks
    store.write("a", io.BytesIO(data))
    replies.batch_sizes.clear()  # count the reads only
    replies.batch_lengths.clear()
    assert _read_all(store, "a") == data
    client.close()

    assert replies.batch_sizes and set(replies.batch_sizes) == {4}
    assert sum(replies.batch_lengths) == 25 and max(replies.batch_lengths) <= 4


def test_failed_write_leaves_no_chunks_and_keeps_the_old_version(mongo_uri, mongo_db_name, chunks, files):
    store = MongoArtifactStore(mongo_uri, mongo_db_name, chunk_size_bytes=1024)
    store.write("model", io.BytesIO(b"v1" * 1000))

    class Broken(io.RawIOBase):
        def __init__(self):
            self.calls = 0

        def readable(self):
            return True

        def read(self, size=-1):
            self.calls += 1
            if self.calls > 3:
                raise OSError("disk went away")
            return b"x" * size

    with pytest.raises(OSError, match="disk went away"):
        store.write("model", Broken())
    assert files.count_documents({}) == 1
    assert chunks.count_documents({}) == 2
    assert _read_all(store, "model") == b"v1" * 1000


def test_store_built_from_a_url_pickles_and_reconnects(store, tmp_path):
    store.write("a", io.BytesIO(b"payload"))
    assert _read_all(store, "a") == b"payload"  # connected before pickling
    clone = pickle.loads(pickle.dumps(store))
    assert _read_all(clone, "a") == b"payload"
    clone.close()


def test_store_built_from_a_client_refuses_to_pickle(mongo_client, mongo_db_name):
    store = MongoArtifactStore(mongo_client, mongo_db_name)
    with pytest.raises(TypeError, match="build it from a URI"):
        pickle.dumps(store)


def test_bad_arguments_say_what_is_wrong(mongo_uri):
    with pytest.raises(TypeError, match="MongoDB URI or a MongoClient"):
        MongoArtifactStore(42)
    with pytest.raises(ValueError, match="chunk_size_bytes"):
        MongoArtifactStore(mongo_uri, chunk_size_bytes=0)


def test_optuna_dashboard_serves_a_trial_artifact(store, tmp_path):
    optuna_dashboard = pytest.importorskip("optuna_dashboard")
    from wsgiref.util import setup_testing_defaults

    source = tmp_path / "curve.txt"
    source.write_text("loss 0.3")
    study = _study()
    trial = study.ask()
    artifact_id = upload_artifact(artifact_store=store, file_path=str(source), study_or_trial=trial)
    study.tell(trial, 0.3)

    app = optuna_dashboard.wsgi(study._storage, artifact_store=store)
    environ: dict = {}
    setup_testing_defaults(environ)
    environ["PATH_INFO"] = f"/artifacts/{study._study_id}/{trial._trial_id}/{artifact_id}"
    statuses = []
    body = b"".join(app(environ, lambda status, headers, exc_info=None: statuses.append(status)))
    assert statuses == ["200 OK"]
    assert body == b"loss 0.3"


def test_open_artifact_store_picks_the_backend(tmp_path, mongo_uri):
    local = open_artifact_store(None, home=tmp_path / "home")
    assert isinstance(local, FileSystemArtifactStore)
    assert (tmp_path / "home" / "artifacts").is_dir()
    remote = open_artifact_store(mongo_uri, database="elsewhere", home=tmp_path / "unused")
    assert isinstance(remote, MongoArtifactStore)
    assert not (tmp_path / "unused").exists()
