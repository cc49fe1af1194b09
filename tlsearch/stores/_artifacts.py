"""Trial and study artifacts (model files, plots, logs) for `optuna.artifacts`, kept in MongoDB GridFS.

`MongoArtifactStore` implements Optuna's `ArtifactStore` protocol on GridFS bucket "artifacts" of the study
database, so `optuna.artifacts.upload_artifact` / `download_artifact` and optuna-dashboard work with it.
`open_artifact_store` picks it, or Optuna's `FileSystemArtifactStore` under the embedded default's root.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pymongo
from gridfs.errors import CorruptGridFile
from optuna.artifacts import FileSystemArtifactStore
from optuna.artifacts.exceptions import ArtifactNotFound

from tlsearch._renamed import renamed_keywords
from tlsearch.config import database_name
from tlsearch.errors import GridFSDamagedError
from tlsearch.mongo import UPLOADING, connect, read_gridfs_chunks, write_gridfs_file

if TYPE_CHECKING:
    from pymongo.collection import Collection
    from pymongo.database import Database

    from tlsearch._compat.optuna import ArtifactStore

__all__ = ["MongoArtifactStore", "open_artifact_store"]

# A reply of chunk documents stays near this size: a real MongoDB caps a batch at 16 MiB, the test server
# (mongo-java-server) does not cap it at all and fails above 48 MB.
_READ_BATCH_BYTES = 8 * 1024 * 1024


class MongoArtifactStore:
    """Optuna artifacts on GridFS: one GridFS file per artifact, named by its artifact id.

    Writes stream from the source in `chunk_size_bytes` pieces (`tlsearch.mongo.write_gridfs_file`, the package's
    one GridFS writer); readers fetch chunk documents in bounded
    batches, so no artifact is ever held whole in memory. Re-writing an id uploads the new file completely
    before deleting the old one, so a reader gets the old bytes or the new bytes, never a mix (a reader that
    is mid-way through a file deleted under it fails with `CorruptGridFile` rather than return short data).
    Built from a URI, the store pickles to its settings and reconnects lazily (for Dask workers);
    built from a `MongoClient`, it uses that client and cannot be pickled.
    """

    @renamed_keywords(url_or_client="uri_or_client")
    def __init__(
        self,
        uri_or_client: str | pymongo.MongoClient,
        database: str | None = None,
        *,
        bucket: str = "artifacts",
        chunk_size_bytes: int = 1024 * 1024,
    ) -> None:
        if not isinstance(uri_or_client, (str, pymongo.MongoClient)):
            raise TypeError(f"uri_or_client must be a MongoDB URI or a MongoClient, got {type(uri_or_client).__name__}")
        if chunk_size_bytes < 1:
            raise ValueError(f"chunk_size_bytes must be positive, got {chunk_size_bytes}")
        self._uri = uri_or_client if isinstance(uri_or_client, str) else None
        self._client = uri_or_client if isinstance(uri_or_client, pymongo.MongoClient) else None
        self._database_name = database_name(uri_or_client, database)
        self._bucket_name = bucket
        self._chunk_size = chunk_size_bytes
        self._connect_lock = threading.Lock()

    # -- ArtifactStore protocol

    def open_reader(self, artifact_id: str) -> BinaryIO:
        """A buffered binary reader over the artifact's newest complete version; `ArtifactNotFound` if none."""
        file_doc = self._newest_file(artifact_id)
        if file_doc is None:
            raise ArtifactNotFound(f"artifact {artifact_id!r} not found in GridFS bucket {self._bucket_name!r}")
        raw = _GridFSChunkReader(self._chunks, file_doc)
        return io.BufferedReader(raw, buffer_size=raw.chunk_size)

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        """Store everything `content_body` yields under `artifact_id`, replacing any earlier version."""
        _check_artifact_id(artifact_id)
        pieces = iter(lambda: content_body.read(self._chunk_size), b"")  # the source one chunk at a time
        write_gridfs_file(self._files, self._chunks, pieces, filename=artifact_id, chunk_size=self._chunk_size)
        self._delete_versions(artifact_id, keep_newest=True)

    def remove(self, artifact_id: str) -> None:
        """Delete every version of the artifact with its chunks; `ArtifactNotFound` if there is none."""
        if not self._delete_versions(artifact_id, keep_newest=False):
            raise ArtifactNotFound(f"artifact {artifact_id!r} not found in GridFS bucket {self._bucket_name!r}")

    # -- connection

    def close(self) -> None:
        """Close the client if this store opened it (built from a URI); a later call reconnects."""
        if self._uri is not None and self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict[str, Any]:
        if self._uri is None:
            raise TypeError("a MongoArtifactStore built from a MongoClient cannot be pickled; build it from a URI")
        return {**self.__dict__, "_client": None, "_connect_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _connect_lock=threading.Lock())

    def __repr__(self) -> str:
        return f"MongoArtifactStore(database={self._database_name!r}, bucket={self._bucket_name!r})"

    @property
    def _database(self) -> Database:
        if self._client is None:
            with self._connect_lock:
                if self._client is None:
                    self._client = connect(self._uri, appname="tlsearch-artifacts")
        return self._client[self._database_name]

    @property
    def _files(self) -> Collection:
        return self._database[f"{self._bucket_name}.files"]

    @property
    def _chunks(self) -> Collection:
        return self._database[f"{self._bucket_name}.chunks"]

    # -- versions

    # A file document marked UPLOADING is a version still being written (or whose writer died): not a version yet.
    _NEWEST_FIRST = [("uploadDate", pymongo.DESCENDING), ("_id", pymongo.DESCENDING)]

    def _newest_file(self, artifact_id: str) -> dict[str, Any] | None:
        _check_artifact_id(artifact_id)
        return self._files.find_one({"filename": artifact_id, UPLOADING: {"$exists": False}}, sort=self._NEWEST_FIRST)

    def _delete_versions(self, artifact_id: str, *, keep_newest: bool) -> int:
        """Delete the versions of `artifact_id` (with any left half-written), or all complete ones but the newest;
        return how many were deleted.

        Concurrent writers of one id all keep the same newest version, so they never delete each other's last copy,
        and none deletes a version another is still writing.
        """
        _check_artifact_id(artifact_id)
        query: dict[str, Any] = {"filename": artifact_id}
        if keep_newest:
            query[UPLOADING] = {"$exists": False}
        versions = list(self._files.find(query, {"_id": 1}).sort(self._NEWEST_FIRST))
        if keep_newest:
            versions = versions[1:]
        for doc in versions:
            # The file document goes first, so no new reader picks a version whose chunks are disappearing.
            self._files.delete_one({"_id": doc["_id"]})
            self._chunks.delete_many({"files_id": doc["_id"]})
        return len(versions)


class _GridFSChunkReader(io.RawIOBase):
    """Raw, seekable reader of one GridFS file that fetches its chunk documents a bounded batch at a time."""

    def __init__(self, chunks: Collection, file_doc: dict[str, Any]) -> None:
        super().__init__()
        self._chunks = chunks
        self._file_id = file_doc["_id"]
        self.length: int = file_doc["length"]
        self.chunk_size: int = file_doc["chunkSize"]
        self._n_chunks = -(-self.length // self.chunk_size)
        self._position = 0
        self._chunk_n = -1  # index of the chunk held in self._chunk_data
        self._chunk_data = b""
        self._reading: Generator[bytes, None, None] | None = None  # the chunks from self._next_n on
        self._next_n = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._check_not_closed()
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_not_closed()
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.length}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence {whence!r}")
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: Any) -> int:
        self._check_not_closed()
        if self._position >= self.length:
            return 0
        n, start = divmod(self._position, self.chunk_size)
        if n != self._chunk_n:
            self._chunk_data = self._fetch_chunk(n)
            self._chunk_n = n
        view = memoryview(buffer).cast("B")
        piece = self._chunk_data[start : start + len(view)]
        view[: len(piece)] = piece
        self._position += len(piece)
        return len(piece)

    def close(self) -> None:
        self._stop_reading()
        self._chunk_data = b""
        super().close()

    def _stop_reading(self) -> None:
        if self._reading is not None:
            self._reading.close()  # closes its cursor
            self._reading = None

    def _fetch_chunk(self, n: int) -> bytes:
        if self._reading is None or self._next_n != n:
            self._stop_reading()
            self._reading = read_gridfs_chunks(
                self._chunks, self._file_id, self.length, self.chunk_size, first=n, batch_bytes=_READ_BATCH_BYTES
            )
        try:
            data = next(self._reading)
        except (StopIteration, GridFSDamagedError) as error:
            self._stop_reading()
            raise CorruptGridFile(
                f"GridFS file {self._file_id} is missing chunk {n} of {self._n_chunks} or it is "
                f"damaged ({error or 'truncated'}; deleted or replaced while being read?)"
            ) from None
        self._next_n = n + 1
        return data

    def _check_not_closed(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed artifact reader")


def _check_artifact_id(artifact_id: str) -> None:
    if not isinstance(artifact_id, str) or not artifact_id:
        raise ValueError(f"artifact_id must be a non-empty string, got {artifact_id!r}")


@renamed_keywords(mongo_uri="mongo", root="home")
def open_artifact_store(mongo: str | None, *, database: str | None = None, home: str | Path) -> ArtifactStore:
    """The artifact store next to the study store: GridFS when the URI `mongo` is given, else
    `home / "artifacts"`. `mongo_uri=` and `root=` are the deprecated names of `mongo=` and `home=`."""
    if mongo:
        return MongoArtifactStore(mongo, database)
    directory = Path(home) / "artifacts"
    directory.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(directory)
