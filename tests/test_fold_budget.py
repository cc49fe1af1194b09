"""A compute budget in folds (`--fold-budget`, `StudySpec.fold_budget`, `tlsearch.run(fold_budget=)`), as a user
runs it on both study stores: the run stops starting trials once too few folds are left, pruned and failed
trials count only the folds they trained, a resume continues the count, and several drivers together stay
within it. Trials are tiny CustomLoop functions on iris (3 folds), pruned by a pruner that prunes every
odd-numbered trial after its first fold.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from optuna.trial import TrialState

import tlsearch
from tests.test_driver import _all_succeed
from tlsearch import cli
from tlsearch._compat import optuna as compat
from tlsearch.errors import StudyFileError, TLSearchError
from tlsearch.execution._retries import folds_trained
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.spec._spec import load_study_file
from tlsearch.storage._slots import folds_claimed
from tlsearch.stores._stores import Stores

pytestmark = pytest.mark.timeout(400)

STUDY_FILE = """
import time
import optuna
import tlsearch

class PruneOdd(optuna.pruners.BasePruner):
    def prune(self, study, trial):
        return trial.number % 2 == 1

def space(trial):
    return {{"x": trial.suggest_float("x", -10, 10)}}

def fit(params, fold, report):
    time.sleep({sleep})
    if fold.trial_number in {fail} and fold.index == 1:
        raise ValueError("fails in its second fold")
    return -(params["x"] - 2) ** 2

study = tlsearch.StudySpec(
    name="folds", dataset="sklearn:iris", space=space, model=tlsearch.CustomLoop(fit), cv=3,
    direction="maximize", n_trials={n_trials}, fold_budget={fold_budget}, fold_parallel={fold_parallel},
    sampler=optuna.samplers.RandomSampler(seed=3), pruner={pruner})
"""

DRIVER_SCRIPT = """
import sys
from pathlib import Path
import tlsearch
from tlsearch.stores._stores import Stores

if __name__ == "__main__":
    study_file, home, mongo, database = sys.argv[1:5]
    stores = Stores(mongo or None, database, Path(home), heartbeat_interval=1, grace_period=2)
    tlsearch.run(tlsearch.load_study_file(study_file), stores=stores, n_workers=1, progress="log")
"""


def write_study(
    tmp_path, *, n_trials=None, fold_budget=None, sleep=0.0, fail=(), fold_parallel="False", pruner="PruneOdd()"
):
    path = tmp_path / "folds_study.py"
    path.write_text(
        STUDY_FILE.format(
            n_trials=n_trials,
            fold_budget=fold_budget,
            sleep=sleep,
            fail=tuple(fail),
            fold_parallel=fold_parallel,
            pruner=pruner,
        )
    )
    return path


def _stores(store, request, tmp_path) -> tuple[list[str], Stores]:
    """`tlsearch` options for the embedded default or the MongoDB test server, and the stores they name."""
    if store == "local":
        return ["--home", str(tmp_path / "home")], Stores(home=tmp_path / "home")
    uri, database = request.getfixturevalue("mongo_uri"), request.getfixturevalue("mongo_db_name")
    return ["--mongo", uri, "--database", database, "--home", str(tmp_path / "home")], Stores(
        uri, database, tmp_path / "home"
    )


def _folds(study) -> tuple[int, int]:
    """(the study's fold counter, the folds its trials trained); equal once nothing runs."""
    counter = folds_claimed(compat.storage_of(study), compat.study_id(study))
    return counter, sum(folds_trained(trial) for trial in study.get_trials(deepcopy=False))


def _states(study) -> list[str]:
    return [trial.state.name for trial in study.get_trials(deepcopy=False)]


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", "mongo"])
def test_a_fold_budget_stops_in_time_counts_trained_folds_only_and_survives_a_resume(tmp_path, store, request, capsys):
    # Trial 1 and 3 are pruned after one fold, trial 2 fails in its second: 3 + 1 + 1 + 1 + 3 = 9 folds, and
    # a sixth trial would need 3 more than the 10.
    study_file = write_study(tmp_path, fail=(2,))
    where, stores = _stores(store, request, tmp_path)
    args = ["--workers", "1", "--progress", "log", "--no-report", *where]
    assert cli.main(["run", str(study_file), "--fold-budget", "10", *args]) == 0
    assert "run ended: fold budget reached (9/10 folds; 4 trials finished); exit code 0" in capsys.readouterr().err
    study = study_attrs.load(stores, "folds")
    assert _states(study) == ["COMPLETE", "PRUNED", "FAIL", "PRUNED", "COMPLETE"]
    assert [t.user_attrs.get("n_folds_run") for t in study.trials] == [3, 1, None, 1, 3]
    assert _folds(study) == (9, 9)

    # A resume continues the count; a bigger budget lets it go on: trial 5 is pruned (10), 6 completes (13).
    assert cli.main(["resume", "folds", "--fold-budget", "15", *args]) == 0
    assert "run ended: fold budget reached (13/15 folds; 6 trials finished)" in capsys.readouterr().err
    study = study_attrs.load(stores, "folds")
    assert _states(study)[5:] == ["PRUNED", "COMPLETE"] and _folds(study) == (13, 13)

    assert cli.main(["resume", "folds", "--fold-budget", "15", *args]) == 0
    assert "nothing to do: fold budget reached (13/15 folds; a trial takes 3)" in capsys.readouterr().err
    assert cli.main(["status", "folds", *where, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["folds_used"] == 13

    # Once counted, a run without a budget counts on; a copy into MongoDB carries the count.
    assert cli.main(["resume", "folds", "--n-trials", "8", *args]) == 0
    counter, trained = _folds(study_attrs.load(stores, "folds"))
    assert counter == trained > 13
    if store == "local":
        uri, database = request.getfixturevalue("mongo_uri"), request.getfixturevalue("mongo_db_name")
        assert cli.main(["copy", "folds", *where, "--to", uri, "--to-database", database]) == 0
        assert _folds(study_attrs.load(Stores(uri, database, tmp_path / "home"), "folds")) == (counter, trained)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", "mongo"])
def test_a_fold_budget_counts_fold_parallel_tasks_and_combines_with_n_trials(tmp_path, store, request):
    study_file = write_study(tmp_path, fold_parallel='"auto"', pruner="optuna.pruners.NopPruner()")
    _, stores = _stores(store, request, tmp_path)
    spec = load_study_file(study_file)
    # 2 trials at a time: the last trial the budget allows (claiming folds 10-12) runs as 2 tasks.
    study = tlsearch.run(spec, stores=stores, n_workers=2, fold_budget=12, progress="off")
    assert _states(study) == ["COMPLETE"] * 4 and _folds(study) == (12, 12)
    assert [t.user_attrs.get("fold_tasks") for t in study.trials][-1] == 2
    # n_trials and the fold budget together: whichever comes first.
    study = tlsearch.run(spec, stores=stores, n_workers=1, n_trials=5, fold_budget=100, resume=True, progress="off")
    assert _states(study) == ["COMPLETE"] * 5 and _folds(study) == (15, 15)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", "mongo"])
def test_two_drivers_together_never_exceed_the_fold_budget(tmp_path, store, request):
    study_file = write_study(tmp_path, fold_budget=20, sleep=0.1)  # the budget from the study file
    mongo, database = "", "tlsearch"
    if store == "mongo":
        mongo, database = request.getfixturevalue("mongo_uri"), request.getfixturevalue("mongo_db_name")
    script = tmp_path / "drive.py"
    script.write_text(DRIVER_SCRIPT)
    command = [sys.executable, str(script), str(study_file), str(tmp_path / "home"), mongo, database]
    drivers = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=tmp_path
        )
        for _ in range(2)
    ]
    _all_succeed(drivers)
    study = study_attrs.load(Stores(mongo or None, database, tmp_path / "home"), "folds")
    counter, trained = _folds(study)
    assert counter == trained and 20 - 3 < counter <= 20, _states(study)
    assert TrialState.RUNNING.name not in _states(study) and TrialState.PRUNED.name in _states(study)


def test_bad_fold_budgets_are_refused_in_one_line_before_a_study_exists(tmp_path, capsys):
    study_file = write_study(tmp_path)
    home = ["--home", str(tmp_path / "home"), "--no-report"]
    for value, expected in (("0", "at least 1, got 0"), ("2", "2 is less than a trial's 3 folds")):
        assert cli.main(["run", str(study_file), "--fold-budget", value, *home]) == 1
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and "fold_budget (--fold-budget)" in error[0] and expected in error[0], error
    with pytest.raises(TLSearchError, match="must be a whole number of folds"):
        tlsearch.run(load_study_file(study_file), home=tmp_path / "home", fold_budget=2.5)
    with pytest.raises(TLSearchError, match="no study named"):
        study_attrs.load(Stores(home=tmp_path / "home"), "folds")
    with pytest.raises(StudyFileError, match="StudySpec.fold_budget must be an int >= 1"):
        load_study_file(write_study(tmp_path, fold_budget=-1))
