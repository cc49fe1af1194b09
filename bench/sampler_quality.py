"""Search quality on the path users run: studies through `tlsearch run`'s dispatcher and Dask workers, against
plain Optuna in one process at the same concurrency, and against random search.

Each search minimises a 4-D shifted quadratic (optimum 0; `--sleep` seconds a trial, so that `--widths` trials
really are in flight together) for `--trials` trials and `--seeds` seeds. Rows:

    tlsearch TPE            the default: StudySpec(sampler=None) = TPESampler(seed), constant liar on (Optuna 5)
    tlsearch TPE no liar    TPESampler(seed, constant_liar=False)
    tlsearch TPE startup    TPESampler(seed, n_startup_trials=max(10, 2 x width))
    tlsearch random         RandomSampler(seed)
    optuna TPE              plain Optuna, study.optimize(n_jobs=width) in one process, TPESampler(seed)

Regret is the best value a search found (the optimum is 0); the table shows the median over seeds and the
ratios the targets are stated in (tlsearch TPE / optuna TPE <= 1.2, tlsearch TPE / random <= 0.3).

`--study mlp` searches studies/digits_mlp.py instead (its space and model, `--epochs` epochs, 3-fold CV, no
pruning), for tlsearch TPE, tlsearch random and plain Optuna TPE in one process with one trial at a time
(Keras keeps global state per process, so threads cannot train two models at once): regret there is the
best CV accuracy any search of that seed found minus this search's best.

    python bench/sampler_quality.py                          # widths 2 and 8, 7 seeds, 50 trials
    python bench/sampler_quality.py --widths 8,32 --trials 100 --seeds 7
    python bench/sampler_quality.py --study mlp --widths 2 --trials 30 --epochs 4 --seeds 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import distributed
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tlsearch.execution import _driver as driver  # noqa: E402
from tlsearch.spec._spec import load_study_file  # noqa: E402
from tlsearch.stores._stores import Stores  # noqa: E402

CENTER = (1.5, -2.0, 0.5, 3.0)

STUDY_FILE = """
import time
import optuna
import tlsearch

CENTER = {center}

def space(trial):
    return {{f"x{{i}}": trial.suggest_float(f"x{{i}}", -5, 5) for i in range(4)}}

def fit(params, fold, report):
    time.sleep({sleep})
    return sum((params[f"x{{i}}"] - c) ** 2 for i, c in enumerate(CENTER))

spec = tlsearch.StudySpec(
    name="quadratic", dataset="sklearn:iris", space=space, model=tlsearch.CustomLoop(fit), cv=2,
    direction="minimize", n_trials={trials}, seed={seed}, pruner=optuna.pruners.NopPruner(),
    fold_parallel=False, sampler={sampler})
"""

MLP_STUDY_FILE = """
import dataclasses, runpy
import optuna
import tlsearch

base = runpy.run_path({path!r})["spec"]
spec = tlsearch.StudySpec(
    name="mlp", dataset=base.dataset, space=base.space, model=dataclasses.replace(base.model, epochs={epochs}),
    cv=3, metric="accuracy", n_trials={trials}, seed={seed}, pruner=optuna.pruners.NopPruner(),
    fold_parallel=False, sampler={sampler})
"""
ROOT = Path(__file__).resolve().parent.parent

SAMPLERS = {
    "tlsearch TPE": "None",
    "tlsearch TPE no liar": "lambda seed: optuna.samplers.TPESampler(seed=seed, constant_liar=False)",
    "tlsearch TPE startup": "lambda seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials={startup})",
    "tlsearch random": "lambda seed: optuna.samplers.RandomSampler(seed=seed)",
}


def tlsearch_best(client, folder: Path, template: str, sampler: str, seed: int, **fields) -> float:
    """The best value of one search through the dispatcher and the workers."""
    path = folder / f"study_{abs(hash((template, sampler, seed))) % 10**8}.py"
    path.write_text(template.format(sampler=sampler, seed=seed, **fields))
    stores = Stores(home=path.with_suffix(""))
    return driver.drive(load_study_file(path), stores=stores, client=client, progress="off").study.best_value


def mlp_in_process_best(seed: int, trials: int, epochs: int, folder: Path) -> float:
    """Plain Optuna TPE in this process, one trial at a time, on the same study through tlsearch.cv.evaluate."""
    from sklearn.datasets import load_digits

    from tlsearch.cv import _evaluate as cv

    path = folder / "mlp_in_process.py"
    path.write_text(
        MLP_STUDY_FILE.format(
            path=str(ROOT / "studies" / "digits_mlp.py"), epochs=epochs, trials=trials, seed=seed, sampler="None"
        )
    )
    spec = load_study_file(path)
    X, y = load_digits(return_X_y=True)
    arrays = {"X": X.astype("float32"), "y": y}
    folds = list(spec.cv_.split(X, y))
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(lambda trial: cv.evaluate(trial, spec, arrays, folds), n_trials=trials)
    return study.best_value


def optuna_regret(width: int, seed: int, trials: int, sleep: float) -> float:
    def objective(trial):
        params = [trial.suggest_float(f"x{i}", -5, 5) for i in range(4)]
        time.sleep(sleep)
        return sum((x - c) ** 2 for x, c in zip(params, CENTER))

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=trials, n_jobs=width)
    return study.best_value


def measure(width: int, seeds: int, trials: int, sleep: float) -> dict[str, list[float]]:
    regrets: dict[str, list[float]] = {name: [] for name in [*SAMPLERS, "optuna TPE"]}
    with _client(width) as client, tempfile.TemporaryDirectory() as folder:
        for seed in range(seeds):
            for name, sampler in SAMPLERS.items():
                sampler = sampler.format(startup=max(10, 2 * width))
                fields = {"center": CENTER, "sleep": sleep, "trials": trials}
                regrets[name].append(tlsearch_best(client, Path(folder), STUDY_FILE, sampler, seed, **fields))
            regrets["optuna TPE"].append(optuna_regret(width, seed, trials, sleep))
            print(
                f"  width {width}, seed {seed}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in regrets.items()),
                file=sys.stderr,
            )
    return regrets


def measure_mlp(width: int, seeds: int, trials: int, epochs: int) -> dict[str, list[float]]:
    names = {"tlsearch TPE": SAMPLERS["tlsearch TPE"], "tlsearch random": SAMPLERS["tlsearch random"]}
    regrets: dict[str, list[float]] = {name: [] for name in [*names, "optuna TPE"]}
    fields = {"path": str(ROOT / "studies" / "digits_mlp.py"), "epochs": epochs, "trials": trials}
    with _client(width) as client, tempfile.TemporaryDirectory() as folder:
        for seed in range(seeds):
            best = {
                name: tlsearch_best(client, Path(folder), MLP_STUDY_FILE, sampler, seed, **fields)
                for name, sampler in names.items()
            }
            best["optuna TPE"] = mlp_in_process_best(seed, trials, epochs, Path(folder))
            for name, value in best.items():
                regrets[name].append(max(best.values()) - value)
            print(
                f"  width {width}, seed {seed}: " + ", ".join(f"{k} {v:.4f}" for k, v in best.items()), file=sys.stderr
            )
    return regrets


def _client(width: int) -> distributed.Client:
    n_workers = min(width, 4)
    cluster = distributed.LocalCluster(
        n_workers=n_workers, threads_per_worker=width // n_workers, dashboard_address=None
    )
    return distributed.Client(cluster)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="2,8", help="trials in flight (Dask worker threads), comma-separated")
    parser.add_argument("--seeds", type=int, default=7)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--sleep", type=float, default=0.05, help="seconds each trial's fold sleeps")
    parser.add_argument("--study", choices=("quadratic", "mlp"), default="quadratic")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per fold (--study mlp)")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    what = "4-D quadratic, optimum 0" if args.study == "quadratic" else "digits MLP, regret in CV accuracy"
    print(f"{what}; {args.trials} trials, {args.seeds} seeds; median regret")
    print(f"{'width':>5}  {'sampler':<22} {'median':>8}  {'/ optuna TPE':>12}  {'/ random':>8}")
    for width in [int(w) for w in args.widths.split(",")]:
        if args.study == "mlp":
            regrets = measure_mlp(width, args.seeds, args.trials, args.epochs)
        else:
            regrets = measure(width, args.seeds, args.trials, args.sleep)
        medians = {name: statistics.median(values) for name, values in regrets.items()}
        for name, median in medians.items():
            print(
                f"{width:>5}  {name:<22} {median:>8.4f}  {_ratio(median, medians['optuna TPE']):>12}"
                f"  {_ratio(median, medians['tlsearch random']):>8}"
            )


def _ratio(value: float, reference: float) -> str:
    return f"{value / reference:.2f}" if reference else "-"


if __name__ == "__main__":
    main()
