"""The local-directory dataset store (the embedded default), under `<home>/datasets`.

Layout: `records/NAME/VERSION.json` (one per version), `contents/HASH/ARRAY.npy` (one folder per content),
`fold_plans/HASH/{plan.json,indices.npy}`, `tmp/` (staging), `locks/` (one writer per content). Bytes are staged in `tmp/` and renamed into
place, and every change to records and contents happens under one file lock, so a half-written push is
never visible and concurrent pushes settle on one outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import BinaryIO

import numpy as np
from filelock import FileLock

from tlsearch._files import write_file
from tlsearch.data._folds import FoldPlan
from tlsearch.data._info import DatasetInfo, parse_ref
from tlsearch.data._npy import PIECE_BYTES, write_npy
from tlsearch.data._paths import check_sha256, confined
from tlsearch.data._store import DatasetStore, Progress, version_for_push
from tlsearch.errors import DatasetCorruptedError, DatasetNotFoundError, FoldPlanNotFoundError

_STALE_TMP_SECONDS = 24 * 3600


class LocalDatasetStore(DatasetStore):
    """Datasets in a folder on this host (see the module docstring for the layout)."""

    def __init__(self, root: str | os.PathLike) -> None:
        super().__init__()
        self.root = Path(root).expanduser().absolute()
        self._records = self.root / "records"
        self._contents = self.root / "contents"
        self._plans = self.root / "fold_plans"
        self._tmp = self.root / "tmp"
        self._mutex: FileLock | None = None

    def __getstate__(self) -> dict:
        return {"root": self.root}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["root"])

    def describe(self) -> str:
        return f"local dataset store {self.root}"

    def _lock(self) -> FileLock:
        if self._mutex is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._mutex = FileLock(str(self.root / ".lock"))
        return self._mutex

    # -- records ---------------------------------------------------------------------------------------
    def _record_path(self, name: str, version: int) -> Path:
        return self._records / name / f"{version}.json"

    def _version_numbers(self, name: str) -> list[int]:
        folder = self._records / name
        if not folder.is_dir():
            return []
        return sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit())

    def _read_record(self, path: Path) -> DatasetInfo:
        try:
            return DatasetInfo.from_document(json.loads(path.read_text()))
        except FileNotFoundError:
            raise
        except (ValueError, KeyError, TypeError) as error:
            raise DatasetCorruptedError(f"dataset record {path} is damaged: {error}") from None

    def _latest(self, name: str) -> DatasetInfo | None:
        for version in reversed(self._version_numbers(name)):
            try:
                return self._read_record(self._record_path(name, version))
            except FileNotFoundError:  # deleted meanwhile
                continue
        return None

    def info(self, ref: str) -> DatasetInfo:
        name, version = parse_ref(ref)
        if version is None:
            info = self._latest(name)
            if info is None:
                raise self._not_found(ref)
            return info
        try:
            return self._read_record(self._record_path(name, version))
        except FileNotFoundError:
            raise self._not_found(ref) from None

    def list(self) -> list[DatasetInfo]:
        if not self._records.is_dir():
            return []
        infos = []
        for folder in sorted(p for p in self._records.iterdir() if p.is_dir()):
            for version in self._version_numbers(folder.name):
                try:
                    infos.append(self._read_record(self._record_path(folder.name, version)))
                except FileNotFoundError:
                    continue
        return infos

    # -- push --------------------------------------------------------------------------------------------
    def _push(self, name, arrays, content_hash, metadata, new_version, progress):
        decision = version_for_push(name, self._latest(name), content_hash, new_version)
        if isinstance(decision, DatasetInfo):
            return decision
        # One writer per content: a concurrent push of the same bytes waits, then finds them stored.
        (self.root / "locks").mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.root / "locks" / f"{content_hash}.lock")):
            return self._push_locked(name, arrays, content_hash, metadata, new_version, progress)

    def _push_locked(self, name, arrays, content_hash, metadata, new_version, progress):
        staged = None if (self._contents / content_hash).is_dir() else self._stage(arrays, progress)
        try:
            with self._lock():
                decision = version_for_push(name, self._latest(name), content_hash, new_version)
                if isinstance(decision, DatasetInfo):
                    return decision
                if not (self._contents / content_hash).is_dir():
                    if staged is None:  # the content was deleted since we looked
                        staged = self._stage(arrays, progress)
                    self._contents.mkdir(parents=True, exist_ok=True)
                    os.rename(staged, self._contents / content_hash)
                    staged = None
                info = DatasetInfo.of(name, decision, content_hash, arrays, metadata)
                document = info.to_document()
                document["created"] = info.created.isoformat()
                self._write_json(self._record_path(name, decision), document)
                return info
        finally:
            if staged is not None:
                shutil.rmtree(staged, ignore_errors=True)

    def _new_tmp(self) -> Path:
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._sweep_tmp()
        path = self._tmp / f"{os.getpid()}-{uuid.uuid4().hex}"
        path.mkdir()
        return path

    def _sweep_tmp(self) -> None:
        """Remove staging folders a crashed process left behind."""
        cutoff = time.time() - _STALE_TMP_SECONDS
        for entry in self._tmp.iterdir():
            try:
                if entry.stat().st_mtime < cutoff:
                    shutil.rmtree(entry, ignore_errors=True)
            except FileNotFoundError:
                pass

    def _stage(self, arrays: dict[str, np.ndarray], progress: Progress | None) -> Path:
        folder = self._new_tmp()
        try:
            for array_name, array in arrays.items():
                with open(folder / f"{array_name}.npy", "wb") as file:
                    self.stats.bytes_sent += write_npy(array, file, progress)
                    file.flush()
                    os.fsync(file.fileno())  # whole on disk before the folder is renamed into place
                self.stats.arrays_sent += 1
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder

    def _write_json(self, path: Path, document: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, json.dumps(document, indent=1))

    # -- delete ------------------------------------------------------------------------------------------
    def delete(self, ref: str, *, all_versions: bool = False) -> list[DatasetInfo]:
        name, version = parse_ref(ref)
        with self._lock():
            if all_versions and version is None:
                targets = self.versions(name)
                if not targets:
                    raise self._not_found(ref)
            else:
                targets = [self.info(ref)]
            for info in targets:
                self._record_path(info.name, info.version).unlink(missing_ok=True)
            try:
                (self._records / name).rmdir()
            except OSError:
                pass
            used = {info.hash for info in self.list()}
            for content_hash in {info.hash for info in targets} - used:
                self._purge_content(content_hash)
        return targets

    def _purge_content(self, content_hash: str) -> None:
        trash = self._new_tmp()
        for plan_folder in self._plans.glob("*") if self._plans.is_dir() else []:
            try:
                document = json.loads((plan_folder / "plan.json").read_text())
            except (OSError, ValueError):
                continue
            if document.get("dataset_hash") == content_hash:
                os.rename(plan_folder, trash / plan_folder.name)
        if (self._contents / content_hash).is_dir():
            os.rename(self._contents / content_hash, trash / "content")
        shutil.rmtree(trash, ignore_errors=True)

    # -- read ----------------------------------------------------------------------------------------------
    def read_array(self, info: DatasetInfo, array: str, sink: BinaryIO, progress: Progress | None = None) -> int:
        path = self._contents / info.hash / f"{array}.npy"
        try:
            file = open(path, "rb")
        except FileNotFoundError:
            raise DatasetNotFoundError(f"array {array!r} of {info.ref} is missing from {self.describe()}") from None
        total = 0
        with file:
            while piece := file.read(PIECE_BYTES):
                sink.write(piece)
                total += len(piece)
                if progress:
                    progress(len(piece))
        self.stats.bytes_received += total
        return total

    def link_array(self, info: DatasetInfo, array: str, path: Path) -> bool:
        # Stored files are never written again (content-addressed, renamed into place whole), so a hard link
        # is as good as a copy; a delete here only removes this store's name for them.
        try:
            os.link(self._contents / info.hash / f"{array}.npy", path)
        except FileNotFoundError:
            raise DatasetNotFoundError(f"array {array!r} of {info.ref} is missing from {self.describe()}") from None
        except OSError:  # another file system (EXDEV), or one without hard links
            return False
        return True

    # -- fold plans ------------------------------------------------------------------------------------------
    def put_fold_plan(self, plan: FoldPlan) -> FoldPlan:
        target = self._plans / plan.hash
        if target.is_dir():
            return plan
        if not (self._contents / plan.dataset_hash).is_dir():
            raise DatasetNotFoundError(
                f"the dataset of fold plan {plan.hash[:12]} (sha256 {plan.dataset_hash[:12]}) is not in {self.describe()}"
            )
        staged = self._new_tmp()
        try:
            indices = plan.packed_indices()
            with open(staged / "indices.npy", "wb") as file:
                self.stats.bytes_sent += write_npy(indices, file)
            (staged / "plan.json").write_text(json.dumps(plan.to_document(), indent=1))
            with self._lock():
                if not target.is_dir():
                    self._plans.mkdir(parents=True, exist_ok=True)
                    os.rename(staged, target)
                    staged = None
        finally:
            if staged is not None:
                shutil.rmtree(staged, ignore_errors=True)
        return plan

    def get_fold_plan(self, plan_hash: str) -> FoldPlan:
        folder = confined(self._plans, check_sha256(plan_hash, "fold plan hash"))
        try:
            document = json.loads((folder / "plan.json").read_text())
            with open(folder / "indices.npy", "rb") as file:
                indices = np.load(file, allow_pickle=False)
        except FileNotFoundError:
            raise FoldPlanNotFoundError(f"no fold plan {str(plan_hash)[:12]} in {self.describe()}") from None
        except ValueError as error:
            raise DatasetCorruptedError(f"fold plan {str(plan_hash)[:12]} is damaged: {error}") from None
        self.stats.bytes_received += indices.nbytes
        return FoldPlan.from_stored(document, indices)
