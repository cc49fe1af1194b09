"""Does tlsearch's training path change what a Keras fold learns? One fold of bench/keras_throughput.py's model,
from the same initial weights and the same seed, four ways:
  - arrays:   `fit` on the arrays, as the plain loop does;
  - pipeline: tlsearch's `tf.data` pipeline (rows shuffled each epoch with the fold's seed), 1 step per call;
  - spe 32:   the pipeline with 32 steps per call, as tlsearch compiles a study without callbacks;
  - reused:   spe 32 on the model the previous fold trained, reset to the fresh model's initial state
              (tlsearch.models._keras_reuse.load_initial_state), as a worker reuses a traced model.
Equal columns mean the path does not matter; arrays against pipeline differ only in the shuffle order.
TensorFlow backend.

Usage: nice -n 5 python bench/keras_paths.py [--models cnn,mlp] [--folds 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

PATHS = ("arrays", "pipeline", "spe 32", "reused")


def accuracies(kind: str, n_folds: int) -> dict[str, list[float]]:
    import keras
    import keras_throughput as bench
    from sklearn.datasets import load_digits
    from sklearn.model_selection import StratifiedKFold

    from tlsearch.models._keras_inputs import training
    from tlsearch.models._keras_reuse import load_initial_state

    X, y = load_digits(return_X_y=True)
    X = X.astype("float32")
    splits = list(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    scores: dict[str, list[float]] = {path: [] for path in PATHS}
    previous = None
    for seed in range(n_folds):
        train, valid = splits[seed % 5]
        keras.utils.set_random_seed(seed)
        initial = [variable.numpy() for variable in bench.build(kind, (64,), 10).weights]
        for path in PATHS:
            keras.utils.set_random_seed(1000 + seed)  # the same dropout draws and shuffles on every path
            model = bench.build(kind, (64,), 10)
            model.set_weights(initial)
            if path != "arrays":
                model.steps_per_execution = 1 if path == "pipeline" else 32
            if path == "reused":
                assert load_initial_state(previous, model)
                model = previous
                keras.utils.set_random_seed(1000 + seed)
            if path == "arrays":
                model.fit(X[train], y[train], epochs=10, batch_size=64, verbose=0)
            else:
                model.fit(**training(keras, X[train], y[train], None, 64, seed, {}), epochs=10, verbose=0)
            scores[path].append(float(model.evaluate(X[valid], y[valid], batch_size=len(valid), verbose=0)[1]))
            if path == "spe 32":
                previous = model
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,mlp")
    parser.add_argument("--folds", type=int, default=10, help="folds trained per path (seeds 0..N-1)")
    args = parser.parse_args(argv)
    for kind in args.models.split(","):
        scores = accuracies(kind, args.folds)
        print(f"\n{kind}: validation accuracy of {args.folds} folds, each path from the same initial weights")
        for path, values in scores.items():
            print(f"  {path:9} mean {statistics.mean(values):.4f} sd {statistics.stdev(values):.4f}")
        same = [path for path in PATHS[2:] if scores[path] == scores["pipeline"]]
        print(f"  identical to the pipeline fold by fold: {', '.join(same) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
