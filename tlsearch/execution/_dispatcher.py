"""The dispatcher: keeps a study's trials in flight on a Dask cluster until its budget is spent or it is stopped.

`driver.drive` opens the study and the cluster, then hands over to a `Dispatcher`: it asks Optuna for each
trial, submits it as a task (or, when workers would sit idle, as several tasks that share its folds:
`fold_tasks`), keeps its heartbeat while it runs, tells the study how it ended (failing and re-queueing it if
its worker died), and asks its `StopPolicy` when to stop starting trials and why the run ended.

The fold budget: before a trial starts, its k folds are claimed from the study's fold counter in the store
(`ClaimedFolds`), and no trial starts unless k folds are left; when a trial is pruned or fails, the folds it
did not train are given back. So the counter is the folds trained plus those of the trials in flight, on any
number of drivers, and never exceeds the budget.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import time
import warnings
from collections import Counter

import distributed
import optuna
from optuna.trial import TrialState

from tlsearch._compat import optuna as compat
from tlsearch.cv import _evaluate as cv
from tlsearch.data import HostCache
from tlsearch.execution import _cluster as cluster
from tlsearch.execution import _fold_tasks as fold_tasks
from tlsearch.execution._heartbeat import Heartbeat
from tlsearch.execution._progress import ETA_WINDOW, Progress
from tlsearch.execution._reevaluations import Reevaluations
from tlsearch.execution._retries import (
    fail_abandoned_trials,
    fail_and_retry,
    folds_used,
    release_untrained_folds,
    worker_deaths,
)
from tlsearch.execution._stop_policy import (  # noqa: F401 - also read from the old path `tlsearch.dispatcher`
    BUDGET_REACHED,
    CONSECUTIVE_FAILURES,
    EXIT_CODES,
    FOLD_BUDGET_REACHED,
    GRID_EXHAUSTED,
    INTERRUPTED,
    NO_COMPLETE_TRIAL,
    NOTHING_TO_DO,
    STOP_GRACE,
    STOP_REQUESTED,
    STUDY_STOPPED,
    TERMINATED,
    TIMEOUT_REACHED,
    StopPolicy,
)
from tlsearch.execution._trial_task import TrialJob, TrialOutcome, pack_spec, sampler_seed
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.storage._slots import ClaimedFolds, TrialSlots

log = logging.getLogger(__name__)

DONE = (TrialState.COMPLETE, TrialState.PRUNED)
CAPACITY_READ_INTERVAL = 5.0  # seconds between reads of the cluster's trial slots (one scheduler round trip)


@dataclasses.dataclass(frozen=True)
class Budget:
    """When a run ends: `n_trials` complete or pruned trials in total (counting earlier ones), `timeout` seconds,
    or fewer than a trial's k folds left of `fold_budget` folds in total (a trial claims its k folds before it
    starts and gives back those it did not train), whichever comes first (any may be None, not all);
    `parallelism` trials in flight (default: the cluster's capacity); `trial_timeout` seconds at most per trial
    (None: no limit)."""

    n_trials: int | None = None
    timeout: float | None = None
    parallelism: int | None = None
    trial_timeout: float | None = None
    fold_budget: int | None = None


class Dispatcher:
    """Keeps up to `parallelism` trials in flight until the budget is spent."""

    def __init__(self, study, spec, stores, dataset_ref, client, budget: Budget, progress, interrupts):
        self.study, self.spec, self.stores, self.client = study, spec, stores, client
        self.dataset_ref = dataset_ref
        attrs = study_attrs.read(study)
        self.dataset_hash, self.fold_plan_hash = attrs[study_attrs.DATASET_HASH], attrs[study_attrs.FOLD_PLAN]
        self.n_trials, self.trial_timeout, self.fold_budget = budget.n_trials, budget.trial_timeout, budget.fold_budget
        self._started: dict[distributed.Future, float] = {}  # task -> when first seen on a worker (monotonic)
        self._fixed_parallelism = budget.parallelism  # None: follow the cluster's capacity as workers come and go
        self._next_capacity_read = 0.0
        self._read_capacity()
        self.running: dict[distributed.Future, tuple[int, int]] = {}  # task -> (trial_id, number)
        self.trials: dict[int, optuna.Trial] = {}  # trial_id -> the trial `ask` returned, to tell it
        self.split_trials: dict[int, fold_tasks.SplitTrial] = {}  # trial_id -> its tasks, if it runs as several
        self._n_folds = n_folds(stores, study)
        self.slots = TrialSlots(compat.storage_of(study), compat.study_id(study))
        self.folds = ClaimedFolds(compat.storage_of(study), compat.study_id(study))
        # A trial claims its k folds where the study keeps a fold counter: from its first run with a fold budget
        # (the count starts from the stored trials'). Elsewhere it claims none: no budget reads the count, and a
        # claim is a locked, fsynced write and a release one more write for each pruned or failed trial.
        counted = self.fold_budget is not None or self.folds.count() is not None
        self._folds_per_trial = self._n_folds if counted else 0  # the folds each trial claims
        self._killers: dict[int, str] = {}  # trial_id -> the worker that died under it alone
        self.reevaluations = Reevaluations(study, spec.intensify)  # the leading trials' extra evaluations
        trials = study.get_trials(deepcopy=False)
        durations = [t.duration.total_seconds() for t in trials if t.state in DONE and t.duration is not None]
        self.progress = Progress(
            self.n_trials,
            Counter(t.state.name for t in trials),
            progress,
            parallelism=self.parallelism,
            durations=durations[-ETA_WINDOW:],
        )
        if self.progress.shows_best:
            self.progress.best = self._best()
        self.policy = StopPolicy(
            n_trials=self.n_trials,
            timeout=budget.timeout,
            parallelism=self.parallelism,
            interrupts=interrupts,
            read_stop_flag=lambda: bool(study_attrs.read(study).get(study_attrs.STOP)),
            note=self.progress.note,
            fold_budget=self.fold_budget,
        )
        self.heartbeat = Heartbeat(compat.storage_of(study), self._trial_ids_in_flight)
        # Results are fetched from the workers in the background as trials finish, not one by one here, on
        # this client's event loop (Dask's default is the newest client's, whose sockets are not this one's).
        self._finished = distributed.as_completed(loop=client.loop, with_results=True, raise_errors=False)
        self._untold: list[tuple[int, int, TrialOutcome]] = []  # collected, not yet told to the study

    def run(self) -> tuple[str, str]:
        """Dispatch until the budget is spent or the run is stopped; (why it ended, detail)."""
        client = self.client
        cluster.prepare_workers(client, self.spec)
        client.register_plugin(cluster.DatasetPrefetch(self.stores, self.dataset_ref, self.dataset_hash))
        client.register_plugin(cluster.WorkerExits())
        definition = cluster.StudyDefinition(pack_spec(self.spec))
        client.register_plugin(definition)
        self.definition = definition.name
        link = cluster.dashboard_link(client)
        self.progress.note(
            f"study {self.study.study_name!r} in {self.stores.describe()}; "
            f"{self.parallelism} trials at a time" + (f"; Dask dashboard: {link}" if link else "")
        )
        self.heartbeat.start()
        next_stale_check = time.monotonic()
        self.policy.start()
        # Optuna allows study.stop() only inside Study.optimize
        self.study.stop = lambda: self.policy.study_stopped(self.study.sampler)
        try:
            while self.policy.abandon_reason() is None:
                self.policy.check(self._trials_in_flight())
                self._expire_slow_trials()
                if time.monotonic() >= next_stale_check:  # a driver that died elsewhere: run its trials' retries
                    next_stale_check = time.monotonic() + self._check_stale()
                self._follow_capacity()
                self._fill()
                if not self.running:
                    if self.policy.stopping or not self._running_elsewhere():
                        break
                    time.sleep(0.5)  # the budget is taken by other drivers' trials: one may fail and free a slot
                    continue
                # The finished futures are released only once their replacements are submitted: a release
                # is a message to the scheduler, and Dask sends a client's messages at most every 10 ms.
                done = self._next_finished(timeout=1.0)
                self._settle(done)
                del done
                self.progress.update(self._trials_in_flight())
        finally:
            del self.study.stop
            self.heartbeat.stop()
            if self.running:
                self._abandon_running(self.policy.abandon_reason() or "the driver stopped")
            self.progress.close()
        return self.policy.end(Counter(t.state for t in self.study.get_trials(deepcopy=False)), self.folds.count())

    def _read_capacity(self) -> None:
        """Trials in flight at once (`parallelism`: the budget's, else the slots the cluster's workers offer, at
        least one) and what each asks of a worker (`resources`: see cluster.trial_capacity)."""
        slots, self.resources = cluster.trial_capacity(self.client)
        self.parallelism = self._fixed_parallelism or max(1, slots)
        self._next_capacity_read = time.monotonic() + CAPACITY_READ_INTERVAL

    def _follow_capacity(self) -> None:
        """Read the cluster's capacity again now and then: workers that join later (a batch queue's jobs, an
        adaptive cluster) get trials, and the trials in flight never outnumber the slots that run them."""
        if time.monotonic() < self._next_capacity_read:
            return
        before = self.parallelism
        self._read_capacity()
        if self.parallelism != before:
            self.progress.parallelism = self.parallelism
            self.progress.note(f"{self.parallelism} trials at a time (the cluster's workers changed)")

    def _check_stale(self) -> float:
        """Fail the trials of dead drivers; seconds until the next check (the heartbeat interval)."""
        interval = compat.heartbeat_interval(compat.storage_of(self.study))
        if not interval:
            return math.inf
        fail_abandoned_trials(self.study, self.spec, self._folds_per_trial)
        return interval

    def _running_elsewhere(self) -> bool:
        return bool(self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))

    def _settle(self, done: list[tuple[distributed.Future, object]]) -> None:
        """Record finished trials and refill their slots. Failures are recorded first, so that a retry they
        queue takes the next free slot; the others after the refill, as a whole wave of trials often finishes
        at once and recording takes the driver a few milliseconds per trial."""
        collected = [self._collect(future, result) for future, result in done if future in self.running]
        self._untold = [item for item in collected if item is not None]
        self._acquit_shared_deaths()
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
        """Submit trials until the slots are full, the budget's trial slots are all taken, or fewer than a
        trial's folds are left in the fold budget."""
        if self.policy.stopping:
            return
        while len(self.running) < self.parallelism:
            slots_taken = self.slots.claim(self.n_trials or sys.maxsize, self._claimed)
            if slots_taken is None:
                return
            folds_claimed = 0
            if self._folds_per_trial:
                folds_claimed = self.folds.claim(
                    self._folds_per_trial, self.fold_budget or sys.maxsize, self._folds_used
                )
                if folds_claimed is None:
                    self.slots.release()
                    return
            try:
                self._submit(slots_taken, folds_claimed)
            except BaseException:
                self.slots.release()
                self.folds.release(self._folds_per_trial)
                raise

    def _claimed(self) -> int:
        """Trial slots in use when a study's counter starts: its finished and running trials."""
        return len(self.study.get_trials(deepcopy=False, states=(*DONE, TrialState.RUNNING)))

    def _folds_used(self) -> int:
        return folds_used(self.study, self._n_folds)

    def _submit(self, slots_taken: int, folds_claimed: int) -> None:
        """Start a trial, its slot and folds claimed already (`slots_taken`, `folds_claimed`: the study's counts
        with them)."""
        with warnings.catch_warnings():
            # Optuna suggests Study.optimize for heartbeats; here the driver beats for every trial in flight.
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            self.reevaluations.enqueue_next()  # a leading trial's re-evaluation, if the rule asks for one
            trial = self.study.ask()
        trial_id = compat.trial_id(trial)
        job = TrialJob(
            self.stores,
            self.study.study_name,
            trial_id,
            self.dataset_ref,
            self.dataset_hash,
            self.fold_plan_hash,
            sampler_seed(self.spec, self.study.study_name, trial.number),
        )
        fixed, shares = self._fold_shares(job, slots_taken, folds_claimed)
        key = f"trial-{self.study.study_name}-{trial.number}-{trial_id}"
        tasks = [
            self.client.submit(
                cluster.run_trial_task,
                dataclasses.replace(job, folds=share),
                self.definition,
                key=key + (f"-folds-{share[0]}" if share else ""),
                pure=False,
                resources=self.resources,
            )
            for share in shares
        ]
        self.trials[trial_id] = trial
        for task in tasks:
            self.running[task] = (trial_id, trial.number)
            self._finished.add(task)
        if fixed is not None:
            self.split_trials[trial_id] = fold_tasks.SplitTrial(fixed, tasks)
        self.heartbeat.soon(trial_id)

    def _fold_shares(
        self, job: TrialJob, slots_taken: int, folds_claimed: int
    ) -> tuple[optuna.Trial | None, list[tuple[int, ...]]]:
        """The folds each task of a new trial trains: [()] (one task, all its folds), unless few trials are
        left in the budget, of trials or folds (`fold_tasks.n_tasks`); then also the trial with its params fixed."""
        if self.parallelism < 2 or not (self.n_trials or self.fold_budget):
            return None, [()]
        left = sys.maxsize
        if self.n_trials:
            left = max(0, self.n_trials - slots_taken)  # this trial's slot is taken: counted
        if self.fold_budget:
            left = min(left, (self.fold_budget - folds_claimed) // self._n_folds)
        n_tasks = fold_tasks.n_tasks(self.spec, self.parallelism, left, self._n_folds)
        fixed = fold_tasks.fix_params(self.study, self.spec, job.trial_id, job.seed) if n_tasks > 1 else None
        if fixed is None:
            return None, [()]
        return fixed, fold_tasks.deal(self._n_folds, n_tasks)

    def _next_finished(self, timeout: float) -> list[tuple[distributed.Future, object]]:
        """The (future, result) pairs of the tasks that finished, waiting up to `timeout` s for the first."""
        with self._finished.thread_condition:
            if not self._finished.has_ready():
                self._finished.thread_condition.wait(timeout)
        return self._finished.next_batch(block=False)

    def _collect(self, future: distributed.Future, result) -> tuple[int, int, TrialOutcome] | None:
        """Take a finished task out of the running set: (trial id, number, outcome), or None while other tasks
        of its trial run. The first task of a split trial that does not complete ends it: the others are
        cancelled."""
        trial_id, number = self.running.pop(future)
        self._started.pop(future, None)
        lost = future.status != "finished"
        outcome = self._lost(result) if lost else result
        if lost and isinstance(_task_error(result), distributed.KilledWorker):
            self._killers[trial_id] = _task_error(result).last_worker.address
        split = self.split_trials.get(trial_id)
        if split is None:
            return trial_id, number, outcome
        outcome = split.collect(future, outcome)
        if outcome is None:
            return None
        for task in split.pending:
            task.cancel()
            self.running.pop(task, None)
            self._started.pop(task, None)
        return trial_id, number, outcome

    @staticmethod
    def _lost(result) -> TrialOutcome:
        """The outcome of a task that was itself lost: worker died, cancelled, unpicklable result."""
        error = _task_error(result)
        return TrialOutcome(
            TrialState.FAIL,
            error={"error_type": "WorkerLost", "error_message": f"{type(error).__name__}: {error}"},
            retryable=True,
        )

    def _record(self, trial_id: int, number: int, outcome: TrialOutcome) -> None:
        """Tell the study how a trial ended (failing and re-queueing it if it failed)."""
        split = self.split_trials.pop(trial_id, None)
        trial = self.trials.pop(trial_id, None)
        if split is not None and outcome.state == TrialState.COMPLETE:
            outcome = split.record(self.spec, cv.first_attrs(self.dataset_hash, self.fold_plan_hash, self._n_folds))
        if outcome.state == TrialState.FAIL:
            self._fail(trial_id, outcome)
            self.progress.running = self._trials_in_flight()
            self.progress.finished(number, TrialState.FAIL, None, self.policy.last_error)
            run_callbacks(self.spec, self.study, trial_id)
            return
        self.policy.trial_finished()
        # The trial object, not its number: telling by number looks its id up in the store (twice).
        self.study.tell(number if trial is None else trial, outcome.values, state=outcome.state, skip_if_finished=True)
        if outcome.state == TrialState.PRUNED and self._folds_per_trial:
            told = compat.storage_of(self.study).get_trial(trial_id)
            if told.state == TrialState.PRUNED:  # not failed meanwhile as stale elsewhere, which gave them back
                release_untrained_folds(self.study, told, self._folds_per_trial)
        if outcome.state == TrialState.COMPLETE and self.spec.intensify:
            self.reevaluations.told(compat.storage_of(self.study).get_trial(trial_id))
        value = outcome.values[0] if outcome.values else None
        if outcome.state == TrialState.COMPLETE and self.progress.shows_best:
            self.progress.best = self._best()  # the line printed for this trial counts it
        self.progress.running = self._trials_in_flight()
        self.progress.finished(
            number, outcome.state, value, f"{outcome.seconds:.1f} s on {outcome.worker}", outcome.seconds
        )
        run_callbacks(self.spec, self.study, trial_id)

    def _expire_slow_trials(self) -> None:
        """Fail the trials running longer than `trial_timeout` (counted from when a worker took their task) as
        TrialTimeout, not retried (the trial's own doing), and restart the workers that run them: a Python
        thread cannot be interrupted."""
        if self.trial_timeout is None or not self.running:
            return
        now = time.monotonic()
        on_worker = {key: address for address, keys in self.client.processing().items() for key in keys}
        for task in self.running:
            if task.key in on_worker:
                self._started.setdefault(task, now)
        expired = {self.running[task] for task, start in self._started.items() if now - start > self.trial_timeout}
        if not expired:
            return
        tasks = [task for task, trial in self.running.items() if trial in expired]
        for task in tasks:
            del self.running[task]
            self._started.pop(task, None)
        # Before its task is cancelled: a worker still busy with it would take the next trial and lose it.
        cluster.restart_now(self.client, sorted({on_worker[task.key] for task in tasks if task.key in on_worker}))
        for task in tasks:
            task.cancel()
        error = {"error_type": "TrialTimeout", "error_message": f"ran longer than {self.trial_timeout:g} s"}
        for trial_id, number in sorted(expired):
            self.split_trials.pop(trial_id, None)
            self._record(trial_id, number, TrialOutcome(TrialState.FAIL, error=error))

    def _acquit_shared_deaths(self) -> None:
        """A worker that died running several trials (a multi-threaded worker) does not say which one killed
        it: none of them is blamed, each is retried for free."""
        shared = {address for address, n in Counter(self._killers.values()).items() if n > 1}
        self._killers = {trial_id: address for trial_id, address in self._killers.items() if address not in shared}

    def _fail(self, trial_id: int, outcome: TrialOutcome) -> None:
        """Fail a trial and queue its retry: a trial's own error is not retried; one whose worker died under it
        is retried once, and fails for good the second time; one lost to a fault not its own is retried for
        free. Only parameter sets failed for good count toward CONSECUTIVE_FAILURES."""
        error, retries = outcome.error, self.spec.retries if outcome.retryable else 0
        killer = self._killers.pop(trial_id, None)
        if killer is not None:
            cause = cluster.death_cause(cluster.worker_exit_code(self.client, killer))
            if worker_deaths(compat.storage_of(self.study).get_trial(trial_id)):
                error = {"error_type": "WorkerKilled", "error_message": f"killed its worker twice: {cause}"}
            else:
                error = {"error_type": "WorkerKilled", "error_message": f"its worker died under it: {cause}"}
        free = killer is None and error.get("error_type") == "WorkerLost"
        retried = fail_and_retry(
            self.study,
            trial_id,
            error,
            retries,
            n_folds=self._folds_per_trial,
            killed_worker=killer is not None,
            free=free,
        )
        error_line = f"{error.get('error_type')}: {error.get('error_message')}"
        self.policy.trial_failed(error_line, for_good=retried is False)

    def _abandon_running(self, reason: str) -> None:
        """Fail the running trials as `Interrupted`, one line each; their retries wait for the next resume."""
        trials = list(dict.fromkeys(self.running.values()))  # one entry per trial, however many tasks it runs as
        self.policy.abandoned(len(trials))
        for task in self.running:
            task.cancel()
        self.running, self.split_trials, self.trials, self._started = {}, {}, {}, {}
        for left, (trial_id, number) in enumerate(trials, 1):
            fail_and_retry(
                self.study,
                trial_id,
                {"error_type": "Interrupted", "error_message": reason},
                self.spec.retries,
                n_folds=self._folds_per_trial,
            )
            self.progress.running = len(trials) - left
            self.progress.finished(number, TrialState.FAIL, None, f"Interrupted: {reason}")

    def _trials_in_flight(self) -> int:
        return len(set(self.running.values()))

    def _trial_ids_in_flight(self) -> set[int]:
        """Called from the heartbeat's thread: copies `running`, which the dispatching thread changes meanwhile."""
        return {trial_id for trial_id, _ in list(self.running.values())}

    def _best(self) -> float | None:
        if len(self.study.directions) > 1:
            return None
        with contextlib.suppress(ValueError):
            return self.study.best_value
        return None


def n_folds(stores, study: optuna.Study) -> int:
    """The folds of each trial of `study`: its fold plan's."""
    plan_hash = study_attrs.read(study)[study_attrs.FOLD_PLAN]
    return HostCache().fold_plan(stores.dataset_store(), plan_hash).n_splits


def _task_error(result):
    """The exception of a task that did not finish (`as_completed` gives it alone or in an exc_info tuple)."""
    return result[1] if isinstance(result, tuple) else result


def run_callbacks(spec, study: optuna.Study, trial_id: int) -> None:
    """Call the spec's `callbacks` with the trial just recorded (its cv_results_ user attributes included), as
    `Study.optimize` does; a callback that raises is logged as a warning, and the study goes on."""
    if not spec.callbacks:
        return
    trial = compat.storage_of(study).get_trial(trial_id)
    for callback in spec.callbacks:
        try:
            callback(study, trial)
        except Exception as error:  # noqa: BLE001 - a tracking server down must not stop the study
            log.warning(
                "callback %s failed on trial %d: %s: %s",
                getattr(callback, "__name__", type(callback).__name__),
                trial.number,
                type(error).__name__,
                error,
            )
