"""Trials per hour with 1, 2 and 4 trials packed on one GPU: `tlsearch worker --trials-per-gpu N`, side by side.

A small CNN study on generated images (10 classes of noisy 32x32x3 patterns; only the learning rate varies, so
every trial costs the same), Keras on the JAX backend when jax is importable, else TensorFlow. For each packing N
the script starts a Dask scheduler, `tlsearch worker --gpus GPU --trials-per-gpu N` (N worker processes, each
advertising GPU = 1/N and allocating GPU memory on demand), and runs the study for a fixed time budget through
`tlsearch.run(scheduler=...)`. It prints completed trials, trials per hour in steady state (from the time every
slot has finished its first trial, so the workers' start-up and first compilation are left out) and overall
(from the start of the run), the median trial duration and, when
`nvidia-smi` is present, GPU utilisation and memory used, sampled once a second while the study runs.

One prepared run, under 8 minutes on a GPU machine (3 packings x 100 s + start-up):
    python bench/gpu_packing.py [--gpu 0] [--packings 1,2,4] [--seconds 100]
CPU smoke test (no GPU needed; CUDA_VISIBLE_DEVICES=0 is harmless on a CPU-only backend):
    nice -n 10 python bench/gpu_packing.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if "KERAS_BACKEND" not in os.environ:  # read by the workers too: they inherit this environment
    import importlib.util

    os.environ["KERAS_BACKEND"] = "jax" if importlib.util.find_spec("jax") else "tensorflow"


def make_images(path: Path, n_rows: int, side: int, seed: int = 0) -> None:
    """An .npz of `n_rows` images (side x side x 3, float32) in 10 classes: a random pattern per class plus noise."""
    rng = np.random.default_rng(seed)
    patterns = rng.normal(size=(10, side, side, 3)).astype("float32")
    y = rng.integers(0, 10, n_rows)
    x = patterns[y] + rng.normal(scale=2.0, size=(n_rows, side, side, 3)).astype("float32")
    np.savez(path, X=x.astype("float32"), y=y.astype("int64"))


def build(params, input_shape, n_classes):
    import keras

    inputs = keras.Input(input_shape)
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(n_classes, activation="softmax")(x))
    model.compile(
        keras.optimizers.Adam(params["learning_rate"]), "sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    return model


def study_spec(data: Path, packing: int, epochs: int):
    import optuna

    import tlsearch

    return tlsearch.StudySpec(
        name=f"packing-{packing}",
        dataset=str(data),
        space=lambda trial: {"learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True)},
        model=tlsearch.KerasModel(build, epochs=epochs, batch_size=128),
        cv=3,
        metric="accuracy",
        n_trials=100_000,  # the time budget ends the run
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=optuna.pruners.NopPruner(),
    )


class GpuSampler:
    """Samples `nvidia-smi` utilisation (%) and memory used (MiB) of one GPU once a second; nothing without it."""

    def __init__(self, gpu: str) -> None:
        self.gpu = gpu
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> GpuSampler:
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        query = ["nvidia-smi", "-i", self.gpu, "--query-gpu=utilization.gpu,memory.used"]
        while not self._stop.wait(1.0):
            result = subprocess.run([*query, "--format=csv,noheader,nounits"], capture_output=True, text=True)
            with contextlib.suppress(ValueError):
                utilisation, memory = (float(field) for field in result.stdout.strip().split(","))
                self.samples.append((utilisation, memory))

    def summary(self) -> tuple[float | None, float | None]:
        """(mean utilisation %, peak memory MiB), or Nones when nothing was sampled."""
        if not self.samples:
            return None, None
        return statistics.mean(s[0] for s in self.samples), max(s[1] for s in self.samples)


@contextlib.contextmanager
def packed_workers(scheduler: str, gpu: str, packing: int):
    """`tlsearch worker --gpus GPU --trials-per-gpu N` against `scheduler`, stopped with Ctrl-C at the end."""
    command = [sys.executable, "-m", "tlsearch", "worker", "--scheduler", scheduler, "--gpus", gpu]
    worker = subprocess.Popen(
        [*command, "--trials-per-gpu", str(packing)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd=ROOT,
    )
    try:
        yield worker
    finally:
        os.killpg(worker.pid, signal.SIGINT)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


def run_packing(data: Path, home: Path, packing: int, args) -> dict:
    """One packing: its workers, the study for `args.seconds`, then the figures."""
    import distributed

    import tlsearch
    from tlsearch.stores._stores import Stores

    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None) as scheduler:
        with packed_workers(scheduler.scheduler_address, args.gpu, packing), distributed.Client(scheduler) as client:
            client.wait_for_workers(packing, timeout=120)
            with GpuSampler(args.gpu) as gpu:
                started = time.time()
                study = tlsearch.run(
                    study_spec(data, packing, args.epochs),
                    stores=Stores(home=home),
                    scheduler=scheduler.scheduler_address,
                    timeout=args.seconds,
                    progress="off",
                )
    done = sorted(
        (t for t in study.trials if t.state.name == "COMPLETE"), key=lambda t: t.datetime_complete.timestamp()
    )
    if not done:
        failed = [t.user_attrs.get("error_message") for t in study.trials if t.state.name == "FAIL"]
        raise RuntimeError(f"packing {packing}: no trial completed in {args.seconds} s; errors: {failed[:1]}")
    ends = [t.datetime_complete.timestamp() for t in done]
    steady = ends[-1] - ends[packing - 1] if len(ends) > packing else 0.0
    utilisation, memory = gpu.summary()
    return {
        "trials": len(done),
        "per_hour": (len(done) - packing) / steady * 3600 if steady > 0 else None,
        "overall_per_hour": len(done) / (ends[-1] - started) * 3600,
        "median_s": statistics.median(t.duration.total_seconds() for t in done),
        "gpus": sorted({t.user_attrs.get("gpu", "-") for t in done}),
        "utilisation": utilisation,
        "memory": memory,
    }


def print_table(rows: dict[int, dict], args) -> None:
    base = rows[min(rows)]["per_hour"]
    print(f"\nKeras backend {os.environ['KERAS_BACKEND']}, GPU {args.gpu}, {args.seconds} s per packing")
    print(
        "| trials per GPU | trials done | trials/hour, steady | vs 1 | trials/hour, overall | median trial (s) "
        "| GPU util (%) | GPU mem (MiB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for packing, row in rows.items():
        per_hour = "-" if row["per_hour"] is None else f"{row['per_hour']:.0f}"
        ratio = "-" if not (base and row["per_hour"]) else f"{row['per_hour'] / base:.2f}"
        util = "-" if row["utilisation"] is None else f"{row['utilisation']:.0f}"
        memory = "-" if row["memory"] is None else f"{row['memory']:.0f}"
        print(
            f"| {packing} | {row['trials']} | {per_hour} | {ratio} | {row['overall_per_hour']:.0f} "
            f"| {row['median_s']:.1f} | {util} | {memory} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="0", help="the GPU id to pack trials on (default: 0)")
    parser.add_argument("--packings", default="1,2,4", help="trials per GPU to compare (default: 1,2,4)")
    parser.add_argument("--seconds", type=float, default=100, help="time budget per packing (default: 100)")
    parser.add_argument("--rows", type=int, default=12_000, help="generated images (default: 12000)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="CPU smoke test: packings 1,2, 40 s, 600 16x16 images")
    args = parser.parse_args(argv)
    side = 32
    if args.quick:
        args.packings, args.seconds, args.rows, args.epochs, side = "1,2", 40, 600, 1, 16
    packings = [int(p) for p in args.packings.split(",")]
    with tempfile.TemporaryDirectory(prefix="tlsearch-gpu-packing-") as folder:
        data = Path(folder) / "images.npz"
        make_images(data, args.rows, side)
        rows = {}
        for packing in packings:
            rows[packing] = run_packing(data, Path(folder) / f"home-{packing}", packing, args)
            print(f"packing {packing}: {rows[packing]}", flush=True)
    print_table(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
