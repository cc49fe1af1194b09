"""Training throughput of a Keras trial: tlsearch against the fold loop a user writes, side by side, per backend.

One fixed model per table (no search: every trial trains the same network, so only the engine differs), on
scikit-learn's digits, the folds tlsearch uses (StratifiedKFold(5, shuffle, random_state=0)), default 10 epochs,
batch 64, Adam(0.01); the MLP is 64-64 with dropout 0.1. Rows:
  - plain:    the fold loop most users write, in one warm process: per fold build, compile, `fit` on the arrays,
              `evaluate` the fold's validation rows, `clear_session`; seeded once, never per fold (the primary
              comparison: ratios are to it);
  - seeded:   the plain loop with `keras.utils.set_random_seed` every fold (on TensorFlow it clears the kernel
              cache: what a user who seeds each fold pays);
  - warm:     one compiled model for all folds of all trials, weights and optimizer reset per fold (the floor);
  - tlsearch: `tlsearch.run` on a LocalCluster of one worker process, embedded stores, as users run it, on an
              empty host cache (TLSEARCH_CACHE_DIR);
  - tl+cache: (JAX only) tlsearch again in a new worker process, on the host cache the first run left: its
              compiled programs load from disk instead of compiling.
plain, seeded and warm run in a fresh Python process each, so each pays its own imports as tlsearch's worker does.
Per-trial medians after the first (warm-up) trial; the first trial's own duration against a later one; mean
validation accuracy beside each row (the same training happened); CPU seconds per trial (the child's process
time; for tlsearch, the driver's process tree, sampled): on a machine shared with other work, wall times follow
the load, CPU times much less; the load average at the start and end of each table. Then a breakdown of a
tlsearch trial, measured in one process (a threads-only LocalCluster) by timing the engine's own functions: data
open, build, first fit (trace + fit), later fits, score, cleanup, study-store writes.

`--backend tensorflow,jax` runs each backend in its own processes (KERAS_BACKEND is read at import).

Usage: nice -n 10 python bench/keras_throughput.py [--backend tensorflow,jax] [--models mlp,cnn] [--trials 4]
       [--folds 5] [--epochs 10] [--quick]
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
    """The fixed model: a 64-64 MLP with dropout 0.1, or a small CNN on the 8x8 images; Adam(0.01), accuracy."""
    import keras

    inputs = keras.Input(input_shape)
    x = keras.layers.Rescaling(1 / 16)(inputs)  # pixels are 0..16
    if kind == "mlp":
        x = keras.layers.Dense(64, activation="relu")(x)
        x = keras.layers.Dropout(0.1)(x)
        x = keras.layers.Dense(64, activation="relu")(x)
        x = keras.layers.Dropout(0.1)(x)
    else:
        x = keras.layers.Reshape((8, 8, 1))(x)
        x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(n_classes, activation="softmax")(x))
    model.compile(keras.optimizers.Adam(LEARNING_RATE), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def build_mlp(params, input_shape, n_classes):
    return build("mlp", input_shape, n_classes)


def build_cnn(params, input_shape, n_classes):
    return build("cnn", input_shape, n_classes)


BUILDERS = {"mlp": build_mlp, "cnn": build_cnn}
BATCH_SIZE = 64
LEARNING_RATE = 0.01
EVAL_BATCH_SIZE = max(BATCH_SIZE, 256)  # what tlsearch evaluates with


def digits_folds(n_folds: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import StratifiedKFold

    x, y = load_digits(return_X_y=True)
    x, y = x.astype("float32"), y.astype("int32")
    return x, y, list(StratifiedKFold(n_folds, shuffle=True, random_state=0).split(x, y))


# --- the loops a user writes (run in a child process: `--child plain|seeded|warm`) -------------------------------


def plain_trial(kind: str, x, y, folds, epochs: int, seed: int | None) -> float:
    """One trial of the loop most users write; `seed` given: `keras.utils.set_random_seed(seed + k)` per fold."""
    import keras

    scores = []
    for k, (train, valid) in enumerate(folds):
        if seed is not None:
            keras.utils.set_random_seed(seed + k)
        model = build(kind, x.shape[1:], 10)
        model.fit(x[train], y[train], epochs=epochs, batch_size=BATCH_SIZE, verbose=0)
        reported = model.evaluate(x[valid], y[valid], batch_size=EVAL_BATCH_SIZE, verbose=0, return_dict=True)
        scores.append(reported["accuracy"])
        keras.backend.clear_session()
    return float(np.mean(scores))


class WarmLoop:
    """One compiled model for all folds of all trials; each fold starts from the same initial state."""

    def __init__(self, kind: str, input_shape) -> None:
        import keras

        keras.utils.set_random_seed(0)
        self.model = build(kind, input_shape, 10)
        self.initial = [np.array(v.numpy()) for v in self.model.variables]

    def trial(self, x, y, folds, epochs: int) -> float:
        model, scores = self.model, []
        for train, valid in folds:
            for variable, value in zip(model.variables, self.initial):
                variable.assign(value)
            for variable in model.optimizer.variables:  # Adam's moments and step count start at zero
                variable.assign(np.zeros(variable.shape, variable.dtype))
            model.optimizer.learning_rate.assign(LEARNING_RATE)
            model.fit(x[train], y[train], epochs=epochs, batch_size=BATCH_SIZE, verbose=0)
            reported = model.evaluate(x[valid], y[valid], batch_size=EVAL_BATCH_SIZE, verbose=0, return_dict=True)
            scores.append(reported["accuracy"])
        return float(np.mean(scores))


def child(mode: str, kind: str, n_trials: int, n_folds: int, epochs: int) -> None:
    started = time.perf_counter()
    import keras  # (counted in the first trial's latency, as a worker pays it)

    x, y, folds = digits_folds(n_folds)
    keras.utils.set_random_seed(0)  # once per process: the plain loop seeds (if at all) at the top of its script
    warm = WarmLoop(kind, x.shape[1:]) if mode == "warm" else None
    durations, cpu, scores, first_end = [], [], [], 0.0
    for number in range(n_trials):
        begun, begun_cpu = time.perf_counter(), time.process_time()
        if warm:
            scores.append(warm.trial(x, y, folds, epochs))
        else:
            scores.append(plain_trial(kind, x, y, folds, epochs, 1000 * number if mode == "seeded" else None))
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


def breakdown(kind: str, args, home: Path) -> dict[str, tuple[float, float]]:
    """Seconds in each part of a tlsearch trial, the first trial's and the median of the later ones, in one process
    (threads-only cluster).

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
    return {
        label: (rows[0].get(label, 0.0), statistics.median(row.get(label, 0.0) for row in later)) for label in later[0]
    }


# --- the tables ---------------------------------------------------------------------------------------------------


def summary(figures: dict) -> tuple[float, float, float]:
    durations = figures["durations"]
    later = durations[1:] or durations
    return statistics.median(later), durations[0], figures["import_and_first"]


def load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def print_table(kind: str, rows: dict[str, dict], args, load_start: str) -> None:
    import keras

    print(
        f"\n{keras.backend.backend()} / {kind}: digits, {args.folds} folds x {args.epochs} epochs, batch {BATCH_SIZE}, "
        f"Adam({LEARNING_RATE}), {args.trials} trials each (medians of trials 2..{args.trials}); "
        f"load average (1/5/15 min) {load_start} at start, {load()} at end"
    )
    print(
        f"{'':9} {'s/trial':>8} {'x plain':>8} {'CPU s':>7} {'CPU x plain':>12} {'1st trial':>10} "
        f"{'1st/later':>10} {'start->1st end':>15} {'val acc':>8} {'(min..max)':>14}"
    )
    medians, cpu = {}, {}
    for name, figures in rows.items():
        medians[name], cpu[name] = summary(figures)[0], statistics.median(figures["cpu"][1:] or figures["cpu"])
    base = "plain" if "plain" in medians else next(iter(medians))
    for name, figures in rows.items():
        median, first, latency = summary(figures)
        scores = figures["scores"]
        print(
            f"{name:9} {median:8.2f} {median / medians[base]:7.2f}x {cpu[name]:7.2f} {cpu[name] / cpu[base]:11.2f}x "
            f"{first:10.2f} {first / median:9.2f}x {latency:15.2f} {np.mean(scores):8.4f} "
            f"{min(scores):6.4f}..{max(scores):6.4f}"
        )
    if "tlsearch" in medians and base == "plain":
        ours, first = medians["tlsearch"], rows["tlsearch"]["durations"][0]
        held = ours / medians["plain"] <= 0.5 and first / ours <= 2
        cached = ""
        if "tl+cache" in rows:
            cached = f"; {rows['tl+cache']['durations'][0] / medians['tl+cache']:.2f}x with the compile cache warm"
        print(
            f"targets: tlsearch/plain <= 0.5x (is {ours / medians['plain']:.2f}x time, "
            f"{cpu['tlsearch'] / cpu['plain']:.2f}x CPU), first/later <= 2x (is {first / ours:.2f}x{cached}): "
            f"{'met' if held else 'NOT met'}"
        )


def run_backend(args) -> None:
    """The tables of this process's backend (KERAS_BACKEND, set by the caller)."""
    logging.getLogger("distributed").setLevel(logging.ERROR)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    modes = args.modes.split(",")
    for kind in args.models.split(","):
        rows: dict[str, dict] = {}
        load_start = load()
        for mode in ("plain", "seeded", "warm"):
            if mode in modes:
                rows[mode] = run_child(mode, kind, args)
        if "tlsearch" in modes:
            with tempfile.TemporaryDirectory() as cache:
                os.environ["TLSEARCH_CACHE_DIR"] = cache  # a cold host cache, the workers' as well as ours
                with tempfile.TemporaryDirectory() as home:
                    rows["tlsearch"] = run_tlsearch(kind, args, Path(home))
                if os.environ.get("KERAS_BACKEND") == "jax":  # again, on the compilations the first run kept
                    with tempfile.TemporaryDirectory() as home:
                        rows["tl+cache"] = run_tlsearch(kind, args, Path(home))
        if rows:
            print_table(kind, rows, args, load_start)
        if "breakdown" in modes:
            load_start = load()
            with tempfile.TemporaryDirectory() as home:
                parts = breakdown(kind, args, Path(home))
            print(
                f"{os.environ.get('KERAS_BACKEND', 'tensorflow')} / {kind}: where a tlsearch trial's time goes "
                f"(one process, s; load {load_start} -> {load()})"
            )
            print(f"  {'':32} {'trial 1':>8} {f'2..{args.trials}':>8}")
            for label, (first, later) in sorted(parts.items(), key=lambda item: -item[1][1]):
                print(f"  {label:32} {first:8.3f} {later:8.3f}")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=os.environ.get("KERAS_BACKEND", "tensorflow"))
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--modes", default="plain,seeded,warm,tlsearch,breakdown")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="3 trials, no seeded row, no breakdown (13 min at load 4-8 on 2 cores)",
    )
    parser.add_argument("--child", choices=("plain", "seeded", "warm"), help=argparse.SUPPRESS)
    parser.add_argument("--in-backend", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.modes = 3, "plain,warm,tlsearch"
    if args.child:
        child(args.child, args.models, args.trials, args.folds, args.epochs)
        return 0
    if args.in_backend:
        run_backend(args)
        return 0
    print(f"keras_throughput: started {time.strftime('%H:%M:%S')}, load average {load()}", flush=True)
    for backend in args.backend.split(","):
        command = [sys.executable, __file__, "--in-backend", *(argv if argv is not None else sys.argv[1:])]
        result = subprocess.run(command, env={**os.environ, "KERAS_BACKEND": backend}, cwd=ROOT, check=False)
        if result.returncode != 0:
            print(f"{backend}: failed (exit {result.returncode})", flush=True)
    print(f"keras_throughput: ended {time.strftime('%H:%M:%S')}, load average {load()}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
