"""A peer row for bench/search_quality.py's synthetic study: SMAC3's own intensifier (smac 2.4.1, its
HyperparameterOptimizationFacade: random-forest surrogate, intensification over instances and seeds).

One SMAC trial is one fold (instance = the fold index, seed = the run-to-run noise), so the budget of 300
SMAC trials is search_quality's 300 folds (60 no-pruning trials x 5); the pick is SMAC's incumbent, scored by
its truth (regret = 0.95 - truth). The synthetic objective is copied here from bench/search_quality.py
(SYNTHETIC_*), since SMAC needs a virtual environment of its own (pyrfr, swig), without tlsearch's:

    python3 -m venv /tmp/smac-venv && /tmp/smac-venv/bin/pip install smac==2.4.1
    /tmp/smac-venv/bin/python bench/smac_peer.py --seeds 3            # about 2 CPU-minutes a seed
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np
from ConfigSpace import Categorical, ConfigurationSpace, Float
from smac import HyperparameterOptimizationFacade, Scenario

NOISE = 0.015  # = search_quality.SYNTHETIC_NOISE, and the rest below likewise
FOLDS = np.array([-0.02, 0.01, 0.0, 0.015, -0.005])
CENTRE = np.array([0.3, 0.7, 0.55, 0.2])
WEIGHTS = np.array([0.3, 0.2, 0.1, 0.05])
KINDS = {"a": 0.0, "b": 0.01, "c": 0.04}


def truth(params: dict) -> float:
    x = np.array([params[f"x{i}"] for i in range(4)])
    return float(0.95 - np.sum(WEIGHTS * (x - CENTRE) ** 2) - KINDS[params["kind"]])


def fold_score(params: dict, index: int, seed: int) -> float:
    interaction = 0.008 * math.sin(7.0 * index + 11.0 * params["x0"] + 5.0 * params["x2"])
    return truth(params) + FOLDS[index] + interaction + np.random.default_rng(seed).normal(0.0, NOISE)


def regret(seed: int, budget: int) -> float:
    """One SMAC search of `budget` folds; the regret of its incumbent."""
    space = ConfigurationSpace(seed=seed)
    space.add([Float(f"x{i}", (0.0, 1.0)) for i in range(4)] + [Categorical("kind", list(KINDS))])
    scenario = Scenario(
        space,
        deterministic=False,
        n_trials=budget,
        seed=seed,
        instances=[str(i) for i in range(5)],
        instance_features={str(i): [i] for i in range(5)},
        output_directory=f"/tmp/smac_peer/{seed}",
    )
    calls = [0]

    def target(config, instance: str, seed: int = 0) -> float:
        calls[0] += 1  # every fold run gets noise of its own
        return -fold_score(dict(config), int(instance), seed * 1000 + calls[0])

    intensifier = HyperparameterOptimizationFacade.get_intensifier(scenario, max_config_calls=15)
    facade = HyperparameterOptimizationFacade(
        scenario, target, intensifier=intensifier, overwrite=True, logging_level=40
    )
    return 0.95 - truth(dict(facade.optimize()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--folds", type=int, default=300, help="budget in folds (SMAC trials)")
    args = parser.parse_args()
    # smac's random forest calls scikit-learn's `delayed` outside its `Parallel`: one warning per tree, millions a run
    warnings.filterwarnings("ignore", message=".*sklearn.utils.parallel.delayed")
    started = time.monotonic()
    regrets = [regret(seed, args.folds) for seed in range(args.first_seed, args.first_seed + args.seeds)]
    print(f"SMAC3 intensifier, {args.folds} folds, {args.seeds} seed(s): regret {np.mean(regrets):.4f}")
    print("  per seed: " + "  ".join(f"{r:.4f}" for r in regrets), f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
