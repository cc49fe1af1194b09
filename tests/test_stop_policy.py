"""The stop policy on its own: every reason a run ends for, on a fake clock (no cluster, no sleep)."""

from __future__ import annotations

import signal
from collections import Counter

import optuna
import pytest
from optuna.trial import TrialState

from tlsearch.execution import _stop_policy as stop_policy
from tlsearch.execution._stop_policy import (
    BUDGET_REACHED,
    CONSECUTIVE_FAILURES,
    EXIT_CODES,
    FOLD_BUDGET_REACHED,
    GRID_EXHAUSTED,
    INTERRUPTED,
    NO_COMPLETE_TRIAL,
    STOP_GRACE,
    STOP_REQUESTED,
    STUDY_STOPPED,
    TERMINATED,
    TIMEOUT_REACHED,
    StopPolicy,
)

COMPLETED = Counter({TrialState.COMPLETE: 3})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Interrupts:
    def __init__(self) -> None:
        self.count, self.signum = 0, None

    def caught(self, signum: int) -> None:
        self.signum = self.signum or signum
        self.count += 1


def _policy(*, timeout=None, n_trials=3, parallelism=1, read_stop_flag=lambda: False, clock=None, fold_budget=None):
    clock, interrupts, notes = clock or Clock(), Interrupts(), []
    policy = StopPolicy(
        n_trials=n_trials,
        timeout=timeout,
        parallelism=parallelism,
        interrupts=interrupts,
        read_stop_flag=read_stop_flag,
        note=notes.append,
        clock=clock,
        fold_budget=fold_budget,
    )
    policy.start()
    return policy, clock, interrupts, notes


def test_a_run_that_spends_its_budget_ends_with_budget_reached():
    policy, _, _, notes = _policy()
    policy.check(in_flight=1)
    assert not policy.stopping and notes == []
    assert policy.end(COMPLETED) == (BUDGET_REACHED, "3/3 trials finished")
    assert EXIT_CODES[BUDGET_REACHED] == 0


def test_a_run_out_of_folds_before_its_trial_budget_ends_with_fold_budget_reached():
    policy, _, _, _ = _policy(n_trials=5, fold_budget=10)
    assert policy.end(COMPLETED, folds_used=9) == (FOLD_BUDGET_REACHED, "9/10 folds; 3/5 trials finished")
    assert EXIT_CODES[FOLD_BUDGET_REACHED] == 0
    policy, _, _, _ = _policy(n_trials=3, fold_budget=10)  # both spent: the trial budget says it
    assert policy.end(COMPLETED, folds_used=9) == (BUDGET_REACHED, "9/10 folds; 3/3 trials finished")
    policy, clock, _, _ = _policy(n_trials=None, timeout=5, fold_budget=10)
    clock.now += 5
    policy.check(in_flight=1)
    assert policy.end(COMPLETED, folds_used=6) == (TIMEOUT_REACHED, "6/10 folds; 3 trials finished")


def test_timeout_stops_starting_trials_and_fails_running_ones_stop_grace_later():
    policy, clock, _, notes = _policy(timeout=60, n_trials=None)
    clock.now += 59.9
    policy.check(in_flight=2)
    assert not policy.stopping
    clock.now += 0.1
    policy.check(in_flight=2)
    assert policy.reason == TIMEOUT_REACHED
    assert notes == [f"stopping: timeout reached; 60 s: finishing running trials, up to {STOP_GRACE:g} s"]
    clock.now += STOP_GRACE - 0.1
    assert policy.abandon_reason() is None
    clock.now += 0.1
    assert policy.abandon_reason() == f"still running {STOP_GRACE:g} s after the run was told to stop (timeout reached)"
    assert policy.end(COMPLETED) == (TIMEOUT_REACHED, "3 trials finished")
    assert EXIT_CODES[TIMEOUT_REACHED] == 0


def test_timeout_counts_from_start():
    policy, clock, _, _ = _policy(timeout=10)
    clock.now += 60
    policy.start()
    policy.check(in_flight=0)
    assert not policy.stopping


def test_a_run_where_no_trial_completed_ends_with_no_complete_trial_and_the_last_error():
    policy, _, _, _ = _policy()
    policy.trial_failed("ValueError: always", for_good=True)
    counts = Counter({TrialState.PRUNED: 2, TrialState.FAIL: 1})
    assert policy.end(counts) == (NO_COMPLETE_TRIAL, "2/3 trials finished, 1 failed; last: ValueError: always")
    assert EXIT_CODES[NO_COMPLETE_TRIAL] == 4


def test_no_complete_trial_outranks_the_timeout():
    policy, clock, _, _ = _policy(timeout=1, n_trials=None)
    clock.now += 1
    policy.check(in_flight=2)
    policy.abandoned(2)
    expected = "0 trials finished; 2 running trial(s) failed as Interrupted, retries queued, 2 failed"
    assert policy.end(Counter({TrialState.FAIL: 2})) == (NO_COMPLETE_TRIAL, expected)


@pytest.mark.parametrize("parallelism, limit", [(1, 10), (8, 16)])
def test_parameter_sets_failed_for_good_in_a_row_end_the_run(parallelism, limit):
    policy, _, _, notes = _policy(parallelism=parallelism)
    for _ in range(limit - 1):
        policy.trial_failed("ValueError: always", for_good=True)
        policy.trial_failed("WorkerLost: retried", for_good=False)  # a retried attempt does not count
    policy.check(in_flight=0)
    assert not policy.stopping
    policy.trial_failed("ValueError: always", for_good=True)
    policy.check(in_flight=0)
    assert policy.reason == CONSECUTIVE_FAILURES
    assert notes == [f"stopping: too many trials failed in a row; {limit} in a row; last: ValueError: always"]
    assert policy.end(COMPLETED) == (CONSECUTIVE_FAILURES, "3/3 trials finished; last: ValueError: always")
    assert EXIT_CODES[CONSECUTIVE_FAILURES] == 3


def test_a_finished_trial_resets_the_failures_in_a_row():
    policy, _, _, _ = _policy()
    for _ in range(9):
        policy.trial_failed("ValueError: always", for_good=True)
    policy.trial_finished()
    policy.trial_failed("ValueError: always", for_good=True)
    policy.check(in_flight=0)
    assert not policy.stopping


def test_tlsearch_stop_is_read_at_most_every_stop_check_interval():
    clock, reads = Clock(), []
    policy, _, _, _ = _policy(read_stop_flag=lambda: reads.append(clock.now) or len(reads) > 1, clock=clock)
    policy.check(in_flight=1)
    policy.check(in_flight=1)
    assert reads == [100.0] and not policy.stopping
    clock.now += stop_policy.STOP_CHECK_INTERVAL
    policy.check(in_flight=1)
    assert policy.reason == STOP_REQUESTED
    assert policy.end(COMPLETED) == (STOP_REQUESTED, "3/3 trials finished")
    assert EXIT_CODES[STOP_REQUESTED] == 5


def test_ctrl_c_waits_for_running_trials_and_a_second_fails_them():
    policy, clock, interrupts, notes = _policy()
    interrupts.caught(signal.SIGINT)
    policy.check(in_flight=2)
    assert policy.reason == INTERRUPTED
    assert notes == ["stopping: interrupted (Ctrl-C); waiting for 2 running trial(s); Ctrl-C again to fail them now"]
    clock.now += 3600
    assert policy.abandon_reason() is None  # no deadline: Ctrl-C waits
    interrupts.caught(signal.SIGINT)
    assert policy.abandon_reason() == "interrupted by a second Ctrl-C"
    assert policy.end(COMPLETED) == (INTERRUPTED, "3/3 trials finished")
    assert EXIT_CODES[INTERRUPTED] == 130


def test_sigterm_fails_running_trials_stop_grace_later_even_after_the_timeout():
    policy, clock, interrupts, notes = _policy(timeout=1)
    clock.now += 1
    policy.check(in_flight=1)
    clock.now += STOP_GRACE - 1
    interrupts.caught(signal.SIGTERM)
    policy.check(in_flight=1)
    assert policy.reason == TERMINATED
    assert notes[-1] == f"stopping: terminated (SIGTERM); waiting for 1 running trial(s) up to {STOP_GRACE:g} s"
    clock.now += 1
    assert policy.abandon_reason() is None  # the grace counts from SIGTERM, not from the timeout
    clock.now += STOP_GRACE
    assert policy.abandon_reason() == (
        f"still running {STOP_GRACE:g} s after the run was told to stop (terminated (SIGTERM))"
    )
    assert policy.end(COMPLETED) == (TERMINATED, "3/3 trials finished")
    assert EXIT_CODES[TERMINATED] == 143


def test_a_signal_the_loop_never_saw_still_ends_the_run_as_interrupted():
    policy, _, interrupts, _ = _policy()
    interrupts.caught(signal.SIGINT)
    interrupts.caught(signal.SIGINT)
    assert policy.end(COMPLETED) == (INTERRUPTED, "3/3 trials finished")


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # BruteForceSampler
@pytest.mark.parametrize(
    "sampler, reason",
    [
        (lambda: optuna.samplers.GridSampler({"x": [0, 1]}), GRID_EXHAUSTED),
        (optuna.samplers.BruteForceSampler, GRID_EXHAUSTED),
        (optuna.samplers.RandomSampler, STUDY_STOPPED),
    ],
)
def test_study_stop_finishes_running_trials_and_says_who_stopped(sampler, reason):
    policy, _, _, notes = _policy()
    policy.study_stopped(sampler())
    policy.study_stopped(optuna.samplers.RandomSampler())  # the first reason stays
    assert policy.reason == reason and notes == [f"stopping: {reason}; finishing running trials"]
    assert policy.abandon_reason() is None
    assert policy.end(COMPLETED) == (reason, "3/3 trials finished")
    assert EXIT_CODES[reason] == 0


def test_once_stopping_the_timeout_and_failures_change_nothing():
    policy, clock, _, notes = _policy(timeout=1)
    policy.study_stopped(optuna.samplers.RandomSampler())
    clock.now += 10
    for _ in range(20):
        policy.trial_failed("ValueError: always", for_good=True)
    policy.check(in_flight=1)
    assert policy.reason == STUDY_STOPPED and len(notes) == 1
    assert policy.abandon_reason() is None
