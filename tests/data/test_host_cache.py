"""The host-local cache: one download per host, verified, memory-mapped, healed, evicted, zero-copy folds."""

from __future__ import annotations

import errno
import os
import pickle

import numpy as np
import pytest
from data_helpers import make_arrays, open_in_process, run_in_processes

from tlsearch.data import HostCache, fold_plan_for
from tlsearch.data._local import LocalDatasetStore
from tlsearch.errors import DatasetCorruptedError


@pytest.fixture
def other_file_system(monkeypatch):
    """The host cache on another file system than the local store: hard links fail, so the cache copies."""

    def link(source, target, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link", str(source))

    monkeypatch.setattr(os, "link", link)


def test_open_maps_read_only_arrays_shared_through_the_page_cache(store, cache):
    arrays = make_arrays(groups=np.arange(60) % 6)
    store.push("ro", arrays)
    dataset = cache.open(store, "ro")
    assert set(dataset.keys()) == {"X", "y", "groups"} and dataset.n_rows == 60
    assert isinstance(dataset["X"], np.memmap) and str(dataset["X"].filename).startswith(str(cache.root))
    np.testing.assert_array_equal(dataset.X, arrays["X"])
    with pytest.raises(ValueError, match="read-only"):
        dataset["X"][0, 0] = 1
    with pytest.raises(TypeError, match="HostCache"):
        pickle.dumps(dataset)
    dataset.close()
    assert len(cache.downloads()) == 1
    cache.open(store, "ro").close()
    assert len(cache.downloads()) == 1  # the second open reads nothing from the store


@pytest.mark.slow
def test_four_processes_opening_at_once_download_once(store, tmp_path):
    store.push("contended", make_arrays(n_rows=20000, n_features=8))  # 640 kB: 160 GridFS chunks in tests
    results = run_in_processes(open_in_process, [(store, "contended", str(tmp_path / "cache"))] * 4)
    assert len(set(results)) == 1
    downloads = HostCache(tmp_path / "cache").downloads()
    assert len(downloads) == 1, downloads
    assert not list((tmp_path / "cache" / "tmp").iterdir())


def _damage(path, keep_mtime: bool) -> None:
    stat = os.stat(path)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))
    if keep_mtime:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    else:  # as a later write would: a different mtime even on coarse-clock file systems
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_truncated_or_rewritten_files_are_detected_by_hash_and_fetched_again(store, cache, other_file_system):
    arrays = make_arrays()
    info = store.push("heal", arrays)
    cache.open(store, "heal").close()
    x_file = cache.root / "data" / info.hash / "X.npy"

    with open(x_file, "r+b") as file:  # truncated
        file.truncate(100)
    with cache.open(store, "heal") as dataset:
        np.testing.assert_array_equal(dataset["X"], arrays["X"])
    assert len(cache.downloads()) == 2

    _damage(x_file, keep_mtime=False)  # rewritten in place
    with cache.open(store, "heal") as dataset:
        np.testing.assert_array_equal(dataset["X"], arrays["X"])
    assert len(cache.downloads()) == 3

    os.utime(x_file)  # touched but intact: re-hashed, not downloaded
    cache.open(store, "heal").close()
    assert len(cache.downloads()) == 3


def test_silent_damage_is_caught_by_a_full_verify(store, cache, other_file_system):
    arrays = make_arrays()
    info = store.push("rot", arrays)
    cache.open(store, "rot").close()
    _damage(cache.root / "data" / info.hash / "y.npy", keep_mtime=True)
    assert cache.verify(store, "rot") == "healed"
    assert cache.verify(store, "rot") == "ok"
    _damage(cache.root / "data" / info.hash / "y.npy", keep_mtime=True)
    with cache.open(store, "rot", verify=True) as dataset:
        np.testing.assert_array_equal(dataset["y"], arrays["y"])
    assert len(cache.downloads()) == 3


def test_a_local_store_and_the_host_cache_on_its_file_system_keep_one_copy(tmp_path):
    store, cache = LocalDatasetStore(tmp_path / "home" / "datasets"), HostCache(tmp_path / "cache")
    arrays = make_arrays()
    info = store.push("shared", arrays)
    with cache.open(store, "shared") as dataset:
        np.testing.assert_array_equal(dataset["X"], arrays["X"])
        cached = cache.root / "data" / info.hash / "X.npy"
        assert os.stat(cached).st_ino == os.stat(store.root / "contents" / info.hash / "X.npy").st_ino
    [download] = cache.downloads()
    assert download["bytes"] == 0 and download["linked_bytes"] > arrays["X"].nbytes

    _damage(cached, keep_mtime=False)  # the one copy on this host: reported, not hidden
    with pytest.raises(DatasetCorruptedError, match="do not match its hash"):
        cache.open(store, "shared")
    with pytest.raises(DatasetCorruptedError, match="delete it and push it again"):
        store.verify("shared")

    store.delete("shared")  # removes the store's name for the bytes, not the cache's
    assert cached.stat().st_size > arrays["X"].nbytes and not (store.root / "contents" / info.hash).exists()


class _FlakyStore:
    """A store whose downloads break: cut off after the first piece, or with one byte flipped."""

    def __init__(self, store, mode: str) -> None:
        self._store, self._mode = store, mode

    def info(self, ref):
        return self._store.info(ref)

    def read_array(self, info, array, sink, progress=None):
        mode = self._mode

        class Sink:
            def write(self, data):
                data = bytearray(data)
                if mode == "cut" and len(data) > 200:
                    sink.write(bytes(data[:200]))
                    raise ConnectionError("connection lost")
                if mode == "flip" and len(data) > 200:
                    data[150] ^= 0xFF
                return sink.write(bytes(data))

        return self._store.read_array(info, array, Sink(), progress)


@pytest.mark.parametrize("mode, error", [("cut", ConnectionError), ("flip", DatasetCorruptedError)])
def test_a_partial_or_wrong_download_never_becomes_visible(store, cache, mode, error):
    info = store.push("partial", make_arrays(n_rows=500))
    with pytest.raises(error):
        cache.open(_FlakyStore(store, mode), "partial")
    assert not (cache.root / "data" / info.hash).exists()
    assert not list((cache.root / "tmp").iterdir())
    with cache.open(store, "partial") as dataset:
        assert dataset["X"].shape == (500, 5)


def _age_uses(cache: HostCache) -> None:
    """Move every recorded last use 10 s into the past, so the next open is the most recent use whatever the
    file system's timestamp resolution (an open records its use by touching the dataset's `.use` file)."""
    for use in (cache.root / "locks").glob("*.use"):
        stat = use.stat()
        os.utime(use, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**10))


def test_lru_eviction_skips_datasets_that_are_open(store, tmp_path):
    for seed in range(4):
        store.push(f"d{seed}", make_arrays(n_rows=1000, seed=seed))
    one = HostCache(tmp_path / "unbounded").open(store, "d0")
    one.close()
    size = sum(e.size_bytes for e in HostCache(tmp_path / "unbounded").entries())
    cache = HostCache(tmp_path / "bounded", max_bytes=int(2.5 * size))

    cache.open(store, "d0").close()
    _age_uses(cache)
    cache.open(store, "d1").close()
    _age_uses(cache)
    cache.open(store, "d0").close()  # d0 used more recently than d1
    _age_uses(cache)
    cache.open(store, "d2").close()  # over the bound: d1 goes
    names = {store.info(f"d{i}").hash: f"d{i}" for i in range(4)}
    assert sorted(names[e.hash] for e in cache.entries()) == ["d0", "d2"]

    held = cache.open(store, "d0")
    _age_uses(cache)
    cache.open(store, "d2").close()
    _age_uses(cache)
    cache.open(store, "d3").close()  # d0 is least recent but open: d2 goes instead
    assert sorted(names[e.hash] for e in cache.entries()) == ["d0", "d3"]
    np.testing.assert_array_equal(held["X"], make_arrays(n_rows=1000, seed=0)["X"])
    held.close()


def test_fold_views_are_zero_copy_and_laid_out_once_per_host(store, cache):
    from sklearn.model_selection import KFold

    arrays = make_arrays(n_rows=103, sample_weight=np.linspace(0.5, 1.5, 103))
    store.push("views", arrays)
    with cache.open(store, "views") as dataset:
        plan = fold_plan_for(store, dataset, KFold(5, shuffle=True, random_state=0))
        fold = dataset.fold(plan, 2)
        assert not fold.train["X"].flags.writeable and not fold.train["X"].flags.owndata
        assert set(fold.train) == {"X", "y", "sample_weight"}
        layout_files = sorted((cache.root / "layouts").rglob("*.npy"))
        stamps = [p.stat().st_mtime_ns for p in layout_files]
    with HostCache(cache.root).open(store, "views") as again:
        again.fold(plan, 4)
    assert [p.stat().st_mtime_ns for p in layout_files] == stamps
    size = sum(p.stat().st_size for p in layout_files if p.name == "X.npy")
    assert size < 2 * arrays["X"].nbytes  # all 5 folds in less than two copies of the rows
