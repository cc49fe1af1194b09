"""The driver: runs a study to its target on a Dask cluster, one task per trial, and resumes it later.

`drive` checks the options, opens (or creates) the study, binds it to its dataset and fold plan, fails the
trials a dead driver left running, connects to the cluster, and hands over to `dispatcher.Dispatcher`, which
owns each trial's lifecycle.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import optuna

from tlsearch import spaces
from tlsearch._compat import optuna as compat
from tlsearch.config import Settings
from tlsearch.data import HostCache, ensure_dataset, fold_plan_for, push_data
from tlsearch.errors import TLSearchError, main_guard_exit
from tlsearch.execution import _cluster as cluster
from tlsearch.execution._dispatcher import DONE, Budget, Dispatcher, n_folds
from tlsearch.execution._guards import DriverLock, Interrupts
from tlsearch.execution._retries import fail_abandoned_trials, folds_used
from tlsearch.execution._stop_policy import EXIT_CODES, FOLD_BUDGET_REACHED, NOTHING_TO_DO
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.storage._slots import folds_claimed
from tlsearch.stores import _study_files as study_files
from tlsearch.stores._stores import Stores, check_study_name

if TYPE_CHECKING:
    import distributed

    from tlsearch.spec import StudySpec

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RunResult:
    """What `drive` returns: the study, why the run ended (a key of `EXIT_CODES`) and a line saying so."""

    study: optuna.Study
    reason: str
    detail: str = ""

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.reason]

    def summary(self) -> str:
        return (
            f"run ended: {self.reason}" + (f" ({self.detail})" if self.detail else "") + f"; exit code {self.exit_code}"
        )


def run(
    spec: StudySpec,
    *,
    mongo: str | None = None,
    database: str | None = None,
    home: str | os.PathLike | None = None,
    stores: Stores | None = None,
    client: distributed.Client | None = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    security: distributed.Security | None = None,
    n_trials: int | None = None,
    timeout: float | None = None,
    parallelism: int | None = None,
    trial_timeout: float | None = None,
    fold_budget: int | None = None,
    name: str | None = None,
    study_file: str | os.PathLike | None = None,
    progress: str = "auto",
    resume: bool = False,
) -> optuna.Study:
    """Run the study `spec` until `n_trials` trials are complete or pruned in total (counting those already in
    the store), `timeout` seconds pass, `fold_budget` folds are spent, or `tlsearch stop` asks it to; return the
    study. Call it under
    `if __name__ == "__main__":` in a script. `drive` takes the same arguments and also says why the run ended.

    Args:
        spec: The study to run (`tlsearch.StudySpec`, e.g. from `tlsearch.load_study_file`); a dataset held in
            Python is pushed first (as `tlsearch.push_dataset` does) and the study names it.
        mongo: The MongoDB URI of the stores; default: the settings' (`TLSEARCH_MONGO_URI`, the config file),
            else the embedded default (a journal file and local folders under `home`).
        database: The MongoDB database; default: the settings'.
        home: The embedded default's folder; default: the settings'.
        stores: Stores built already (`tlsearch.Stores`, e.g. with another heartbeat interval), instead
            of `mongo`, `database` and `home` (giving both is a TypeError).
        client: A Dask client to run the trials on, as given.
        scheduler: The address of a Dask scheduler to connect to (when no `client`); default: the settings'
            (`TLSEARCH_SCHEDULER`, `TLSEARCH_SCHEDULER_FILE`, the config file) unless `n_workers` is given.
        n_workers: The worker processes of a new LocalCluster on 127.0.0.1 (default: one per core), when no
            `client`, `scheduler` or settings' scheduler.
        security: Dask TLS (`tlsearch.execution.tls_security`); default: the settings' TLS files.
        n_trials: The trials to finish in total; default: the study's.
        timeout: Seconds after which no trial starts and running ones are failed STOP_GRACE seconds later (their
            retries wait for the next resume); default: the study's.
        parallelism: Trials in flight at once; default: the cluster's capacity.
        trial_timeout: Seconds a trial may run before it fails and its worker restarts; default: the study's.
        fold_budget: The folds to train in total, counting earlier runs' and every driver's: a trial starts only
            if its k folds fit in what is left (trained folds plus those of running trials), and a pruned or
            failed trial gives back the folds it did not train; default: the study's.
        name: The study's name in the store; default: `spec.name`.
        study_file: The file `spec` came from, recorded with the study so `tlsearch resume` finds it.
        progress: "auto" (a bar on a terminal, else log lines), "bar", "log" or "off".
        resume: Require the study to exist already.

    Returns:
        The `optuna.Study`, as the store holds it when the run ends.

    Raises:
        TLSearchError: Bad options (before any study is created), or a study that cannot run.
    """
    return drive(
        spec,
        mongo=mongo,
        database=database,
        home=home,
        stores=stores,
        client=client,
        scheduler=scheduler,
        n_workers=n_workers,
        security=security,
        n_trials=n_trials,
        timeout=timeout,
        parallelism=parallelism,
        trial_timeout=trial_timeout,
        fold_budget=fold_budget,
        name=name,
        study_file=study_file,
        progress=progress,
        resume=resume,
    ).study


def drive(
    spec: StudySpec,
    *,
    mongo: str | None = None,
    database: str | None = None,
    home: str | os.PathLike | None = None,
    stores: Stores | None = None,
    client: distributed.Client | None = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    security: distributed.Security | None = None,
    n_trials: int | None = None,
    timeout: float | None = None,
    parallelism: int | None = None,
    trial_timeout: float | None = None,
    fold_budget: int | None = None,
    name: str | None = None,
    study_file: str | os.PathLike | None = None,
    progress: str = "auto",
    resume: bool = False,
) -> RunResult:
    """`run`, returning why the run ended as well (`RunResult`); the arguments are `run`'s.

    Trials a dead driver left RUNNING are failed and retried (at start and every heartbeat interval). Ctrl-C
    stops starting trials and waits for running ones; a second Ctrl-C fails them. SIGTERM and the end of
    `timeout` stop starting trials too, and fail those still running STOP_GRACE seconds later;
    `trial_timeout` fails a trial that runs longer and restarts its worker. Bad options raise before any
    study is created.
    """
    _refuse_spawned_import()
    if stores is not None and (mongo, database, home) != (None, None, None):
        raise TypeError("give stores= or mongo=, database=, home=, not both")
    settings = Settings.resolve(mongo=mongo, database=database, home=home)
    stores = stores or Stores.of(settings)
    where = _with_settings(cluster.ClusterOptions(client, scheduler, n_workers, security), settings)
    if where.is_local:
        _refuse_unguarded_script()
    budget = Budget(
        n_trials=n_trials if n_trials is not None else spec.n_trials,
        timeout=timeout if timeout is not None else spec.timeout,
        parallelism=parallelism,
        trial_timeout=trial_timeout if trial_timeout is not None else spec.trial_timeout,
        fold_budget=fold_budget if fold_budget is not None else spec.fold_budget,
    )
    name = check_study_name(name or spec.name)
    _check_budget(budget, where.n_workers if where.is_local else None)
    spaces.check_space(spec.space, name)
    if not isinstance(spec.dataset, str):  # data held in Python: stored now, so that workers get only its name
        spec = dataclasses.replace(spec, dataset=push_data(stores.dataset_store(), spec.dataset).ref)

    with DriverLock(stores, name) as driver_lock, Interrupts() as interrupts:
        study, created = _open_study(spec, stores, name, resume)
        with _deleted_if_start_fails(study, created):
            dataset_ref = _bind_study(study, spec, stores, study_file)
            k = n_folds(stores, study)
            if budget.fold_budget is not None and budget.fold_budget < k:
                raise TLSearchError(
                    f"fold_budget (--fold-budget) {budget.fold_budget} is less than a trial's {k} folds"
                )
            fail_abandoned_trials(study, spec, k, all_running=driver_lock.alone)
            driver_lock.share()
            done = _count_done(study)
            if budget.n_trials is not None and done >= budget.n_trials:
                return RunResult(study, NOTHING_TO_DO, f"{done}/{budget.n_trials} trials finished")
            if budget.fold_budget is not None:
                used = folds_claimed(compat.storage_of(study), compat.study_id(study))
                used = folds_used(study, k) if used is None else used
                if used + k > budget.fold_budget:
                    return RunResult(
                        study,
                        NOTHING_TO_DO,
                        f"{FOLD_BUDGET_REACHED} ({used}/{budget.fold_budget} folds; a trial takes {k})",
                    )
            with cluster.connect(where) as dask_client:
                cluster.check_stores_reachable(dask_client, stores)
                dispatcher = Dispatcher(study, spec, stores, dataset_ref, dask_client, budget, progress, interrupts)
                return RunResult(study, *dispatcher.run())


def _with_settings(where: cluster.ClusterOptions, settings: Settings) -> cluster.ClusterOptions:
    """The settings fill in what the cluster options leave open: the scheduler, when they name no client,
    scheduler or number of workers, and TLS."""
    if where.is_local and where.n_workers is None:
        where = dataclasses.replace(where, scheduler=settings.scheduler_address())
    if where.security is None:
        where = dataclasses.replace(where, security=cluster.tls_security(*settings.tls_files()))
    return where


def _check_budget(budget: Budget, n_workers: int | None) -> None:
    """Refuse budgets and sizes that cannot run, before a study is created."""
    if budget.n_trials is None and budget.timeout is None and budget.fold_budget is None:
        raise TLSearchError("give the study a budget: n_trials, fold_budget and/or timeout")
    folds = budget.fold_budget
    if folds is not None and not (isinstance(folds, int) and not isinstance(folds, bool) and folds >= 1):
        raise TLSearchError(f"fold_budget (--fold-budget) must be a whole number of folds, at least 1, got {folds!r}")
    for option, value, low in (
        ("n_trials (--n-trials)", budget.n_trials, "at least 1"),
        ("parallelism (--parallelism)", budget.parallelism, "at least 1"),
        ("n_workers (--workers)", n_workers, "at least 1"),
        ("timeout (--timeout)", budget.timeout, "more than 0 seconds"),
        ("trial_timeout (--trial-timeout)", budget.trial_timeout, "more than 0 seconds"),
    ):
        if value is not None and not (value >= 1 if low == "at least 1" else value > 0):  # NaN too
            raise TLSearchError(f"{option} must be {low}, got {value:g}")


def _refuse_spawned_import() -> None:
    """A script that calls `run` at import time would start a driver in every worker process it spawns."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise main_guard_exit("tlsearch.run was called while a worker process imported your script")


def _refuse_unguarded_script() -> None:
    """Refuse a call from the top level of the `__main__` script outside its main guard, before a local
    cluster spawns worker processes that would import the script and run the call again."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    frame = inspect.currentframe()
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__"
    ):
        frame = frame.f_back
    if frame is None or path is None:
        return  # not called by a script run as such (an interactive session, a notebook, python -c)
    line, filename = frame.f_lineno, frame.f_code.co_filename
    del frame  # no reference cycle through this function's frame
    try:
        if Path(filename).resolve() != Path(path).resolve():
            return
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return
    statement = next((s for s in tree.body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
    if statement is not None and not _is_main_guard(statement):
        raise main_guard_exit(f"tlsearch.run is called on line {line} of {path}, outside the main guard")


def _is_main_guard(statement: ast.stmt) -> bool:
    """Whether `statement` is `if __name__ == "__main__":` (either way round)."""
    if not (isinstance(statement, ast.If) and isinstance(statement.test, ast.Compare)):
        return False
    sides = [statement.test.left, *statement.test.comparators]
    names = {s.id for s in sides if isinstance(s, ast.Name)} | {s.value for s in sides if isinstance(s, ast.Constant)}
    return names == {"__name__", "__main__"} and isinstance(statement.test.ops[0], ast.Eq)


def _open_study(spec, stores: Stores, name: str, resume: bool) -> tuple[optuna.Study, bool]:
    """Load the study, or create it unless `resume`; whether it was created now."""
    storage = stores.study_storage()
    if resume:
        return study_attrs.load(stores, name, spec), False
    existed = _study_exists(storage, name)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(max(verbosity, logging.WARNING))  # not Optuna's "A new study created" line
    try:
        study = optuna.create_study(
            storage=storage,
            study_name=name,
            directions=list(spec.directions_),
            sampler=spec.sampler_,
            pruner=spec.pruner_,
            load_if_exists=True,
        )
    finally:
        optuna.logging.set_verbosity(verbosity)
    return study, not existed


@contextlib.contextmanager
def _deleted_if_start_fails(study: optuna.Study, created: bool):
    """A failed start (bad dataset, unreachable cluster, Ctrl-C) leaves no empty study behind."""
    try:
        yield
    except BaseException:
        if created and not study.get_trials(deepcopy=False):
            with contextlib.suppress(KeyError):
                compat.storage_of(study).delete_study(compat.study_id(study))
        raise


def _study_exists(storage, name: str) -> bool:
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


def _bind_study(study: optuna.Study, spec, stores: Stores, study_file) -> str:
    """Check the study's directions, bind it to its dataset and fold plan; the dataset's ref."""
    name, directions = study.study_name, list(spec.directions_)
    if [d.name.lower() for d in study.directions] != [str(d).lower() for d in directions]:
        raise TLSearchError(
            f"study {name!r} optimizes {[d.name.lower() for d in study.directions]}, "
            f"but the study file says {directions}; use another --name"
        )
    store = stores.dataset_store()
    info = ensure_dataset(store, spec.dataset)
    dataset_ref = f"{info.name}@{info.version}"
    attrs = study_attrs.read(study)
    if study_attrs.FOLD_PLAN not in attrs:
        dataset = HostCache().open(store, dataset_ref)
        plan = fold_plan_for(store, dataset, spec.cv_)
        for key, value in (
            (study_attrs.DATASET_REF, dataset_ref),
            (study_attrs.DATASET_HASH, info.hash),
            (study_attrs.FOLD_PLAN, plan.hash),
        ):
            study_attrs.write(study, key, value)
    else:
        if attrs[study_attrs.DATASET_HASH] != info.hash:
            raise TLSearchError(
                f"study {name!r} was run on dataset {attrs[study_attrs.DATASET_REF]} "
                f"(sha256 {attrs[study_attrs.DATASET_HASH][:12]}), but {spec.dataset!r} is now {dataset_ref} "
                f"(sha256 {info.hash[:12]}): name the original version in the study file "
                f"(dataset={attrs[study_attrs.DATASET_REF]!r}) or start a new study with --name"
            )
        store.get_fold_plan(attrs[study_attrs.FOLD_PLAN]).check_matches(info, spec.cv_)
        dataset_ref = attrs[study_attrs.DATASET_REF]
    with warnings.catch_warnings():  # experimental in Optuna 5; names the value in reports and the dashboard
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(list(spec.metric_names))
    if study_file is not None:
        study_files.remember(stores, name, study_file)  # what resume/refit run; the store's copy is a hint
        study_attrs.write(study, study_attrs.STUDY_FILE, str(Path(study_file).resolve()))
    study_attrs.write(study, study_attrs.STOP, False)
    return dataset_ref


def _count_done(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=DONE))
