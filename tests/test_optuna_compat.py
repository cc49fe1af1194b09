"""Each Optuna internal tlsearch relies on (all in tlsearch/_compat/optuna.py) still behaves as tlsearch expects:
a new Optuna that changes one fails here, naming it. `.ci/run` runs this file against Optuna's latest release too.
Also: plain Optuna reads the journal file tlsearch writes."""

from __future__ import annotations

import ast
import csv
import importlib
import inspect
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

optuna.logging.set_verbosity(optuna.logging.WARNING)


def private_imports() -> list[tuple[str, str]]:
    """(module, name): every import of the compatibility module from a private Optuna module or of a private
    name, and every optional internal it takes through `_internal("module", "name", ...)`, read from its
    source, so the list cannot drift from what the module imports."""
    from tlsearch._compat import optuna as compat

    found = []
    for node in ast.walk(ast.parse(Path(compat.__file__).read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
            private_module = any(part.startswith("_") for part in node.module.split("."))
            found += [(node.module, a.name) for a in node.names if private_module or a.name.startswith("_")]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_internal":
            found.append((node.args[0].value, node.args[1].value))
    return found


OPTIONAL_INTERNALS = [
    ("optuna.samplers._lazy_random_state", "LazyRandomState"),
    ("optuna.storages._base", "DEFAULT_STUDY_NAME_PREFIX"),
    ("optuna.study._frozen", "FrozenStudy"),
    ("optuna.storages._heartbeat", "BaseHeartbeat"),
    ("optuna.storages.journal._file", "BaseJournalFileLock"),
    ("optuna.storages.journal._storage", "JournalOperation"),
]


PRIVATE_IMPORTS = private_imports()


def test_the_private_imports_are_found():
    assert set(OPTIONAL_INTERNALS) <= set(PRIVATE_IMPORTS)
    assert ("optuna.artifacts._protocol", "ArtifactStore") in PRIVATE_IMPORTS  # under TYPE_CHECKING


def test_no_module_outside_compat_imports_a_private_optuna_name():
    package = Path(__file__).resolve().parents[1] / "tlsearch"
    offenders = []
    for path in package.rglob("*.py"):
        if "_compat" in path.parts or "examples" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
                names = [node.module, *(a.name for a in node.names)]
                if any(part.startswith("_") for name in names for part in name.split(".")):
                    offenders.append(f"{path.relative_to(package)}: from {node.module} import ...")
            elif isinstance(node, ast.Attribute) and node.attr in {"_get_latest_trial", "_cached_frozen_trial"}:
                offenders.append(f"{path.relative_to(package)}: .{node.attr}")
    assert offenders == []


@pytest.mark.parametrize("module, name", PRIVATE_IMPORTS, ids=[f"{m}.{n}" for m, n in PRIVATE_IMPORTS])
def test_private_import_exists(module, name):
    try:
        value = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        pytest.fail(
            f"Optuna {optuna.__version__} no longer has {module}.{name} ({error}): see tlsearch/_compat/optuna.py"
        )
    assert value is not None


def test_the_compat_module_imports():
    from tlsearch._compat import optuna as _optuna_compat

    assert set(_optuna_compat.__all__) <= set(dir(_optuna_compat))


def _journal(tmp_path):
    from tlsearch.storage._journal import open_journal

    return open_journal(str(tmp_path / "studies.journal"))


def test_study_and_trial_ids_and_system_attrs(tmp_path):
    from tlsearch._compat import optuna as compat

    storage = _journal(tmp_path)
    study = optuna.create_study(storage=storage, study_name="ids")
    assert compat.storage_of(study) is storage, "Study._storage"
    assert compat.study_id(study) == storage.get_study_id_from_name("ids"), "Study._study_id"
    trial = study.ask()
    assert storage.get_trial(compat.trial_id(trial)).number == trial.number, "Trial._trial_id"
    frozen = study.get_trials(deepcopy=False)[0]
    assert compat.trial_id(frozen) == compat.trial_id(trial), "FrozenTrial._trial_id"
    compat.set_study_system_attr(study, "tlsearch:x", 1)
    assert compat.study_system_attrs(study)["tlsearch:x"] == 1


def test_open_trial_reopens_a_trial_by_id(tmp_path):
    """`optuna.Trial(study, trial_id)`: what a worker does with the trial the driver created."""
    from tlsearch._compat import optuna as compat

    storage = _journal(tmp_path)
    study = optuna.create_study(storage=storage, study_name="reopen")
    created = study.ask()
    reopened = compat.open_trial(optuna.load_study(study_name="reopen", storage=storage), compat.trial_id(created))
    x = reopened.suggest_float("x", 0, 1)
    reopened.report(0.5, 0)
    frozen = storage.get_trial(compat.trial_id(created))
    assert frozen.params == {"x": x} and frozen.intermediate_values == {0: 0.5}, "optuna.Trial(study, trial_id)"


def test_heartbeat_interval_and_stale_trials(mongo_uri, mongo_db_name):
    """MongoStorage implements `BaseHeartbeat._get_stale_trial_ids`; `fail_stale_trials` still calls it."""
    from tlsearch._compat import optuna as compat
    from tlsearch.storage import MongoStorage

    assert "_get_stale_trial_ids" in inspect.getsource(optuna.storages.fail_stale_trials), "_get_stale_trial_ids"
    storage = MongoStorage(mongo_uri, mongo_db_name, heartbeat_interval=1, grace_period=1)
    try:
        assert compat.heartbeat_interval(storage) == 1, "BaseHeartbeat"
        study = optuna.create_study(storage=storage, study_name="stale")
        trial_id = compat.trial_id(study.ask())
        storage.record_heartbeat(trial_id)
        time.sleep(2.5)
        assert compat.stale_trial_ids(storage, compat.study_id(study)) == [trial_id], "_get_stale_trial_ids"
    finally:
        storage.close()


def test_journal_batch_append_replays(tmp_path):
    """`JournalStorage._thread_lock`, `_replay_result.worker_id`, `_backend`, `_sync_with_backend`."""
    from tlsearch._compat import optuna as compat

    storage = _journal(tmp_path)
    study = optuna.create_study(storage=storage, study_name="batch")
    trial_id = compat.trial_id(study.ask())
    storage.set_trial_user_attrs(trial_id, {"a": 1, "b": [2, 3]})
    storage.set_trial_user_attrs(trial_id, {"c": "x"})
    storage.set_trial_intermediate_value(trial_id, 0, 0.25)
    trial = storage.get_trial(trial_id)
    assert trial.user_attrs == {"a": 1, "b": [2, 3], "c": "x"} and trial.intermediate_values == {0: 0.25}
    assert compat.can_batch_journal_writes(storage), "JournalStorage._backend and the other internals"
    assert hasattr(compat.JournalOperation, "SET_TRIAL_USER_ATTR"), "JournalOperation.SET_TRIAL_USER_ATTR"


def test_journal_lock_protocol():
    from tlsearch._compat import optuna as compat

    assert {"acquire", "release"} <= set(vars(compat.BaseJournalFileLock)), "BaseJournalFileLock"


@pytest.mark.parametrize(
    "sampler",
    [optuna.samplers.TPESampler(seed=1), optuna.samplers.RandomSampler(seed=1), optuna.samplers.NSGAIISampler(seed=1)],
    ids=lambda s: type(s).__name__,
)
def test_seeded_copies_draw_per_seed(sampler):
    """`LazyRandomState` in a sampler's attributes: each seed its own draws, the same seed the same draws."""
    from tlsearch._compat import optuna as compat

    def draws(seed):
        study = optuna.create_study(sampler=compat.seeded_copy(sampler, seed))
        return [study.ask().suggest_float("x", 0, 1) for _ in range(3)]

    assert draws(1) == draws(1)
    assert draws(1) != draws(2), f"seeding {type(sampler).__name__} through LazyRandomState had no effect"


def test_plain_optuna_reads_the_journal_tlsearch_writes(tmp_path):
    """The embedded default's study store is Optuna's journal format: plain Optuna opens it as is."""
    from tlsearch._compat import optuna as compat

    storage = _journal(tmp_path)
    study = optuna.create_study(storage=storage, study_name="plain", direction="maximize")
    compat.set_study_system_attr(study, "tlsearch:dataset_ref", "iris@1")
    for value in (0.25, 0.75):
        trial = study.ask()
        trial.suggest_float("x", 0, 1)
        storage.set_trial_user_attrs(compat.trial_id(trial), {"split0_test_score": value})
        trial.report(value, 0)
        study.tell(trial, value)
    plain = JournalStorage(JournalFileBackend(str(tmp_path / "studies.journal")))
    loaded = optuna.load_study(study_name="plain", storage=plain)
    assert [t.state for t in loaded.trials] == [TrialState.COMPLETE] * 2
    assert loaded.best_value == 0.75 and loaded.best_trial.user_attrs == {"split0_test_score": 0.75}
    assert loaded.best_trial.intermediate_values == {0: 0.75}
    assert plain.get_study_system_attrs(loaded._study_id)["tlsearch:dataset_ref"] == "iris@1"
    assert np.isclose(loaded.trials[0].value, 0.25)


@pytest.mark.parametrize("without_the_method", [False, True], ids=["Trial._get_latest_trial", "storage fallback"])
def test_latest_trial_has_the_reported_values(tmp_path, monkeypatch, without_the_method):
    from tlsearch._compat import optuna as compat

    if without_the_method:  # as if a new Optuna removed it
        monkeypatch.delattr(optuna.trial.Trial, "_get_latest_trial")
    study = optuna.create_study(storage=_journal(tmp_path), study_name="latest")
    trial = study.ask()
    trial.report(0.25, 0)
    trial.report(0.5, 1)
    latest = compat.latest_trial(trial)
    assert latest.number == trial.number and latest.intermediate_values == {0: 0.25, 1: 0.5}


# Each module tlsearch looks in is swapped for a copy without the name, so only lookups from outside Optuna miss
# it: Optuna's own code keeps working, as it would if the name had moved.
HIDE_OPTIONAL_INTERNALS = """
import importlib, sys, types
for module, name in {internals!r}:
    real = importlib.import_module(module)
    copy = types.ModuleType(module)
    copy.__dict__.update({{k: v for k, v in vars(real).items() if k != name}})
    sys.modules[module] = copy
"""


STUDY = """
import tlsearch
from sklearn.tree import DecisionTreeClassifier

study = tlsearch.StudySpec(
    name="no-internals", dataset="sklearn:iris",
    space=lambda trial: {"max_depth": trial.suggest_int("max_depth", 1, 6)},
    model=tlsearch.SklearnModel(lambda p: DecisionTreeClassifier(max_depth=p["max_depth"], random_state=0)),
    cv=3, metric="accuracy", n_trials=4, seed=0)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["local", "mongo"])
def test_a_study_runs_on_an_optuna_without_any_optional_internal(tmp_path, store, request):
    """As if a new Optuna had moved every optional internal (in the driver and in every worker process): the
    study still runs to the end and writes every fold's score, and each missing name is named once."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(HIDE_OPTIONAL_INTERNALS.format(internals=OPTIONAL_INTERNALS))
    (tmp_path / "study.py").write_text(STUDY)
    where = ["--home", str(tmp_path / "home")]
    if store == "mongo":
        where += [
            "--mongo",
            request.getfixturevalue("mongo_uri"),
            "--database",
            request.getfixturevalue("mongo_db_name"),
        ]
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}

    def tlsearch(*argv):
        command = [sys.executable, "-m", "tlsearch", *argv, *where]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)

    run = tlsearch("run", str(tmp_path / "study.py"), "--workers", "1", "--progress", "off")
    assert run.returncode == 0, run.stderr[-3000:]
    driver_warnings = [line for line in run.stderr.splitlines() if "OptunaCompatibilityWarning" in line]
    for module, name in OPTIONAL_INTERNALS:
        assert any(f"{module}.{name}:" in line for line in driver_warnings), (name, run.stderr[-3000:])
    assert run.stderr.count("JournalOperation:") >= 2, "the worker process saw the moved name too"
    trials = tlsearch("trials", "no-internals", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(trials.stdout)))
    assert len(rows) == 4 and all(row["split0_test_score"] for row in rows if row["state"] == "COMPLETE"), trials
