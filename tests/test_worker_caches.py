"""What a worker process keeps between trials, and what makes it let go: a worker serves run after run (a
long-lived `tlsearch worker`), so each cache is keyed by what it holds, and a change in the store is seen.

- the study definition: by its packed bytes (a changed study file is a new definition);
- the sampler's view of the study: not kept at all (tests/test_samplers.py);
- datasets: by ref and content hash (a ref pushed again with other content is another dataset);
- fold plans: by their content hash (a plan never changes under its hash).
"""

from __future__ import annotations

import distributed
import numpy as np
import pytest

from tlsearch.execution import _driver as driver
from tlsearch.spec._spec import load_study_file
from tlsearch.stores._stores import Stores

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STUDY_FILE = """
import numpy as np
import optuna
import tlsearch

def fit(params, fold, report):
    return float(np.mean(fold.x_train)) + {offset}

spec = tlsearch.StudySpec(
    name="{name}", dataset="{dataset}", space={{"x": optuna.distributions.FloatDistribution(0, 1)}},
    model=tlsearch.CustomLoop(fit), cv=2, direction="maximize", n_trials=2, pruner=optuna.pruners.NopPruner())
"""


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            yield client


def run(tmp_path, client, stores, name, dataset="sklearn:iris", offset=0.0):
    path = tmp_path / f"{name}.py"
    path.write_text(STUDY_FILE.format(name=name, dataset=dataset, offset=offset))
    return driver.drive(load_study_file(path), stores=stores, client=client, progress="off").study


def test_a_changed_study_file_reaches_a_worker_that_ran_the_old_one(tmp_path, client):
    stores = Stores(home=tmp_path / "home")
    first = run(tmp_path, client, stores, "a")
    second = run(tmp_path, client, stores, "b", offset=100.0)
    assert second.best_value == pytest.approx(first.best_value + 100.0)


def test_a_dataset_pushed_again_under_the_same_ref_is_read_again(tmp_path, client):
    stores = Stores(home=tmp_path / "home")
    rows = np.arange(40, dtype="float64").reshape(20, 2)
    labels = np.tile([0, 1], 10)
    stores.dataset_store().push("d", {"X": rows, "y": labels})
    before = run(tmp_path, client, stores, "on-first", dataset="d")
    stores.dataset_store().delete("d", all_versions=True)
    stores.dataset_store().push("d", {"X": rows + 1000.0, "y": labels})
    after = run(tmp_path, client, stores, "on-second", dataset="d")
    assert after.best_value == pytest.approx(before.best_value + 1000.0, rel=1e-3), "the worker kept the old rows"


def _opened_datasets() -> int:
    from tlsearch.execution import _trial_task as trial_task

    return trial_task._open_dataset.cache_info().currsize


def test_the_prefetch_plugin_opens_the_studys_dataset_on_a_worker_before_any_trial(tmp_path, client):
    import time

    from tlsearch.execution._cluster import DatasetPrefetch

    stores = Stores(home=tmp_path / "home")
    info = stores.dataset_store().push("p", {"X": np.zeros((6, 2)), "y": np.array([0, 1] * 3)})
    before = next(iter(client.run(_opened_datasets).values()))
    client.register_plugin(DatasetPrefetch(stores, info.ref, info.hash))
    deadline = time.monotonic() + 120  # the download runs in a thread of its own on the worker
    while next(iter(client.run(_opened_datasets).values())) == before:
        assert time.monotonic() < deadline, "the worker never opened the prefetched dataset"
        time.sleep(0.2)
