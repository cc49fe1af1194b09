"""The MongoDB dataset store: arrays as .npy files in the GridFS bucket "datasets", records as documents.

Collections (database chosen by the caller):
- `datasets`: one record per version {name, version, hash, arrays, metadata, created, size_bytes};
  unique index (name, version) settles concurrent pushes of the same name.
- `datasets.contents`: one document per stored content {_id: hash, state, owner, refs, files, heartbeat}.
  `state` goes uploading → ready → deleting; `refs` lists the records using it. Every transition is a
  single-document update whose filter states the expected old state (compare-and-set), so concurrent
  pushes upload a content once and a delete never removes bytes a record still uses.
- `datasets.files` / `datasets.chunks`: standard GridFS layout (readable by other GridFS tools), written
  and read by our own code in bounded batches: chunks of 4 MiB, at most 12 MiB per reply (a real MongoDB
  caps replies at 16 MiB; the test server fails on a reply over 48 MB).
- `fold_plans`: {_id: plan hash, dataset_hash, splitter, n_rows, sizes, file}; the indices are a GridFS file.

A process that dies mid-upload or mid-delete leaves a content document whose heartbeat stops; the next
push of that content takes it over after STALE_SECONDS and removes what was left.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import BinaryIO

import numpy as np
import pymongo
from bson import ObjectId
from pymongo.errors import DuplicateKeyError

from tlsearch._renamed import renamed_keywords
from tlsearch.config import database_name
from tlsearch.data._folds import FoldPlan
from tlsearch.data._info import DatasetInfo, check_name, parse_ref
from tlsearch.data._npy import iter_npy
from tlsearch.data._paths import check_sha256
from tlsearch.data._store import DatasetStore, Progress, version_for_push
from tlsearch.errors import (
    DatasetBusyError,
    DatasetCorruptedError,
    DatasetNotFoundError,
    FoldPlanNotFoundError,
    GridFSDamagedError,
)
from tlsearch.mongo import connect, read_gridfs_chunks, write_gridfs_file

CHUNK_BYTES = 4 << 20  # measured on the test server: 1 MiB ≈ 110 MB/s in, 4-8 MiB ≈ 135 MB/s in and faster out
READ_BATCH_BYTES = 12 << 20
WRITE_BATCH_BYTES = 4 << 20  # a push holds a batch twice (its chunks, then the message): kept to one chunk
STALE_SECONDS = 120
WAIT_SECONDS = 600
DANGLING_PIN_SECONDS = 3600
BUCKET = "datasets"


class MongoDatasetStore(DatasetStore):
    """Datasets in MongoDB (see the module docstring). Picklable when built from a URI: it reconnects lazily."""

    @renamed_keywords(url_or_client="uri_or_client")
    def __init__(
        self,
        uri_or_client: str | pymongo.MongoClient,
        database: str | None = None,
        *,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        super().__init__()
        if isinstance(uri_or_client, str):
            self._uri, self._client, self._owns_client = uri_or_client, None, True
        else:
            self._uri, self._client, self._owns_client = None, uri_or_client, False
        self.database = database_name(uri_or_client, database)
        self.chunk_bytes = int(chunk_bytes)
        self.block_bytes = self.chunk_bytes  # a push hashes and uploads one GridFS chunk of rows at a time
        self._indexes_ready = False

    def __getstate__(self) -> dict:
        if self._uri is None:
            raise TypeError("a MongoDatasetStore built from a MongoClient cannot be pickled; build it from a URI")
        return {"uri": self._uri, "database": self.database, "chunk_bytes": self.chunk_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["uri"], state["database"], chunk_bytes=state["chunk_bytes"])

    def describe(self) -> str:
        where = re.sub(r"(?<=://)[^@/]*@", "***@", self._uri) if self._uri else "client"
        return f"MongoDB {where} (database {self.database!r})"

    def close(self) -> None:
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None

    # -- collections -----------------------------------------------------------------------------------
    @property
    def _db(self):
        if self._client is None:
            self._client = connect(self._uri, tz_aware=True, appname="tlsearch-datasets")
        return self._client.get_database(self.database)

    @property
    def _records(self):
        return self._db[BUCKET]

    @property
    def _contents(self):
        return self._db[f"{BUCKET}.contents"]

    @property
    def _files(self):
        return self._db[f"{BUCKET}.files"]

    @property
    def _chunks(self):
        return self._db[f"{BUCKET}.chunks"]

    @property
    def _plans(self):
        return self._db["fold_plans"]

    def _ensure_indexes(self) -> None:
        if self._indexes_ready:
            return
        self._records.create_index([("name", 1), ("version", 1)], unique=True)
        self._records.create_index("hash")
        self._chunks.create_index([("files_id", 1), ("n", 1)], unique=True)
        self._files.create_index([("filename", 1), ("uploadDate", 1)])
        self._files.create_index("metadata.upload")
        self._files.create_index("metadata.dataset_hash")
        self._plans.create_index("dataset_hash")
        self._indexes_ready = True

    # -- records -----------------------------------------------------------------------------------------
    def _latest(self, name: str) -> DatasetInfo | None:
        doc = self._records.find_one({"name": name}, sort=[("version", -1)])
        return None if doc is None else DatasetInfo.from_document(doc)

    def info(self, ref: str) -> DatasetInfo:
        name, version = parse_ref(ref)
        if version is None:
            doc = self._records.find_one({"name": name}, sort=[("version", -1)])
        else:
            doc = self._records.find_one({"name": name, "version": version})
        if doc is None:
            raise self._not_found(ref)
        return DatasetInfo.from_document(doc)

    def list(self) -> list[DatasetInfo]:
        return [DatasetInfo.from_document(doc) for doc in self._records.find({}, sort=[("name", 1), ("version", 1)])]

    def versions(self, name: str) -> list[DatasetInfo]:
        check_name(name)
        return [DatasetInfo.from_document(doc) for doc in self._records.find({"name": name}, sort=[("version", 1)])]

    # -- push ----------------------------------------------------------------------------------------------
    def _push(self, name, arrays, content_hash, metadata, new_version, progress):
        self._ensure_indexes()
        for _ in range(10):  # retried only when another push took the same name@version first
            decision = version_for_push(name, self._latest(name), content_hash, new_version)
            if isinstance(decision, DatasetInfo):
                return decision
            record_id = ObjectId()
            self._acquire_content(content_hash, arrays, record_id, progress)
            info = DatasetInfo.of(name, decision, content_hash, arrays, metadata)
            try:
                self._records.insert_one({"_id": record_id, **info.to_document()})
                return info
            except DuplicateKeyError:
                self._release_content(content_hash, record_id)
            except BaseException:
                self._release_content(content_hash, record_id)
                raise
        raise DatasetBusyError(f"dataset {name!r} is being pushed by others right now; try again")

    def _acquire_content(
        self, content_hash: str, arrays: dict[str, np.ndarray], pin: ObjectId, progress: Progress | None
    ) -> bool:
        """Pin the content for record `pin`, uploading it first when it is not stored; True if uploaded."""
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            if self._contents.update_one(
                {"_id": content_hash, "state": "ready"}, {"$addToSet": {"refs": pin}}
            ).matched_count:
                return False
            owner = ObjectId()
            try:
                self._contents.insert_one(
                    {
                        "_id": content_hash,
                        "state": "uploading",
                        "owner": owner,
                        "refs": [pin],
                        "heartbeat": datetime.now(timezone.utc),
                        "files": {},
                    }
                )
            except DuplicateKeyError:
                self._wait_for_other(content_hash, deadline)
                continue
            self._beat(content_hash, owner)
            try:
                files = {}
                for array_name, array in arrays.items():
                    files[array_name] = self._upload(
                        iter_npy(array, self.block_bytes),
                        f"{content_hash}/{array_name}.npy",
                        {"kind": "array", "dataset_hash": content_hash, "array": array_name, "upload": owner},
                        progress,
                        heartbeat=lambda: self._beat(content_hash, owner),
                    )
                    self.stats.arrays_sent += 1
                done = self._contents.update_one(
                    {"_id": content_hash, "owner": owner, "state": "uploading"},
                    {"$set": {"state": "ready", "files": files}},
                )
                if not done.modified_count:
                    raise DatasetBusyError(f"the upload of content {content_hash[:12]} was taken over as stale")
                return True
            except BaseException:
                self._delete_files({"metadata.upload": owner})
                self._contents.delete_one({"_id": content_hash, "owner": owner, "state": "uploading"})
                raise

    def _beat(self, content_hash: str, owner: ObjectId) -> None:
        """Refresh the heartbeat (server clock) of our own upload; stop if someone took it over."""
        if not self._contents.update_one(
            {"_id": content_hash, "owner": owner, "state": "uploading"}, {"$currentDate": {"heartbeat": True}}
        ).matched_count:
            raise DatasetBusyError(f"the upload of content {content_hash[:12]} was taken over as stale")

    def _wait_for_other(self, content_hash: str, deadline: float) -> None:
        """Another process uploads or deletes this content: wait, or take over when its heartbeat stopped."""
        doc = self._contents.find_one({"_id": content_hash})
        if doc is None or doc["state"] == "ready":
            return
        stale = self._contents.find_one(
            {
                "_id": content_hash,
                "owner": doc["owner"],
                "state": doc["state"],
                "heartbeat": doc["heartbeat"],
                "$expr": {"$lt": ["$heartbeat", {"$subtract": ["$$NOW", STALE_SECONDS * 1000]}]},
            },
            {"_id": 1},
        )
        if (
            stale
            and self._contents.update_one(
                {"_id": content_hash, "owner": doc["owner"], "state": doc["state"], "heartbeat": doc["heartbeat"]},
                {"$set": {"state": "deleting"}, "$currentDate": {"heartbeat": True}},
            ).modified_count
        ):
            self._purge(content_hash, doc["owner"])
            return
        if time.monotonic() > deadline:
            raise DatasetBusyError(
                f"content sha256 {content_hash[:12]} has been {doc['state']} by another process for too long; "
                "try again later"
            )
        time.sleep(0.2)

    def _upload(
        self, pieces: Iterable[memoryview], filename: str, metadata: dict, progress: Progress | None, heartbeat=None
    ) -> dict:
        """Write one GridFS file from byte pieces (see `tlsearch.mongo.write_gridfs_file`: a cleanup by
        `metadata.upload` finds the chunks of an upload that died halfway)."""

        def sent(nbytes: int) -> None:
            self.stats.bytes_sent += nbytes
            if progress:
                progress(nbytes)
            if heartbeat:
                heartbeat()

        file_id, length = write_gridfs_file(
            self._files,
            self._chunks,
            pieces,
            filename=filename,
            metadata=metadata,
            chunk_size=self.chunk_bytes,
            batch_bytes=WRITE_BATCH_BYTES,
            on_batch=sent,
        )
        return {"id": file_id, "length": length, "chunk_size": self.chunk_bytes}

    # -- delete ----------------------------------------------------------------------------------------------
    def delete(self, ref: str, *, all_versions: bool = False) -> list[DatasetInfo]:
        name, version = parse_ref(ref)
        if all_versions and version is None:
            docs = list(self._records.find({"name": name}, sort=[("version", 1)]))
        else:
            info = self.info(ref)
            docs = [self._records.find_one({"name": info.name, "version": info.version})]
        docs = [doc for doc in docs if doc is not None]
        if not docs:
            raise self._not_found(ref)
        deleted = []
        for doc in docs:
            if self._records.delete_one({"_id": doc["_id"]}).deleted_count:
                deleted.append(DatasetInfo.from_document(doc))
                self._release_content(doc["hash"], doc["_id"])
        return deleted

    def _release_content(self, content_hash: str, pin: ObjectId) -> None:
        """Unpin the content for record `pin`; the last one out removes the content's bytes and fold plans."""
        self._contents.update_one({"_id": content_hash}, {"$pull": {"refs": pin}})
        self._drop_dangling_pins(content_hash)
        if self._contents.update_one(
            {"_id": content_hash, "state": "ready", "refs": {"$size": 0}},
            {"$set": {"state": "deleting"}, "$currentDate": {"heartbeat": True}},
        ).modified_count:
            doc = self._contents.find_one({"_id": content_hash})
            if doc is not None:
                self._purge(content_hash, doc["owner"])

    def _drop_dangling_pins(self, content_hash: str) -> None:
        """Pins of pushes that died between pinning and writing their record (old, with no record)."""
        doc = self._contents.find_one({"_id": content_hash}, {"refs": 1})
        cutoff = datetime.now(timezone.utc) - timedelta(seconds=DANGLING_PIN_SECONDS)
        for pin in (doc or {}).get("refs", []):
            if pin.generation_time < cutoff and self._records.find_one({"_id": pin}, {"_id": 1}) is None:
                self._contents.update_one({"_id": content_hash}, {"$pull": {"refs": pin}})

    def _purge(self, content_hash: str, owner: ObjectId) -> None:
        """Remove a content marked deleting: its fold plans, its files (chunks first), then its document.
        Safe to repeat: a purge cut short is finished by whoever takes the content over later."""
        for plan in self._plans.find({"dataset_hash": content_hash}, {"file": 1}):
            self._delete_files({"_id": plan["file"]["id"]})
            self._plans.delete_one({"_id": plan["_id"]})
        self._delete_files({"metadata.dataset_hash": content_hash, "metadata.kind": "fold_plan"})
        self._delete_files({"metadata.upload": owner})
        self._contents.delete_one({"_id": content_hash, "owner": owner, "state": "deleting"})

    def _delete_files(self, query: dict) -> None:
        for file in self._files.find(query, {"_id": 1}):
            self._chunks.delete_many({"files_id": file["_id"]})
            self._files.delete_one({"_id": file["_id"]})

    # -- read ------------------------------------------------------------------------------------------------
    def read_array(self, info: DatasetInfo, array: str, sink: BinaryIO, progress: Progress | None = None) -> int:
        doc = self._contents.find_one({"_id": info.hash}, {"state": 1, "files": 1})
        if doc is None or doc["state"] != "ready":
            raise DatasetNotFoundError(f"{info.ref} was deleted from {self.describe()}")
        file = doc["files"].get(array)
        if file is None:
            raise DatasetCorruptedError(f"array {array!r} of {info.ref} is missing from {self.describe()}")
        total = self._download(file, sink, progress, f"stored array {array!r} of {info.ref}")
        return total

    def _download(self, file: dict, sink: BinaryIO, progress: Progress | None, what: str) -> int:
        """Read one GridFS file's chunks in order, at most READ_BATCH_BYTES per reply, checking each."""
        total = 0
        try:
            for data in read_gridfs_chunks(
                self._chunks, file["id"], int(file["length"]), int(file["chunk_size"]), batch_bytes=READ_BATCH_BYTES
            ):
                sink.write(data)
                total += len(data)
                self.stats.bytes_received += len(data)
                if progress:
                    progress(len(data))
        except GridFSDamagedError as error:
            raise DatasetCorruptedError(
                f"{what} is {error.problem} in the store ({error.detail}); delete it and push it again"
            ) from None
        return total

    # -- fold plans ----------------------------------------------------------------------------------------------
    def put_fold_plan(self, plan: FoldPlan) -> FoldPlan:
        self._ensure_indexes()
        if self._plans.find_one({"_id": plan.hash}, {"_id": 1}) is not None:
            return plan
        if self._contents.find_one({"_id": plan.dataset_hash, "state": "ready"}, {"_id": 1}) is None:
            raise DatasetNotFoundError(
                f"the dataset of fold plan {plan.hash[:12]} (sha256 {plan.dataset_hash[:12]}) is not in {self.describe()}"
            )
        upload = ObjectId()
        file = self._upload(
            iter_npy(plan.packed_indices()),
            f"fold_plans/{plan.hash}.npy",
            {"kind": "fold_plan", "dataset_hash": plan.dataset_hash, "fold_plan": plan.hash, "upload": upload},
            None,
        )
        document = {**plan.to_document(), "_id": plan.hash, "file": file, "created": datetime.now(timezone.utc)}
        try:
            self._plans.insert_one(document)
        except DuplicateKeyError:  # stored meanwhile by another process
            self._delete_files({"_id": file["id"]})
        except BaseException:
            self._delete_files({"_id": file["id"]})
            raise
        return plan

    def get_fold_plan(self, plan_hash: str) -> FoldPlan:
        document = self._plans.find_one({"_id": check_sha256(plan_hash, "fold plan hash")})
        if document is None:
            raise FoldPlanNotFoundError(f"no fold plan {str(plan_hash)[:12]} in {self.describe()}")
        buffer = io.BytesIO()
        self._download(document["file"], buffer, None, f"fold plan {str(plan_hash)[:12]}")
        buffer.seek(0)
        try:
            indices = np.load(buffer, allow_pickle=False)
        except ValueError as error:
            raise DatasetCorruptedError(f"fold plan {str(plan_hash)[:12]} is damaged: {error}") from None
        return FoldPlan.from_stored(document, indices)
