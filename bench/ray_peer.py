"""Ray Tune as a peer in bench/search_quality.py: the search its users write, on the same studies and budget.

`Tuner` + `OptunaSearch` (TPE with the search's seed, on the study's own space function) + `ASHAScheduler`
with folds as its time attribute (`max_t` = k, Ray's defaults otherwise: grace period 1, reduction factor 4),
or FIFO (no early stopping). One trial runs at a time, as every other strategy there does. The trainable runs
the study's k folds through tlsearch.cv.evaluate, as a worker would, and reports the running CV mean after each
fold, so Ray decides between folds where tlsearch's pruners do. The search stops once `budget` folds (or
fold-epochs) have been reported. The pick is the best trial that reported all k folds, by its CV mean: the
rule every other strategy is scored by. (`ResultGrid.get_best_result()` would also pick among trials ASHA
stopped after one fold, by a one-fold mean.)

Ray is not one of tlsearch's dependencies. It goes beside the test environment without its own dependencies,
which that environment has, all but these:

    .venv/bin/pip install --no-deps --target ~/.cache/tlsearch/ray-2.60.0 ray==2.60.0 tensorboardX==2.6.5 \
        jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0
    PYTHONPATH=~/.cache/tlsearch/ray-2.60.0 .venv/bin/python bench/search_quality.py --studies synthetic \
        --strategies "Ray ASHA" "Ray FIFO" --jobs 1
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
# Ray's console output and result loggers: the benchmark prints its own lines, and reads results from the JSON
# logger alone (TensorBoard's logger threads outlive a pool process's exit).
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster of one search's own

import optuna  # noqa: E402
from ray import tune  # noqa: E402

SCHEDULERS = ("asha", "fifo")


class _ReportEachFold(optuna.pruners.BasePruner):
    """Reports to Ray the running CV mean after each fold but the last (tlsearch.cv.evaluate asks its pruner
    there); never prunes: stopping is Ray's scheduler's."""

    def __init__(self, epochs: int | None) -> None:
        self.epochs = epochs

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        tune.report(_metrics(trial.intermediate_values[step], step + 1, trial.user_attrs, self.epochs))
        return False


def _metrics(score: float, folds: int, attrs: dict, epochs: int | None) -> dict:
    """What a trial reports after `folds` folds: the running CV mean, the folds, and the compute spent so far
    in the budget's unit (fold-epochs for studies trained in epochs, as search_quality counts them)."""
    spent = sum(attrs.get(f"split{k}_n_epochs", 1) for k in range(folds)) if epochs else folds
    return {"score": score, "folds": folds, "spent": spent}


def trainable(config: dict, study_name: str, keras_epochs: int | None, seed: int) -> None:
    """One Ray trial: the study's k folds on `config` (the study's params) with fold seeds of its own."""
    import search_quality as sq  # on the Ray worker: bench/ is on PYTHONPATH (ray_search)

    sq._quiet()
    study = sq.make_study(study_name, keras_epochs)
    folds = list(
        study.make_spec(seed, optuna.pruners.NopPruner(), None).cv_.split(study.arrays["X"], study.arrays["y"])
    )
    # Every trial draws run-to-run noise of its own, as the other strategies' trials do; named by its params,
    # not by Ray's trial id (random), so that a search can be run again.
    trial_seed = sq.derive_seed(seed, "ray", *sorted(config.items()))
    spec = study.make_spec(trial_seed, _ReportEachFold(study.epochs), None)
    side = sq.in_memory_study(spec)
    side.enqueue_trial(config)
    trial = side.ask()
    value = sq.cv.evaluate(trial, spec, study.arrays, folds)
    tune.report(_metrics(value, study.n_folds, side.trials[0].user_attrs, study.epochs))


@dataclass(frozen=True)
class _Space:
    """The study's space function as OptunaSearch's define-by-run space (picklable: Ray saves its searcher)."""

    study_name: str
    keras_epochs: int | None

    def __call__(self, trial: optuna.Trial) -> None:
        import search_quality as sq

        sq.make_study(self.study_name, self.keras_epochs).make_spec(0, None, None).space(trial)
        # returns nothing: Ray's config is then the trial's params alone


class _Budget(tune.Stopper):
    """Stops the whole search once `budget` is spent, summed over trials; keeps the trials' order of start."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.spent: dict[str, int] = {}  # trial id -> spent, in the order the trials first reported

    def __call__(self, trial_id: str, result: dict) -> bool:
        self.spent[trial_id] = result["spent"]
        return False

    def stop_all(self) -> bool:
        return sum(self.spent.values()) >= self.budget


def ray_search(study, name: str, seed: int, budget: int, scheduler: str, keras_epochs: int | None):
    """One Ray Tune search of `study` (a search_quality.Study, `name` as search_quality.make_study names it:
    the Ray workers build it again) for `budget`; a search_quality.Search."""
    import ray
    import search_quality as sq
    from ray.tune.logger import JsonLoggerCallback
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search.optuna import OptunaSearch

    os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH), *sys.path])  # Ray's workers import search_quality
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    spec = study.make_spec(seed, optuna.pruners.NopPruner(), None)
    maximize = sq.in_memory_study(spec).direction == optuna.study.StudyDirection.MAXIMIZE
    mode = "max" if maximize else "min"

    stopper = _Budget(budget)
    chosen = (
        ASHAScheduler(time_attr="folds", max_t=study.n_folds, grace_period=1)
        if scheduler == "asha"
        else FIFOScheduler()
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        tuner = tune.Tuner(
            tune.with_parameters(trainable, study_name=name, keras_epochs=keras_epochs, seed=seed),
            tune_config=tune.TuneConfig(
                metric="score",
                mode=mode,
                search_alg=OptunaSearch(_Space(name, keras_epochs), metric="score", mode=mode, seed=seed),
                scheduler=chosen,
                num_samples=budget,  # more than the budget allows: the stopper ends the search
                max_concurrent_trials=1,
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(storage_path=folder, stop=stopper, verbose=0, callbacks=[JsonLoggerCallback()]),
        )
        try:
            grid = tuner.fit()
        finally:  # a Ray left running in a pool's process breaks its exit
            ray.shutdown()
        results = {result.metrics["trial_id"]: result for result in grid if result.metrics}
    done = sq.Search(cpu_seconds=time.monotonic() - started)  # wall seconds: Ray's trials run in its workers
    best = None
    for trial_id in stopper.spent:  # in the order the trials started
        metrics, config = results[trial_id].metrics, results[trial_id].config
        done.trials += 1
        done.folds += metrics["folds"]
        done.fold_epochs += metrics["spent"]
        if metrics["folds"] < study.n_folds:
            done.pruned += 1
            continue
        done.complete.append(dict(config))
        if best is None or (metrics["score"] > best[0] if maximize else metrics["score"] < best[0]):
            best = (metrics["score"], dict(config))
            done.picks.append((study.spent(done), best[1]))
    return done
