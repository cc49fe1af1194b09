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

    python bench/sampler_quality.py                          # widths 2 and 8, 7 seeds, 50 trials
    python bench/sampler_quality.py --widths 8,32 --trials 100 --seeds 7
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

from tlsearch import driver  # noqa: E402
from tlsearch.stores import Stores  # noqa: E402
from tlsearch.study import load_study_file  # noqa: E402

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

SAMPLERS = {
    "tlsearch TPE": "None",
    "tlsearch TPE no liar": "lambda seed: optuna.samplers.TPESampler(seed=seed, constant_liar=False)",
    "tlsearch TPE startup": "lambda seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials={startup})",
    "tlsearch random": "lambda seed: optuna.samplers.RandomSampler(seed=seed)",
}


def tlsearch_regret(client, folder: Path, sampler: str, seed: int, trials: int, sleep: float) -> float:
    path = folder / f"study_{abs(hash((sampler, seed))) % 10**8}.py"
    path.write_text(STUDY_FILE.format(center=CENTER, sleep=sleep, trials=trials, seed=seed, sampler=sampler))
    result = driver.drive(
        load_study_file(path), stores=Stores(home=path.with_suffix("")), client=client, progress="off"
    )
    return result.study.best_value


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
    n_workers = min(width, 4)
    cluster = distributed.LocalCluster(
        n_workers=n_workers, threads_per_worker=width // n_workers, dashboard_address=None
    )
    with cluster, distributed.Client(cluster) as client, tempfile.TemporaryDirectory() as folder:
        for seed in range(seeds):
            for name, sampler in SAMPLERS.items():
                sampler = sampler.format(startup=max(10, 2 * width))
                regrets[name].append(tlsearch_regret(client, Path(folder), sampler, seed, trials, sleep))
            regrets["optuna TPE"].append(optuna_regret(width, seed, trials, sleep))
            print(
                f"  width {width}, seed {seed}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in regrets.items()),
                file=sys.stderr,
            )
    return regrets


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="2,8", help="trials in flight (Dask worker threads), comma-separated")
    parser.add_argument("--seeds", type=int, default=7)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--sleep", type=float, default=0.05, help="seconds each trial's fold sleeps")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(f"4-D quadratic, {args.trials} trials, {args.seeds} seeds; median regret (best value found; optimum 0)")
    print(f"{'width':>5}  {'sampler':<22} {'median':>8}  {'/ optuna TPE':>12}  {'/ random':>8}")
    for width in [int(w) for w in args.widths.split(",")]:
        regrets = measure(width, args.seeds, args.trials, args.sleep)
        medians = {name: statistics.median(values) for name, values in regrets.items()}
        for name, median in medians.items():
            print(
                f"{width:>5}  {name:<22} {median:>8.3f}  {median / medians['optuna TPE']:>12.2f}"
                f"  {median / medians['tlsearch random']:>8.2f}"
            )


if __name__ == "__main__":
    main()
