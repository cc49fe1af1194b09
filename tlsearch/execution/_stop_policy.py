"""The stop policy: when a run stops starting trials, when it fails those still running, and why it ended.

Plain logic over what the dispatcher tells it (signals, trial failures, the study's stop flag, its trial
counts) and a clock; it starts, submits and fails nothing itself.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Mapping

import optuna
from optuna.trial import TrialState

STOP_CHECK_INTERVAL = 1.0  # seconds between reads of the study's stop flag (`tlsearch stop`)
# After SIGTERM, or once `timeout` is reached, running trials get this long to finish; then they are failed
# and retried on resume. Kubernetes and systemd send SIGKILL 30 s after SIGTERM by default: the cluster
# must still be shut down within that.
STOP_GRACE = 15.0

# Why a run ended, and the exit code `tlsearch run` / `resume` return for it (README: "Faults, stopping and resuming").
BUDGET_REACHED = "budget reached"
FOLD_BUDGET_REACHED = "fold budget reached"  # too few folds left for another trial
NOTHING_TO_DO = "nothing to do"
TIMEOUT_REACHED = "timeout reached"
CONSECUTIVE_FAILURES = "too many trials failed in a row"
NO_COMPLETE_TRIAL = "no trial completed"
STOP_REQUESTED = "stopped by `tlsearch stop`"
GRID_EXHAUSTED = "grid exhausted"  # a GridSampler or BruteForceSampler called study.stop(): every point was run
STUDY_STOPPED = "stopped by study.stop()"  # from another sampler or an Optuna callback
INTERRUPTED = "interrupted (Ctrl-C)"
TERMINATED = "terminated (SIGTERM)"
EXIT_CODES = {
    BUDGET_REACHED: 0,
    FOLD_BUDGET_REACHED: 0,
    NOTHING_TO_DO: 0,
    TIMEOUT_REACHED: 0,
    CONSECUTIVE_FAILURES: 3,
    NO_COMPLETE_TRIAL: 4,
    STOP_REQUESTED: 5,
    GRID_EXHAUSTED: 0,
    STUDY_STOPPED: 0,
    INTERRUPTED: 128 + signal.SIGINT,
    TERMINATED: 128 + signal.SIGTERM,
}


class StopPolicy:
    """Decides when a run stops starting trials and why it ended.

    `interrupts` counts the signals caught (`signum`: the first one's); `read_stop_flag` reads the study's
    `tlsearch stop` flag (called at most every STOP_CHECK_INTERVAL seconds); `note` shows a line to the person
    running the study; `clock` gives monotonic seconds. `timeout` counts from `start`. `fold_budget`: the folds
    the study may claim, if it has such a budget (the dispatcher stops claiming; `end` says so).
    """

    def __init__(
        self,
        *,
        n_trials: int | None,
        timeout: float | None,
        parallelism: int,
        interrupts,
        read_stop_flag: Callable[[], bool],
        note: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        fold_budget: int | None = None,
    ) -> None:
        self.n_trials, self.timeout, self.interrupts = n_trials, timeout, interrupts
        self.fold_budget = fold_budget
        self.max_failed_in_a_row = max(10, 2 * parallelism)
        self._read_stop_flag, self._note, self._clock = read_stop_flag, note, clock
        self.reason: str | None = None  # why the run stopped starting trials, once it has
        self.end_detail = ""
        self.failed_in_a_row = 0  # parameter sets failed for good in a row (attempts that are retried aside)
        self.last_error = ""
        self._started = 0.0
        self._deadline = math.inf  # when trials still running are failed (STOP_GRACE after SIGTERM, timeout)
        self._next_stop_check = 0.0

    @property
    def stopping(self) -> bool:
        """Whether the run has stopped starting trials."""
        return self.reason is not None

    def start(self) -> None:
        """The run starts now: `timeout` counts from here."""
        self._started = self._clock()

    def check(self, in_flight: int) -> None:
        """Stop starting trials if a signal came, the timeout passed, `tlsearch stop` was asked or too many
        trials failed in a row; `in_flight` trials are running (for the line shown)."""
        if self.interrupts.count:
            if self.reason in (INTERRUPTED, TERMINATED):
                return
            reason = INTERRUPTED if self.interrupts.signum == signal.SIGINT else TERMINATED
            self._stop(
                reason,
                f"waiting for {in_flight} running trial(s)"
                + ("; Ctrl-C again to fail them now" if reason == INTERRUPTED else f" up to {STOP_GRACE:g} s"),
            )
            if reason == TERMINATED:
                self._deadline = self._clock() + STOP_GRACE
        elif self.stopping:
            return
        elif self.timeout is not None and self._clock() - self._started >= self.timeout:
            self._stop(TIMEOUT_REACHED, f"{self.timeout:g} s: finishing running trials, up to {STOP_GRACE:g} s")
            self._deadline = self._clock() + STOP_GRACE
        elif self._stop_requested():
            self._stop(STOP_REQUESTED, "finishing running trials")
        elif self.failed_in_a_row >= self.max_failed_in_a_row:
            self.end_detail = f"last: {self.last_error}"
            self._stop(CONSECUTIVE_FAILURES, f"{self.failed_in_a_row} in a row; {self.end_detail}")

    def study_stopped(self, sampler: optuna.samplers.BaseSampler) -> None:
        """`study.stop()`, called by the sampler's `after_trial` (a grid is covered) or an Optuna callback as
        the driver tells a trial: like `tlsearch stop`, the running trials finish and no more start."""
        if not self.stopping:
            grid = isinstance(sampler, (optuna.samplers.GridSampler, optuna.samplers.BruteForceSampler))
            self._stop(GRID_EXHAUSTED if grid else STUDY_STOPPED, "finishing running trials")

    def trial_failed(self, error: str, *, for_good: bool) -> None:
        """A trial failed with `error` ("type: message"); `for_good`: its parameter set is not retried."""
        self.last_error = error
        if for_good:
            self.failed_in_a_row += 1

    def trial_finished(self) -> None:
        """A trial completed or was pruned."""
        self.failed_in_a_row = 0

    def abandon_reason(self) -> str | None:
        """Why the running trials must be failed now (a second Ctrl-C, STOP_GRACE passed), or None."""
        if self.interrupts.count >= 2:
            return "interrupted by a second Ctrl-C"
        if self._clock() >= self._deadline:
            return f"still running {STOP_GRACE:g} s after the run was told to stop ({self.reason})"
        return None

    def abandoned(self, n_trials: int) -> None:
        """`n_trials` running trials were failed as Interrupted (their retries queued)."""
        self.end_detail = f"{n_trials} running trial(s) failed as Interrupted, retries queued"

    def end(self, counts: Mapping[TrialState, int], folds_used: int | None = None) -> tuple[str, str]:
        """Why the run ended and a line of detail, given the study's trials by state and its folds claimed
        (`folds_used`) at the end."""
        n_finished = counts.get(TrialState.COMPLETE, 0) + counts.get(TrialState.PRUNED, 0)
        finished = f"{n_finished}" + (f"/{self.n_trials}" if self.n_trials else "") + " trials finished"
        if self.fold_budget is not None:
            finished = f"{folds_used}/{self.fold_budget} folds; {finished}"
        detail = finished + (f"; {self.end_detail}" if self.end_detail else "")
        if self.interrupts.count and self.reason not in (INTERRUPTED, TERMINATED):
            # both signals came while the driver waited for results, before `check` saw the first
            self.reason = INTERRUPTED if self.interrupts.signum == signal.SIGINT else TERMINATED
        if self.reason in (INTERRUPTED, TERMINATED, STOP_REQUESTED, CONSECUTIVE_FAILURES):
            return self.reason, detail
        if not counts.get(TrialState.COMPLETE, 0):
            return NO_COMPLETE_TRIAL, f"{detail}, {counts.get(TrialState.FAIL, 0)} failed" + (
                f"; last: {self.last_error}" if self.last_error else ""
            )
        if self.reason is None and self.fold_budget is not None and not (self.n_trials and n_finished >= self.n_trials):
            # nothing left to run and the trial budget not reached: the dispatcher was refused folds
            return FOLD_BUDGET_REACHED, detail
        return self.reason or BUDGET_REACHED, detail

    def _stop_requested(self) -> bool:
        """Whether `tlsearch stop` asked this study to stop; read at most every STOP_CHECK_INTERVAL seconds
        (the driver's loop turns at least once per finished trial)."""
        now = self._clock()
        if now < self._next_stop_check:
            return False
        self._next_stop_check = now + STOP_CHECK_INTERVAL
        return self._read_stop_flag()

    def _stop(self, reason: str, detail: str) -> None:
        self.reason = reason
        self._note(f"stopping: {reason}; {detail}")
