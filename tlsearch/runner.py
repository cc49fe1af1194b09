"""The driver: runs a study to its target on a Dask cluster, one task per trial, and resumes it later.

The driver owns each trial's lifecycle: it creates the trial (`study.ask`), sends it to a worker,
keeps its heartbeat while the task runs, and tells the result. A task whose worker died is a known
trial: the driver fails it and queues a retry with the same parameters.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import warnings
from pathlib import Path

import distributed
import filelock
import optuna
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import TrialState

from tlsearch import cluster
from tlsearch.errors import TLSearchError
from tlsearch.progress import Progress
from tlsearch.stores import Stores
from tlsearch.trial_task import TrialJob, TrialOutcome, pack_spec, run_trial, trial_seed

log = logging.getLogger(__name__)

# System attributes the driver keeps on each study (readable in the store; `tlsearch status` shows them).
ATTR_DATASET_REF = "tlsearch:dataset_ref"
ATTR_DATASET_HASH = "tlsearch:dataset_hash"
ATTR_FOLD_PLAN = "tlsearch:fold_plan_hash"
ATTR_STUDY_FILE = "tlsearch:study_file"
ATTR_STOP = "tlsearch:stop_requested"

_DONE = (TrialState.COMPLETE, TrialState.PRUNED)


class StudyBusyError(TLSearchError):
    """Another driver on this host runs the same local study."""


def run(spec, *, mongo: str | None = None, database: str = "tlsearch", home: str | os.PathLike | None = None,
        stores: Stores | None = None, client: distributed.Client | None = None,
        scheduler: str | None = None, n_workers: int | None = None, parallelism: int | None = None,
        n_trials: int | None = None, timeout: float | None = None, name: str | None = None,
        study_file: str | os.PathLike | None = None, progress: str = "auto",
        resume: bool = False) -> optuna.Study:
    """Run the study `spec` until `n_trials` trials are complete or pruned in total (counting those
    already in the store), `timeout` seconds pass, or `tlsearch stop` asks it to; return the study.

    The stores are MongoDB at `mongo` (default `$TLSEARCH_MONGO_URI`) or the embedded default under `home`;
    `stores` gives them fully instead. The cluster is `client`, the scheduler at `scheduler`, or a new
    LocalCluster of `n_workers` processes. `resume=True` requires the study to exist. Trials a dead driver left RUNNING are failed and
    retried first. Ctrl-C stops starting trials and waits for running ones; a second Ctrl-C fails them.
    """
    from tlsearch import spaces

    stores = stores or Stores.resolve(mongo, database, home)
    name = name or spec.name
    n_trials = n_trials if n_trials is not None else spec.n_trials
    timeout = timeout if timeout is not None else spec.timeout
    if n_trials is None and timeout is None:
        raise TLSearchError("give the study a budget: n_trials and/or timeout")
    spaces.check_space(spec.space, name)

    with _driver_lock(stores, name):
        study, dataset_ref = _open_study(spec, stores, name, study_file, resume)
        _fail_abandoned_trials(study, spec)
        with cluster.connect(scheduler, n_workers, client) as dask_client:
            cluster.check_stores_reachable(dask_client, stores)
            dispatcher = _Dispatcher(study, spec, stores, dataset_ref, dask_client,
                                     parallelism, n_trials, timeout, progress)
            dispatcher.run()
    return study


def request_stop(stores: Stores, name: str) -> None:
    """Ask every driver of study `name` to finish its running trials and start no new ones."""
    study = load(stores, name)
    study._storage.set_study_system_attr(study._study_id, ATTR_STOP, True)


def load(stores: Stores, name: str, spec=None) -> optuna.Study:
    """The study `name` from the study store, as a plain `optuna.Study` (with `spec`'s sampler and pruner)."""
    try:
        return optuna.load_study(study_name=name, storage=stores.study_storage(),
                                 sampler=spec.sampler if spec else None, pruner=spec.pruner if spec else None)
    except KeyError:
        raise TLSearchError(f"no study named {name!r} in {stores.describe()}") from None


def copy(source: Stores, target: Stores, name: str, to_name: str | None = None) -> optuna.Study:
    """Copy study `name` from `source` into `target` (e.g. a local study into MongoDB), with its dataset and
    fold plan, so it can be resumed there (`optuna.copy_study` copies the trials and attributes)."""
    from tlsearch.data import HostCache

    to_name = to_name or name
    study = load(source, name)
    attrs = system_attrs(study)
    optuna.copy_study(from_study_name=name, from_storage=source.study_storage(),
                      to_storage=target.study_storage(), to_study_name=to_name)
    copied = load(target, to_name)
    if ATTR_DATASET_REF in attrs:
        dataset = HostCache().open(source.dataset_store(), attrs[ATTR_DATASET_REF])
        info = target.dataset_store().push(dataset.info.name, dict(dataset.arrays), metadata=dataset.info.metadata,
                                           new_version=True)
        target.dataset_store().put_fold_plan(source.dataset_store().get_fold_plan(attrs[ATTR_FOLD_PLAN]))
        copied._storage.set_study_system_attr(copied._study_id, ATTR_DATASET_REF, info.ref)
    return copied


def system_attrs(study: optuna.Study) -> dict:
    """The study's system attributes (Optuna 5 keeps them in the storage only)."""
    return study._storage.get_study_system_attrs(study._study_id)


def _open_study(spec, stores: Stores, name: str, study_file, resume: bool) -> tuple[optuna.Study, str]:
    """Create or load the study, and bind it to its dataset and fold plan (computed once, then checked)."""
    from tlsearch.data import HostCache, ensure_dataset, fold_plan_for

    storage = stores.study_storage()
    directions = list(spec.directions)
    if resume:
        study = load(stores, name, spec)
    else:
        study = optuna.create_study(storage=storage, study_name=name, directions=directions,
                                    sampler=spec.sampler, pruner=spec.pruner, load_if_exists=True)
    if [d.name.lower() for d in study.directions] != [str(d).lower() for d in directions]:
        raise TLSearchError(f"study {name!r} optimizes {[d.name.lower() for d in study.directions]}, "
                            f"but the study file says {directions}; use another --name")
    store = stores.dataset_store()
    info = ensure_dataset(store, spec.dataset)
    dataset_ref = f"{info.name}@{info.version}"
    attrs = system_attrs(study)
    if ATTR_FOLD_PLAN not in attrs:
        dataset = HostCache().open(store, dataset_ref)
        plan = fold_plan_for(store, dataset, spec.cv)
        for key, value in ((ATTR_DATASET_REF, dataset_ref), (ATTR_DATASET_HASH, info.hash),
                           (ATTR_FOLD_PLAN, plan.hash)):
            storage.set_study_system_attr(study._study_id, key, value)
    else:
        if attrs[ATTR_DATASET_HASH] != info.hash:
            raise TLSearchError(
                f"study {name!r} was run on dataset {attrs[ATTR_DATASET_REF]} "
                f"(sha256 {attrs[ATTR_DATASET_HASH][:12]}), but {spec.dataset!r} is now {dataset_ref} "
                f"(sha256 {info.hash[:12]}): name the original version in the study file "
                f"(dataset={attrs[ATTR_DATASET_REF]!r}) or start a new study with --name")
        store.get_fold_plan(attrs[ATTR_FOLD_PLAN]).check_matches(info, spec.cv)
        dataset_ref = attrs[ATTR_DATASET_REF]
    if study_file is not None:
        storage.set_study_system_attr(study._study_id, ATTR_STUDY_FILE, str(Path(study_file).resolve()))
    storage.set_study_system_attr(study._study_id, ATTR_STOP, False)
    return study, dataset_ref


@contextlib.contextmanager
def _driver_lock(stores: Stores, name: str):
    """On the embedded default, one driver per study: then every RUNNING trial at start is abandoned.
    (MongoDB studies may have several drivers; heartbeats tell which trials are abandoned.)"""
    if not stores.is_local:
        yield
        return
    path = stores.home / "locks" / f"{name.replace('/', '_')}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(path)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise StudyBusyError(f"study {name!r} is already running in another process on this host") from None
    try:
        yield
    finally:
        lock.release()


def _fail_abandoned_trials(study: optuna.Study, spec) -> None:
    """Fail trials left RUNNING by a driver that died, and queue their retries."""
    storage = study._storage
    if _heartbeat_interval(storage):
        abandoned = storage._get_stale_trial_ids(study._study_id)
    else:  # the embedded default: we hold the study's lock, so nothing else is running it
        abandoned = [t._trial_id for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    for trial_id in abandoned:
        _fail_and_retry(study, trial_id, {"error_type": "DriverLost",
                                          "error_message": "the driver running this trial stopped"}, spec.retries)


def _fail_and_retry(study: optuna.Study, trial_id: int, error: dict, retries: int) -> None:
    """Record why the trial failed, fail it (unless someone finished it first) and queue its retry."""
    storage = study._storage
    with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
        storage.set_trial_user_attrs(trial_id, error)
    try:
        if not storage.set_trial_state_values(trial_id, TrialState.FAIL):
            return
    except optuna.exceptions.UpdateFinishedTrialError:
        return  # someone else finished or failed it first
    _queue_retry(study, storage.get_trial(trial_id), retries)


def _queue_retry(study: optuna.Study, failed: optuna.trial.FrozenTrial, retries: int) -> None:
    """Enqueue `failed`'s parameters again, up to `retries` times per original trial. The bookkeeping is
    Optuna's RetryHeartbeatStaleTrialCallback's (system attrs `failed_trial`, `retry_history`), but the
    failed attempt's user attributes (its error, partial fold scores) stay with it."""
    history = [*failed.system_attrs.get("retry_history", []), failed.number]
    if len(history) > retries:
        return
    system_attrs = {**failed.system_attrs, "failed_trial": failed.system_attrs.get("failed_trial", failed.number),
                    "retry_history": history}
    study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, params=failed.params,
                                              distributions=failed.distributions, system_attrs=system_attrs))


class _Dispatcher:
    """Keeps up to `parallelism` trials in flight until the budget is spent."""

    def __init__(self, study, spec, stores, dataset_ref, client, parallelism, n_trials, timeout, progress):
        self.study, self.spec, self.stores, self.client = study, spec, stores, client
        self.dataset_ref = dataset_ref
        attrs = system_attrs(study)
        self.dataset_hash, self.fold_plan_hash = attrs[ATTR_DATASET_HASH], attrs[ATTR_FOLD_PLAN]
        self.n_trials, self.timeout = n_trials, timeout
        self.parallelism = parallelism or max(1, sum(w["nthreads"] for w in client.scheduler_info()["workers"].values()))
        self.running: dict[distributed.Future, tuple[int, int]] = {}  # future -> (trial_id, number)
        self.resources = cluster.trial_resources(client)
        self.stopping = False
        self.failed_in_a_row = 0
        self.last_error = ""
        self.progress = Progress(n_trials, self._count_done(), progress)
        self._heartbeat_stop = threading.Event()
        # Results are fetched from the workers in the background as trials finish, not one by one here.
        self._finished = distributed.as_completed(with_results=True, raise_errors=False)
        self._untold: list[tuple[int, int, TrialOutcome]] = []  # collected, not yet told to the study

    def run(self) -> None:
        client = self.client
        cluster.prepare_workers(client, self.spec)
        client.register_plugin(cluster.DatasetPrefetch(self.stores, self.dataset_ref))
        self.spec_future = client.scatter(pack_spec(self.spec), broadcast=True)
        link = cluster.dashboard_link(client)
        self.progress.note(f"study {self.study.study_name!r} in {self.stores.describe()}; "
                           f"{self.parallelism} trials at a time" + (f"; Dask dashboard: {link}" if link else ""))
        heartbeat = threading.Thread(target=self._heartbeat, name="tlsearch-heartbeat", daemon=True)
        heartbeat.start()
        started = time.monotonic()
        interrupted = False
        try:
            while True:
                try:
                    if not self.stopping:
                        self._check_stop(started)
                    self._fill()
                    if not self.running:
                        break
                    # The finished futures are released only once their replacements are submitted: a release
                    # is a message to the scheduler, and Dask sends a client's messages at most every 10 ms.
                    done = self._next_finished(timeout=1.0)
                    self._settle(done)
                    del done
                    self.progress.update(len(self.running), self._best())
                except KeyboardInterrupt:
                    if interrupted:
                        self._abandon_running("interrupted (Ctrl-C)")
                        break
                    interrupted = self.stopping = True
                    self.progress.note(f"stopping: waiting for {len(self.running)} running trial(s); "
                                       "Ctrl-C again to fail them now")
        finally:
            self._heartbeat_stop.set()
            if self.running:
                self._abandon_running("the driver stopped")
            self.progress.close()

    def _settle(self, done: list[tuple[distributed.Future, object]]) -> None:
        """Record finished trials and refill their slots. Failures are recorded first, so that a retry they
        queue takes the next free slot; the others after the refill, as a whole wave of trials often finishes
        at once and recording takes the driver a few milliseconds per trial."""
        self._untold = [self._collect(future, result) for future, result in done if future in self.running]
        try:
            for failed in [item for item in self._untold if item[2].state == TrialState.FAIL]:
                self._untold.remove(failed)
                self._record(*failed)
            self._fill()
        finally:  # even on Ctrl-C: a trial collected but never recorded would stay RUNNING
            untold, self._untold = self._untold, []
            for item in untold:
                self._record(*item)

    def _fill(self) -> None:
        """Submit trials until the slots are full or the budget is (about to be) spent."""
        if self.stopping:
            return
        wanted = self.parallelism - len(self.running)
        if wanted > 0 and self.n_trials is not None:  # the done count is a read of the study: only when needed
            untold_done = sum(outcome.state in _DONE for _, _, outcome in self._untold)
            wanted = min(wanted, self.n_trials - self._count_done() - untold_done - len(self.running))
        for _ in range(wanted):
            self._submit()

    def _count_done(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=_DONE))

    def _check_stop(self, started: float) -> None:
        if self.timeout is not None and time.monotonic() - started >= self.timeout:
            self.stopping = True
            self.progress.note(f"timeout of {self.timeout:g} s reached: finishing running trials")
        elif system_attrs(self.study).get(ATTR_STOP):
            self.stopping = True
            self.progress.note("stop requested: finishing running trials")
        elif self.failed_in_a_row >= max(10, 2 * self.parallelism):
            self.stopping = True
            self.progress.note(f"stopping: {self.failed_in_a_row} trials failed in a row; last: {self.last_error}")

    def _submit(self) -> None:
        with warnings.catch_warnings():
            # Optuna suggests Study.optimize for heartbeats; here the driver beats for every trial in flight.
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            trial = self.study.ask()
        job = TrialJob(self.stores, self.study.study_name, trial._trial_id, trial.number, self.dataset_ref,
                       self.dataset_hash, self.fold_plan_hash,
                       trial_seed(self.spec.seed, self.study.study_name, trial.number))
        future = self.client.submit(run_trial, job, self.spec_future, key=f"trial-{self.study.study_name}-{trial.number}-{trial._trial_id}",
                                    pure=False, resources=self.resources)
        self.running[future] = (trial._trial_id, trial.number)
        self._finished.add(future)
        self._beat(trial._trial_id)

    def _next_finished(self, timeout: float) -> list[tuple[distributed.Future, object]]:
        """The (future, result) pairs of the tasks that finished, waiting up to `timeout` s for the first."""
        with self._finished.thread_condition:
            if not self._finished.has_ready():
                self._finished.thread_condition.wait(timeout)
        return self._finished.next_batch(block=False)

    def _collect(self, future: distributed.Future, result) -> tuple[int, int, TrialOutcome]:
        """Take a finished task out of the running set: (trial id, number, outcome)."""
        trial_id, number = self.running.pop(future)
        if future.status == "finished":
            return trial_id, number, result
        # The task itself was lost: worker died, cancelled, unpicklable result.
        error = result[1] if isinstance(result, tuple) else result
        return trial_id, number, TrialOutcome(
            TrialState.FAIL, error={"error_type": "WorkerLost", "error_message": f"{type(error).__name__}: {error}"},
            retryable=True)

    def _record(self, trial_id: int, number: int, outcome: TrialOutcome) -> None:
        """Tell the study how a trial ended (failing and re-queueing it if it failed)."""
        if outcome.state == TrialState.FAIL:
            self.failed_in_a_row += 1
            self.last_error = f"{outcome.error.get('error_type')}: {outcome.error.get('error_message')}"
            _fail_and_retry(self.study, trial_id, outcome.error, self.spec.retries if outcome.retryable else 0)
            self.progress.finished(number, TrialState.FAIL, None, self.last_error)
            return
        self.failed_in_a_row = 0
        self.study.tell(number, outcome.values, state=outcome.state, skip_if_finished=True)
        value = outcome.values[0] if outcome.values else None
        if outcome.state == TrialState.COMPLETE:
            self.progress.best = self._best()  # the line printed for this trial counts it
        self.progress.finished(number, outcome.state, value, f"{outcome.seconds:.1f} s on {outcome.worker}")

    def _abandon_running(self, reason: str) -> None:
        for future, (trial_id, number) in list(self.running.items()):
            future.cancel()
            _fail_and_retry(self.study, trial_id, {"error_type": "Interrupted", "error_message": reason}, 0)
            self.progress.finished(number, TrialState.FAIL, None, reason)
        self.running.clear()

    def _best(self) -> float | None:
        if len(self.study.directions) > 1:
            return None
        with contextlib.suppress(ValueError):
            return self.study.best_value
        return None

    def _heartbeat(self) -> None:
        interval = _heartbeat_interval(self.study._storage)
        while interval and not self._heartbeat_stop.wait(interval):
            for trial_id, _ in list(self.running.values()):
                self._beat(trial_id)

    def _beat(self, trial_id: int) -> None:
        if not _heartbeat_interval(self.study._storage):
            return
        try:
            self.study._storage.record_heartbeat(trial_id)
        except Exception as error:  # the server may be restarting; the next beat retries
            log.warning("heartbeat for trial %s failed: %s", trial_id, error)


def _heartbeat_interval(storage) -> float | None:
    return storage.get_heartbeat_interval() if isinstance(storage, BaseHeartbeat) else None
