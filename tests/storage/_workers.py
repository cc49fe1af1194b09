"""Worker processes for the MongoStorage tests: `python _workers.py MODE URI DATABASE STUDY [ARGS...]`.

Each mode opens its own MongoStorage (a fresh process, a fresh cache) and works on one study.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import optuna

from tlsearch.storage import MongoStorage

REPORTS = 5


def objective(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", -10, 10)
    n = trial.suggest_int("n", 0, 5)
    for step in range(REPORTS):
        trial.report(x * x + step, step)
    return x * x + n


def tpe(storage: MongoStorage, study_name: str, n_trials: str, seed: str) -> None:
    """Optimize with TPE for n_trials trials."""
    sampler = optuna.samplers.TPESampler(seed=int(seed), n_startup_trials=5)
    study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)
    study.optimize(objective, n_trials=int(n_trials))


def drain(storage: MongoStorage, study_name: str, log_path: str) -> None:
    """Run enqueued trials until none is left, logging each one run (its `i` param) to log_path."""
    study = optuna.load_study(study_name=study_name, storage=storage)
    with open(log_path, "a") as log:

        def run_enqueued(trial: optuna.Trial) -> float:
            if "fixed_params" not in storage.get_trial_system_attrs(trial._trial_id):
                study.stop()  # the queue is empty: this trial was made up, not dequeued
                raise optuna.TrialPruned("queue drained")
            i = trial.suggest_int("i", 0, 10**6)
            log.write(f"{i}\n")
            log.flush()
            return float(i)

        study.optimize(run_enqueued, n_trials=10**6)


def hang(storage: MongoStorage, study_name: str, started_path: str) -> None:
    """Start one trial (with heartbeats if the storage has them), say so in started_path, then never finish."""
    study = optuna.load_study(study_name=study_name, storage=storage)

    def forever(trial: optuna.Trial) -> float:
        trial.suggest_float("x", 0, 1)
        trial.report(0.5, 0)
        Path(started_path).write_text(str(trial.number))
        while True:
            time.sleep(1)

    study.optimize(forever, n_trials=1)


def create(storage: MongoStorage, study_name: str, n_trials: str) -> None:
    """Create n_trials trials as fast as possible (no sampling): a test of number allocation."""
    study_id = storage.get_study_id_from_name(study_name)
    for _ in range(int(n_trials)):
        storage.create_new_trial(study_id)


MODES = {"tpe": tpe, "drain": drain, "hang": hang, "create": create}

if __name__ == "__main__":
    mode, uri, database, *args = sys.argv[1:]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    heartbeat = os.environ.get("TEST_HEARTBEAT_INTERVAL")
    storage = MongoStorage(uri, database, heartbeat_interval=float(heartbeat) if heartbeat else None)
    MODES[mode](storage, *args)
