"""The host-local dataset cache: each host downloads a dataset once, and every process maps it read-only.

Layout of the cache folder (default: the settings' `cache_dir`, see `tlsearch.Settings`):
  data/HASH/ARRAY.npy + verified.json     a dataset's arrays, as downloaded and checked
  plans/PLAN/{plan.json,indices.npy}      fold plans fetched from the store
  layouts/HASH/PLAN/...                   fold layouts (see _fold_views): every fold's rows contiguous
  locks/                                  file locks: HASH.download (one downloader per host),
                                          HASH.use (held shared while a dataset is open; its mtime = last use)
  downloads.log                           one JSON line per download (what, bytes, seconds, pid)

One copy per host: when the dataset store is the local one on the same file system, data/HASH/ARRAY.npy is a
hard link to the store's file instead of a copy (still hashed before it is used). Damage to it is then damage
to the store's copy, which `tlsearch dataset verify` reports.

Integrity: a download is hashed while it is written and only renamed into place when it matches, so a
partial or wrong download is never visible. `verified.json` then records each file's size and mtime;
opening compares those (a few stat calls) instead of re-hashing, which would cost ~1 s per GB on every
trial and fold. A file that was truncated, rewritten or replaced no longer matches and is re-hashed, and
fetched again if the hash differs. Damage that keeps size and mtime (bit rot) is caught by
`open(..., verify=True)` or `tlsearch dataset verify`, which re-hash everything.
Fold plans and fold layouts, which decide which rows a fold trains on, are checked harder: a plan's indices
are re-hashed against the plan's hash, and a layout's files against the sha256 its marker recorded when it was
written, once per process and file set (and on `verify`); a damaged one is fetched or laid out again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock

from tlsearch._files import open_no_follow, write_file, write_to
from tlsearch.config import Settings
from tlsearch.data._dataset import Dataset
from tlsearch.data._fold_views import FoldLayout, plan_layout, write_layout_rows
from tlsearch.data._folds import FoldPlan
from tlsearch.data._hashing import ContentHasher, hash_arrays
from tlsearch.data._info import DatasetInfo
from tlsearch.data._locks import UseLock
from tlsearch.data._npy import NpyHashingSink
from tlsearch.data._paths import check_sha256, confined
from tlsearch.data._store import DatasetStore, stored_size
from tlsearch.errors import DatasetCorruptedError, DatasetError

log = logging.getLogger(__name__)

MARKER = "verified.json"
DOWNLOAD_LOG = "downloads.log"
_PROGRESS_MIN_BYTES = 64 << 20
_STALE_TMP_SECONDS = 6 * 3600
_HASH_PIECE_BYTES = 4 << 20

# Layout folders whose files this process has re-hashed, by (folder, marker's mtime): checked once per process.
_checked_layouts: set[tuple[str, int]] = set()


@dataclass(frozen=True)
class CacheEntry:
    """One dataset content in a host cache."""

    hash: str
    size_bytes: int
    last_used: float


class HostCache:
    """This host's dataset cache (see the module docstring).

    `max_bytes` bounds the cache: after a download, least-recently-used datasets that no process has open
    are evicted until the cache fits (one in use is never evicted, so the bound can be exceeded then).
    `progress`: show a progress bar on stderr for downloads (None: when stderr is a terminal and the
    download is over 64 MiB).
    """

    def __init__(
        self, cache_dir: str | os.PathLike | None = None, *, max_bytes: int | None = None, progress: bool | None = None
    ) -> None:
        self.root = Path(cache_dir).expanduser().absolute() if cache_dir else Settings.resolve().cache_dir
        self.max_bytes = max_bytes
        self.progress = progress
        self._plans: dict[str, FoldPlan] = {}

    # -- paths -----------------------------------------------------------------------------------------
    def _lock_path(self, name: str) -> Path:
        return self.root / "locks" / name

    def _data(self, content_hash: str) -> Path:
        return confined(self.root / "data", check_sha256(content_hash, "dataset content hash"))

    # -- datasets --------------------------------------------------------------------------------------
    def open(self, store: DatasetStore, ref: str, *, verify: bool = False) -> Dataset:
        """Open `ref` from this host's cache, downloading and checking it first if needed.

        Several processes opening the same dataset at once download it once (the others wait). With
        `verify`, every byte is re-hashed (and fetched again if damaged) instead of trusting size and mtime.
        """
        info = store.info(ref)
        lock = UseLock(self._lock_path(f"{info.hash}.use"))
        lock.acquire_shared()
        try:
            folder = self._data(info.hash)
            names = [f"{name}.npy" for name in info.arrays]
            full_check = verify
            for attempt in range(3):
                if full_check or not _marker_ok(folder, info.hash, names):
                    self._fill(store, info, folder, names, full_check)
                try:
                    arrays = _map_arrays(folder, info)
                    break
                except (OSError, ValueError, DatasetCorruptedError):
                    if attempt == 2:
                        raise
                    full_check = True  # replaced meanwhile, or damaged in a way size and mtime missed
        except BaseException:
            lock.release()
            raise
        return Dataset(info, arrays, folder, lock, self._open_layout)

    def verify(self, store: DatasetStore, ref: str) -> str:
        """Re-hash this host's copy of `ref`'s arrays: "absent" (not cached), "ok", or "healed" (fetched again).
        `verify_folds` checks its fold plans and layouts."""
        info = store.info(ref)
        folder = self._data(info.hash)
        if not folder.is_dir():
            return "absent"
        with FileLock(str(self._lock_path(f"{info.hash}.download"))):
            intact = _rehash_matches(folder, info)
            if intact:
                _write_marker(folder, info.hash, [f"{name}.npy" for name in info.arrays])
        if intact:
            return "ok"
        self.open(store, ref, verify=True).close()
        return "healed"

    def verify_folds(self, store: DatasetStore, ref: str) -> tuple[int, list[str]]:
        """Re-hash this host's fold plans and fold layouts of `ref`, and remove those that do not match (they are
        fetched or laid out again when next used): (how many were checked, what was removed, one line each)."""
        content_hash = store.info(ref).hash
        layouts = sorted((self.root / "layouts" / content_hash).glob("*"))
        plans = [folder for folder in sorted((self.root / "plans").glob("*")) if _plan_owner(folder) == content_hash]
        damaged = []
        for folder in layouts:
            with FileLock(str(self._lock_path(f"layout-{folder.name}.lock"))):
                if not _layout_intact(folder, folder.name):
                    log.warning(
                        "fold layout %s in %s is damaged: removed, laid out again when next used",
                        folder.name[:12],
                        folder,
                    )
                    self._remove(folder)
                    damaged.append(f"fold layout {folder.name[:12]}")
        for folder in plans:
            if _load_plan(folder) is None:
                log.warning(
                    "cached fold plan %s in %s is damaged: removed, fetched again when next used",
                    folder.name[:12],
                    folder,
                )
                with FileLock(str(self._lock_path(f"plan-{folder.name}.lock"))):
                    self._remove(folder)
                self._plans.pop(folder.name, None)
                damaged.append(f"fold plan {folder.name[:12]}")
        return len(layouts) + len(plans), damaged

    def _fill(self, store: DatasetStore, info: DatasetInfo, folder: Path, names: list[str], full_check: bool) -> None:
        with FileLock(str(self._lock_path(f"{info.hash}.download"))):
            if not full_check and _marker_ok(folder, info.hash, names):
                return  # another process filled it while we waited
            if folder.is_dir() and _rehash_matches(folder, info):
                _write_marker(folder, info.hash, names)
                return
            if folder.is_dir():
                log.warning("cached copy of %s in %s is damaged; fetching it again", info.ref, folder)
            self._download(store, info, folder)
        self._evict(keep=info.hash)

    def _download(self, store: DatasetStore, info: DatasetInfo, folder: Path) -> None:
        started = time.perf_counter()
        tmp = self._new_tmp()
        bar = self._progress_bar(f"download {info.ref}", stored_size(info))
        try:
            hasher, moved, linked = ContentHasher(), 0, 0
            link = getattr(store, "link_array", None)
            for name in sorted(info.arrays):
                target = tmp / f"{name}.npy"
                if link is not None and link(info, name, target):
                    # The local store's own file on this file system: one copy per host. Hashed all the same.
                    sink = NpyHashingSink(hasher, name, what=f"stored array {name!r} of {info.ref}")
                    linked += _feed(target, sink, bar.update if bar else None)
                    sink.close()
                    continue
                with open(target, "wb") as file:
                    sink = NpyHashingSink(hasher, name, file, what=f"downloaded array {name!r} of {info.ref}")
                    moved += store.read_array(info, name, sink, bar.update if bar else None)
                    sink.close()
            actual = hasher.hexdigest()
            if actual != info.hash:
                raise DatasetCorruptedError(
                    f"the stored bytes of {info.ref} do not match its hash (sha256 {actual[:12]} instead of "
                    f"{info.hash[:12]}): run `tlsearch dataset verify {info.ref}`, then delete and push it again"
                )
            _write_marker(tmp, info.hash, [f"{name}.npy" for name in info.arrays])
            stale_layouts = self.root / "layouts" / info.hash
            self._replace(folder, tmp, also_remove=[stale_layouts] if folder.exists() else [])
        except OSError as error:
            _raise_if_disk_full(error, self.root, f"caching {info.ref} ({stored_size(info):,} bytes)")
            raise
        finally:
            if bar:
                bar.close()
            shutil.rmtree(tmp, ignore_errors=True)
        self._log_download(info, moved, time.perf_counter() - started, linked)

    def _progress_bar(self, description: str, total: int):
        show = self.progress if self.progress is not None else (sys.stderr.isatty() and total >= _PROGRESS_MIN_BYTES)
        if not show:
            return None
        from tqdm import tqdm

        return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=description, file=sys.stderr)

    def _log_download(self, info: DatasetInfo, nbytes: int, seconds: float, linked: int = 0) -> None:
        line = json.dumps(
            {
                "hash": info.hash,
                "ref": info.ref,
                "bytes": nbytes,
                "linked_bytes": linked,
                "seconds": round(seconds, 3),
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "at": time.time(),
            }
        )
        path = self.root / DOWNLOAD_LOG
        fd = open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # a planted link is refused
        try:
            write_to(fd, (line + "\n").encode(), path)
        finally:
            os.close(fd)

    def downloads(self) -> list[dict]:
        """Every download this cache made, oldest first (from downloads.log)."""
        try:
            text = (self.root / DOWNLOAD_LOG).read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    # -- fold plans ------------------------------------------------------------------------------------
    def fold_plan(self, store: DatasetStore, plan_hash: str) -> FoldPlan:
        """The fold plan with that hash, fetched from the store once per host and memory-mapped."""
        plan = self._plans.get(plan_hash)
        if plan is not None:
            return plan
        folder = confined(self.root / "plans", check_sha256(plan_hash, "fold plan hash"))
        required = ["plan.json", "indices.npy"]
        plan = _load_plan(folder) if _marker_ok(folder, plan_hash, required) else None
        if plan is None:
            with FileLock(str(self._lock_path(f"plan-{plan_hash}.lock"))):
                plan = _load_plan(folder) if _marker_ok(folder, plan_hash, required) else None
                if plan is None and folder.exists():
                    log.warning("cached fold plan %s in %s is damaged; fetching it again", plan_hash[:12], folder)
                if plan is None:
                    plan = store.get_fold_plan(plan_hash)  # checked against its hash
                    if plan.hash != plan_hash:
                        raise DatasetCorruptedError(
                            f"the store's fold plan {plan_hash[:12]} holds plan {plan.hash[:12]}: it was tampered with"
                        )
                    tmp = self._new_tmp()
                    try:
                        np.save(tmp / "indices.npy", plan.packed_indices(), allow_pickle=False)
                        (tmp / "plan.json").write_text(json.dumps(plan.to_document()))
                        _write_marker(tmp, plan_hash, required)
                        self._replace(folder, tmp)
                    finally:
                        shutil.rmtree(tmp, ignore_errors=True)
                    plan = _load_plan(folder)
        if plan is None or plan.hash != plan_hash:
            raise DatasetCorruptedError(f"cached fold plan {plan_hash[:12]} in {folder} cannot be read back: delete it")
        self._plans[plan_hash] = plan
        return plan

    def _open_layout(self, dataset: Dataset, plan: FoldPlan) -> tuple[FoldLayout, dict[str, np.ndarray]]:
        folder = self.root / "layouts" / dataset.info.hash / plan.hash
        if not _marker_ok(folder, plan.hash, ["layout.json"]) or _marker_key(folder) not in _checked_layouts:
            with FileLock(str(self._lock_path(f"layout-{plan.hash}.lock"))):
                if not _marker_ok(folder, plan.hash, ["layout.json"]) or not _layout_intact(folder, plan.hash):
                    if folder.exists():
                        log.warning("fold layout %s in %s is damaged; laying it out again", plan.hash[:12], folder)
                    self._write_layout(dataset, plan, folder)
                _checked_layouts.add(_marker_key(folder))
        document = json.loads((folder / "layout.json").read_text())
        layout = FoldLayout.from_document(document, np.load(folder / "order.npy", mmap_mode="r"))
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in document["arrays"]}
        return layout, arrays

    def _write_layout(self, dataset: Dataset, plan: FoldPlan, folder: Path) -> None:
        layout = plan_layout(plan.folds, plan.n_rows)
        tmp = self._new_tmp()
        try:
            np.save(tmp / "order.npy", layout.order, allow_pickle=False)
            names = []
            if len(layout.order):
                for name in dataset.arrays:
                    # A mapping of its own, dropped after: the rows read here must not stay resident in the
                    # dataset's long-lived mapping, where they would count as this process's private memory.
                    source = np.load(dataset.path / f"{name}.npy", mmap_mode="r")
                    target = np.lib.format.open_memmap(
                        tmp / f"{name}.npy", mode="w+", dtype=source.dtype, shape=(len(layout.order), *source.shape[1:])
                    )
                    write_layout_rows(source, layout.order, target)
                    target.flush()
                    del target, source
                    names.append(name)
            (tmp / "layout.json").write_text(json.dumps({**layout.to_document(), "arrays": names}))
            files = ["layout.json", "order.npy", *(f"{n}.npy" for n in names)]
            _write_marker(tmp, plan.hash, files, digests={name: _file_sha256(tmp / name) for name in files})
            self._replace(folder, tmp)
        except OSError as error:
            _raise_if_disk_full(error, self.root, f"laying out {dataset.info.ref} for fold plan {plan.hash[:12]}")
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # -- eviction --------------------------------------------------------------------------------------
    def entries(self) -> list[CacheEntry]:
        """The datasets in this cache with their size on disk (with their plans and layouts) and last use."""
        data = self.root / "data"
        if not data.is_dir():
            return []
        plan_sizes: dict[str, int] = {}
        for plan_folder in (self.root / "plans").glob("*"):
            try:
                owner = json.loads((plan_folder / "plan.json").read_text())["dataset_hash"]
            except (OSError, ValueError, KeyError):
                continue
            plan_sizes[owner] = plan_sizes.get(owner, 0) + _folder_size(plan_folder)
        entries = []
        for folder in data.iterdir():
            content_hash = folder.name
            size = (
                _folder_size(folder)
                + _folder_size(self.root / "layouts" / content_hash)
                + plan_sizes.get(content_hash, 0)
            )
            try:
                last_used = os.stat(self._lock_path(f"{content_hash}.use")).st_mtime
            except FileNotFoundError:
                last_used = folder.stat().st_mtime
            entries.append(CacheEntry(content_hash, size, last_used))
        return entries

    def evict(self, max_bytes: int | None = None, *, keep: Iterable[str] = ()) -> list[str]:
        """Evict least-recently-used datasets no process has open until the cache fits in `max_bytes`
        (default: this cache's bound); returns the evicted hashes."""
        limit = self.max_bytes if max_bytes is None else max_bytes
        if limit is None:
            return []
        keep = set(keep)
        evicted = []
        with FileLock(str(self._lock_path("evict.lock"))):
            entries = self.entries()
            total = sum(entry.size_bytes for entry in entries)
            for entry in sorted(entries, key=lambda e: e.last_used):
                if total <= limit:
                    break
                if entry.hash not in keep and self._remove_unused(entry.hash):
                    total -= entry.size_bytes
                    evicted.append(entry.hash)
            if total > limit:
                log.warning(
                    "dataset cache %s holds %d bytes, over its %d-byte bound: the rest is in use",
                    self.root,
                    total,
                    limit,
                )
        return evicted

    def _evict(self, keep: str) -> None:
        if self.max_bytes is not None:
            self.evict(keep=[keep])

    def _remove_unused(self, content_hash: str) -> bool:
        lock = UseLock(self._lock_path(f"{content_hash}.use"))
        if not lock.try_exclusive():
            return False
        try:
            plans = []
            for plan_folder in (self.root / "plans").glob("*"):
                try:
                    if json.loads((plan_folder / "plan.json").read_text())["dataset_hash"] == content_hash:
                        plans.append(plan_folder)
                except (OSError, ValueError, KeyError):
                    continue
            trash = self._new_tmp()
            for i, path in enumerate([self._data(content_hash), self.root / "layouts" / content_hash, *plans]):
                if path.exists():
                    os.rename(path, trash / str(i))
            shutil.rmtree(trash, ignore_errors=True)
            for plan_folder in plans:
                self._plans.pop(plan_folder.name, None)
        finally:
            lock.release()
        return True

    # -- helpers ---------------------------------------------------------------------------------------
    def _new_tmp(self) -> Path:
        tmp_root = self.root / "tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        cutoff = time.time() - _STALE_TMP_SECONDS
        for entry in tmp_root.iterdir():  # left by processes that died mid-download
            try:
                if entry.stat().st_mtime < cutoff:
                    shutil.rmtree(entry, ignore_errors=True)
            except FileNotFoundError:
                pass
        path = tmp_root / f"{os.getpid()}-{uuid.uuid4().hex}"
        path.mkdir()
        return path

    def _replace(self, target: Path, new: Path, also_remove: Iterable[Path] = ()) -> None:
        """Put folder `new` at `target` atomically; processes that mapped the old files keep reading them."""
        target.parent.mkdir(parents=True, exist_ok=True)
        trash = self._new_tmp()
        for i, path in enumerate([target, *also_remove]):
            if path.exists():
                os.rename(path, trash / str(i))
        os.rename(new, target)
        shutil.rmtree(trash, ignore_errors=True)

    def _remove(self, target: Path) -> None:
        """Remove folder `target` atomically; processes that mapped its files keep reading them."""
        trash = self._new_tmp()
        if target.exists():
            os.rename(target, trash / "0")
        shutil.rmtree(trash, ignore_errors=True)


def _raise_if_disk_full(error: OSError, root: Path, doing: str) -> None:
    """Turn a full disk (or quota) into one line that says where and what to do; nothing is left half-written."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        raise DatasetError(
            f"no space left in the dataset cache {root} while {doing}: free space there, or move "
            "the cache to a bigger disk (TLSEARCH_CACHE_DIR, or cache_dir in the config file)"
        ) from None


def _marker_ok(folder: Path, key: str, required: Iterable[str]) -> bool:
    """True when `folder`'s marker is for `key`, lists `required`, and every listed file has its size and mtime."""
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    files = marker.get("files") if isinstance(marker, dict) else None
    if marker.get("key") != key or not isinstance(files, dict) or not set(required) <= set(files):
        return False
    for name, expected in files.items():
        try:
            stat = os.stat(folder / name)
        except OSError:
            return False
        if [stat.st_size, stat.st_mtime_ns] != expected:
            return False
    return True


def _write_marker(folder: Path, key: str, names: Iterable[str], digests: dict[str, str] | None = None) -> None:
    """Record each file's size and mtime (and, given `digests`, its sha256) in `folder`'s marker."""
    files = {}
    for name in names:
        stat = os.stat(folder / name)
        files[name] = [stat.st_size, stat.st_mtime_ns]
    marker = {"key": key, "files": files, "verified_at": time.time()}
    if digests is not None:
        marker["sha256"] = digests
    write_file(folder / MARKER, json.dumps(marker))


def _marker_key(folder: Path) -> tuple[str, int]:
    """Which marker `folder` has now (it changes when the folder is written again): (folder, marker's mtime)."""
    try:
        return str(folder), os.stat(folder / MARKER).st_mtime_ns
    except OSError:
        return str(folder), -1


def _layout_intact(folder: Path, key: str) -> bool:
    """True when `folder` holds the layout for plan `key` and every file it lists has the sha256 recorded when it
    was written (a layout written before layouts carried hashes is not intact: it is laid out again)."""
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    digests = marker.get("sha256") if isinstance(marker, dict) else None
    if not isinstance(digests, dict) or not _marker_ok(folder, key, ["layout.json", "order.npy", *digests]):
        return False
    try:
        return set(digests) == set(marker["files"]) and all(
            _file_sha256(folder / name) == digest for name, digest in digests.items()
        )
    except OSError:
        return False


def _feed(path: Path, sink: NpyHashingSink, progress=None) -> int:
    """Write the bytes of file `path` to `sink` in pieces; returns the byte count."""
    total = 0
    with open(path, "rb") as file:
        while piece := file.read(_HASH_PIECE_BYTES):
            sink.write(piece)
            total += len(piece)
            if progress:
                progress(len(piece))
    return total


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while piece := file.read(_HASH_PIECE_BYTES):
            digest.update(piece)
    return digest.hexdigest()


def _plan_owner(folder: Path) -> str | None:
    """The dataset hash a cached fold plan was made from, or None when its plan.json cannot be read."""
    try:
        return json.loads((folder / "plan.json").read_text())["dataset_hash"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _load_plan(folder: Path) -> FoldPlan | None:
    """The cached fold plan in `folder`, its indices re-hashed against its hash; None when damaged or absent."""
    try:
        document = json.loads((folder / "plan.json").read_text())
        plan = FoldPlan.from_stored(document, np.load(folder / "indices.npy", mmap_mode="r", allow_pickle=False))
    except (OSError, ValueError, DatasetCorruptedError):
        return None
    return plan if plan.hash == folder.name else None


def _map_arrays(folder: Path, info: DatasetInfo) -> dict[str, np.ndarray]:
    arrays = {}
    for name in info.arrays:
        array = np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)
        if array.dtype != info.dtype(name) or array.shape != info.shape(name):
            raise DatasetCorruptedError(f"cached array {name!r} of {info.ref} has the wrong dtype or shape")
        arrays[name] = array
    return arrays


def _rehash_matches(folder: Path, info: DatasetInfo) -> bool:
    try:
        return hash_arrays(_map_arrays(folder, info)) == info.hash
    except (OSError, ValueError, DatasetCorruptedError):
        return False


def _folder_size(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total
