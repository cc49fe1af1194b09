"""The Slurm recipe, for real: workers submitted as Slurm jobs by dask-jobqueue run a small study.

A single-node Slurm is started in a temporary folder (tests/slurm_cluster.py); without Slurm on the machine the
test is skipped with the reason. The scheduler and the workers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import sys

import pytest
from optuna.trial import TrialState

import tlsearch
from tests import slurm_cluster
from tests.test_driver import write_study
from tlsearch.spec._spec import load_study_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """SLURM_CONF of a running single-node Slurm, for this test only."""
    reason = slurm_cluster.missing()
    if reason:
        pytest.skip(reason)
    with slurm_cluster.SingleNodeSlurm(tmp_path / "slurm") as conf:
        monkeypatch.setenv("SLURM_CONF", str(conf))
        yield conf


def test_workers_submitted_through_dask_jobqueue_run_a_study(tmp_path, slurm):
    dask_jobqueue = pytest.importorskip("dask_jobqueue")
    from distributed import Client

    study_file = write_study(tmp_path, n_trials=4)
    logs = tmp_path / "jobs"
    logs.mkdir()
    cluster = dask_jobqueue.SLURMCluster(
        cores=1,
        processes=1,
        memory="1GB",
        walltime="00:10:00",
        python=sys.executable,
        scheduler_options={"host": "127.0.0.1"},
        worker_extra_args=["--host", "127.0.0.1"],
        local_directory=str(tmp_path / "dask"),
        log_directory=str(logs),
    )
    with cluster, Client(cluster) as client:
        cluster.scale(jobs=2)
        client.wait_for_workers(1, timeout=180)
        study = tlsearch.run(load_study_file(study_file), client=client, home=tmp_path / "home", progress="off")
        job_ids = client.run(lambda: os.environ.get("SLURM_JOB_ID"))  # the study's only workers: Slurm jobs
    states = [trial.state for trial in study.trials]
    assert states.count(TrialState.COMPLETE) + states.count(TrialState.PRUNED) == 4, states
    assert job_ids and all(job_id for job_id in job_ids.values()), job_ids
