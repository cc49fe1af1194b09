"""Training throughput of a Keras trial: tlsearch against the fold loop a user writes by hand, side by side.

One fixed model per table (no search: every trial trains the same network, so only the engine differs), on
scikit-learn's digits, k-fold (default 5 folds x 10 epochs):
  - hand:     the hand-written fold loop: per fold set the seed, build, compile, fit, evaluate, clear_session;
  - warm raw: one compiled model reused across folds, its weights and optimizer reset per fold (the floor);
  - tlsearch: `tlsearch.run` on a LocalCluster of one worker process, embedded stores.
hand and warm raw run in a fresh Python process each, so each pays its own imports as tlsearch's worker does.
Per-trial medians after the first (warm-up) trial; first-trial latency (for tlsearch: from `run` called to
the first trial's end, and the first trial's own duration); ratios. CPU seconds per trial too (the child's
process time; for tlsearch, the driver's process tree, sampled): on a machine shared with other work, wall
times follow the load, CPU times much less. Then a breakdown of a tlsearch trial,
measured in one process (a threads-only LocalCluster) by timing the engine's own functions: data open,
build, first fit (compile/trace + fit), later fits, score, cleanup, study-store writes.

Usage: nice -n 10 python bench/keras_throughput.py [--models mlp,cnn] [--trials 4] [--folds 5] [--epochs 10]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def build(kind: str, input_shape: tuple[int, ...], n_classes: int):
    """The fixed model: a 64-64 MLP, or a small CNN on the 8x8 images; Adam 1e-3, accuracy."""
    import keras

    inputs = keras.Input(input_shape)
    x = keras.layers.Rescaling(1 / 16)(inputs)  # pixels are 0..16
    if kind == "mlp":
        x = keras.layers.Dense(64, activation="relu")(x)
        x = keras.layers.Dense(64, activation="relu")(x)
    else:
        x = keras.layers.Reshape((8, 8, 1))(x)
        x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(n_classes, activation="softmax")(x))
    model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def build_mlp(params, input_shape, n_classes):
    return build("mlp", input_shape, n_classes)


def build_cnn(params, input_shape, n_classes):
    return build("cnn", input_shape, n_classes)


BUILDERS = {"mlp": build_mlp, "cnn": build_cnn}
BATCH_SIZE = 32


def digits_folds(n_folds: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import StratifiedKFold

    x, y = load_digits(return_X_y=True)
    x, y = x.astype("float32"), y.astype("int32")
    return x, y, list(StratifiedKFold(n_folds, shuffle=True, random_state=0).split(x, y))


# --- the loops a user writes by hand (run in a child process: `--child hand|warm`) ---------------------------


def hand_trial(kind: str, x, y, folds, epochs: int, seed: int) -> float:
    import keras

    scores = []
    for k, (train, valid) in enumerate(folds):
        keras.utils.set_random_seed(seed + k)
        model = build(kind, x.shape[1:], 10)
        model.fit(x[train], y[train], epochs=epochs, batch_size=BATCH_SIZE, verbose=0)
        scores.append(model.evaluate(x[valid], y[valid], verbose=0, return_dict=True)["accuracy"])
        keras.backend.clear_session()
    return float(np.mean(scores))


class WarmLoop:
    """One compiled model for all folds of all trials; each fold starts from the same initial state."""

    def __init__(self, kind: str, input_shape) -> None:
        import keras

        keras.utils.set_random_seed(0)
        self.model = build(kind, input_shape, 10)
        self.initial = [v.numpy() for v in self.model.variables]

    def trial(self, x, y, folds, epochs: int) -> float:
        model, scores = self.model, []
        for train, valid in folds:
            for variable, value in zip(model.variables, self.initial):
                variable.assign(value)
            for variable in model.optimizer.variables:  # Adam's moments and step count start at zero
                variable.assign(np.zeros(variable.shape, variable.dtype))
            model.optimizer.learning_rate.assign(1e-3)
            model.fit(x[train], y[train], epochs=epochs, batch_size=BATCH_SIZE, verbose=0)
            scores.append(model.evaluate(x[valid], y[valid], verbose=0, return_dict=True)["accuracy"])
        return float(np.mean(scores))


def child(mode: str, kind: str, n_trials: int, n_folds: int, epochs: int) -> None:
    started = time.perf_counter()
    import keras  # noqa: F401  (counted in the first trial's latency, as a worker pays it)

    x, y, folds = digits_folds(n_folds)
    warm = WarmLoop(kind, x.shape[1:]) if mode == "warm" else None
    durations, cpu, scores, first_end = [], [], [], 0.0
    for number in range(n_trials):
        begun, begun_cpu = time.perf_counter(), time.process_time()
        scores.append(warm.trial(x, y, folds, epochs) if warm else hand_trial(kind, x, y, folds, epochs, number))
        durations.append(time.perf_counter() - begun)
        cpu.append(time.process_time() - begun_cpu)
        first_end = first_end or time.perf_counter()
    print(json.dumps({"durations": durations, "cpu": cpu, "scores": scores, "import_and_first": first_end - started}))


def run_child(mode: str, kind: str, args) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--models",
        kind,
        "--trials",
        str(args.trials),
        "--folds",
        str(args.folds),
        "--epochs",
        str(args.epochs),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if result.returncode != 0:
        raise RuntimeError(f"{mode} {kind} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- tlsearch -------------------------------------------------------------------------------------------------


def study_spec(kind: str, n_trials: int, n_folds: int, epochs: int):
    import optuna

    import tlsearch

    return tlsearch.StudySpec(
        name=f"throughput-{kind}",
        dataset="sklearn:digits",
        space={},
        model=tlsearch.KerasModel(BUILDERS[kind], epochs=epochs, batch_size=BATCH_SIZE),
        cv=n_folds,
        metric="accuracy",
        n_trials=n_trials,
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=optuna.pruners.NopPruner(),
    )


def run_tlsearch(kind: str, args, home: Path) -> dict:
    """`tlsearch.run` with one worker process; trial durations from the study store."""
    import tlsearch
    from tlsearch.stores._stores import Stores

    started = time.time()
    with CpuSampler() as sampler:
        study = tlsearch.run(
            study_spec(kind, args.trials, args.folds, args.epochs),
            stores=Stores(home=home),
            n_workers=1,
            progress="off",
        )
    trials = sorted(study.trials, key=lambda trial: trial.number)
    bad = [trial for trial in trials if trial.state.name != "COMPLETE"]
    if bad:
        raise RuntimeError(f"tlsearch trial failed: {bad[0].user_attrs.get('error_message')}")
    durations = [trial.duration.total_seconds() for trial in trials]
    ends = [trial.datetime_complete.timestamp() for trial in trials]
    cpu = [sampler.at(end) - sampler.at(begin) for begin, end in zip([started, *ends], ends)]
    return {
        "durations": durations,
        "cpu": cpu,
        "scores": [trial.value for trial in trials],
        "import_and_first": ends[0] - started,
    }


class CpuSampler:
    """Samples the CPU seconds of this process and its children (the local cluster) every 0.1 s."""

    def __enter__(self) -> CpuSampler:
        import threading

        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            total = 0.0
            for process in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = process.cpu_times()
                    total += times.user + times.system
            self.samples.append((time.time(), total))
            self._stop.wait(0.1)

    def at(self, moment: float) -> float:
        """CPU seconds used by `moment` (the last sample before it)."""
        before = [cpu for when, cpu in self.samples if when <= moment]
        return before[-1] if before else 0.0


# --- where a tlsearch trial's time goes --------------------------------------------------------------------------


class Stopwatch:
    """Sums the time spent in wrapped functions, per label, into `totals` (replaced for each trial)."""

    def __init__(self) -> None:
        self.totals: collections.Counter = collections.Counter()
        self.fits: list[float] = []

    def wrap(self, owner, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            begun = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.totals[label] += time.perf_counter() - begun

        setattr(owner, name, timed)


def breakdown(kind: str, args, home: Path) -> dict[str, float]:
    """Median seconds per trial in each part of a tlsearch trial, in one process (threads-only cluster).

    A trial's parts are summed from the engine's own functions, timed in place; a trial begins where its
    task opens the trial; "trial" is its duration in the study store (driver's ask to tell)."""
    import distributed
    import keras

    import tlsearch
    from tlsearch.cv import _evaluate as cv
    from tlsearch.execution import _trial_task as trial_task
    from tlsearch.models import _keras
    from tlsearch.stores._stores import Stores

    watch, per_trial = Stopwatch(), []
    open_trial = trial_task.open_trial

    def new_trial(*a, **kw):
        watch.totals, watch.fits = collections.Counter(), []
        per_trial.append((watch.totals, watch.fits))
        begun = time.perf_counter()
        try:
            return open_trial(*a, **kw)
        finally:
            watch.totals["study load"] += time.perf_counter() - begun

    watch.wrap(trial_task, "_open_dataset", "data open")
    watch.wrap(trial_task, "_fold_plan", "data open")
    watch.wrap(_keras.KerasTrainer, "_build", "build + compile")
    watch.wrap(_keras.KerasTrainer, "_score", "score")
    watch.wrap(_keras.KerasTrainer, "close", "cleanup")
    watch.wrap(cv._ResultRecorder, "write", "study-store writes")
    fit = keras.Model.fit

    def timed_fit(self, *a, **kw):
        begun = time.perf_counter()
        try:
            return fit(self, *a, **kw)
        finally:
            watch.fits.append(time.perf_counter() - begun)

    keras.Model.fit, trial_task.open_trial = timed_fit, new_trial
    try:
        with (
            distributed.LocalCluster(
                n_workers=1,
                threads_per_worker=1,
                processes=False,
                protocol="tcp",
                host="127.0.0.1",
                dashboard_address=None,
            ) as local,
            distributed.Client(local) as client,
        ):
            study = tlsearch.run(
                study_spec(kind, args.trials, args.folds, args.epochs),
                stores=Stores(home=home),
                client=client,
                progress="off",
            )
    finally:
        keras.Model.fit, trial_task.open_trial = fit, open_trial
    durations = [trial.duration.total_seconds() for trial in sorted(study.trials, key=lambda t: t.number)]
    rows = []
    for (totals, fits), duration in zip(per_trial, durations):
        row = dict(totals)
        row["fit, first fold (incl. trace)"] = fits[0] if fits else 0.0
        row["fit, later folds"] = sum(fits[1:])
        row["other (dispatch, sampling, ...)"] = duration - sum(row.values())
        row["trial (store: ask to tell)"] = duration
        rows.append(row)
    later = rows[1:] or rows
    return {label: statistics.median(row.get(label, 0.0) for row in later) for label in later[0]}


# --- the tables ---------------------------------------------------------------------------------------------------


def summary(figures: dict) -> tuple[float, float, float]:
    durations = figures["durations"]
    later = durations[1:] or durations
    return statistics.median(later), durations[0], figures["import_and_first"]


def print_table(kind: str, rows: dict[str, dict], args) -> None:
    print(
        f"\n{kind}: digits, {args.folds} folds x {args.epochs} epochs, batch {BATCH_SIZE}, "
        f"{args.trials} trials each (median of trials 2..{args.trials})"
    )
    print(f"{'':10} {'s/trial':>8} {'CPU s/trial':>12} {'first trial':>12} {'start->1st end':>15} {'mean score':>11}")
    medians, cpu = {}, {}
    for name, figures in rows.items():
        median, first, latency = summary(figures)
        medians[name], cpu[name] = median, statistics.median(figures["cpu"][1:] or figures["cpu"])
        print(
            f"{name:10} {median:8.2f} {cpu[name]:12.2f} {first:12.2f} {latency:15.2f} "
            f"{np.mean(figures['scores']):11.4f}"
        )
    if "tlsearch" in medians:
        ours = medians["tlsearch"]
        first = rows["tlsearch"]["durations"][0]
        for name in ("hand", "warm raw"):
            if name in medians:
                print(
                    f"tlsearch / {name}: {ours / medians[name]:.2f}x the time a trial, "
                    f"{cpu['tlsearch'] / cpu[name]:.2f}x the CPU (the CPU ratio holds on a busy machine)"
                )
        print(f"tlsearch first trial / later trial: {first / ours:.2f}x")
        print("targets: tlsearch/hand <= 0.67, tlsearch/warm raw <= 1.2, first/later <= 2")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--modes", default="hand,warm,tlsearch,breakdown")
    parser.add_argument("--child", choices=("hand", "warm"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.models, args.trials, args.folds, args.epochs)
        return 0
    logging.getLogger("distributed").setLevel(logging.ERROR)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    modes = args.modes.split(",")
    for kind in args.models.split(","):
        rows: dict[str, dict] = {}
        if "hand" in modes:
            rows["hand"] = run_child("hand", kind, args)
        if "warm" in modes:
            rows["warm raw"] = run_child("warm", kind, args)
        if "tlsearch" in modes:
            with tempfile.TemporaryDirectory() as home:
                rows["tlsearch"] = run_tlsearch(kind, args, Path(home))
        if rows:
            print_table(kind, rows, args)
        if "breakdown" in modes:
            with tempfile.TemporaryDirectory() as home:
                parts = breakdown(kind, args, Path(home))
            print(f"{kind}: where a tlsearch trial's time goes (one process, median of trials 2..{args.trials}, s)")
            for label, seconds in sorted(parts.items(), key=lambda item: -item[1]):
                print(f"  {label:32} {seconds:7.3f}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
