"""The noise-aware pick's rule on constructed scores: evaluations are {trial number: {repeat: score}}."""

import math

import numpy as np

from tlsearch.cv._intensify import Estimate, beats, estimate, incumbent, next_evaluation


def test_one_evaluation_each_picks_the_best_mean_as_optuna_does():
    assert incumbent({0: {0: 0.80}, 1: {0: 0.90}, 2: {0: 0.85}}, maximize=True) == 1
    assert incumbent({0: {0: 0.80}, 1: {0: 0.90}, 2: {0: 0.85}}, maximize=False) == 0


def test_a_lucky_incumbent_loses_its_place():
    # trial 0 was lucky on repeat 0 (0.95) and is 0.85 on its re-runs; trial 1 is steadily 0.90
    lucky = {0: {0: 0.95}, 1: {0: 0.90}}
    assert incumbent(lucky, maximize=True) == 0
    assert next_evaluation(lucky, maximize=True, max_repeats=3) == (0, 1)  # the incumbent earns a repeat
    lucky[0][1] = 0.85
    assert next_evaluation(lucky, maximize=True, max_repeats=3) == (1, 1)  # the challenger races on repeat 1
    lucky[1][1] = 0.91
    assert incumbent(lucky, maximize=True) == 1  # paired over repeats 0 and 1: 0.905 against 0.90


def test_a_truly_better_challenger_wins_and_a_worse_one_does_not():
    scores = {0: {0: 0.90, 1: 0.91, 2: 0.89}, 1: {0: 0.93}}
    assert incumbent(scores, maximize=True) == 0  # one evaluation cannot unseat three
    assert next_evaluation(scores, maximize=True, max_repeats=3) == (1, 1)
    scores[1].update({1: 0.92})
    assert next_evaluation(scores, maximize=True, max_repeats=3) == (1, 2)
    scores[1].update({2: 0.94})
    assert incumbent(scores, maximize=True) == 1
    worse = {0: {0: 0.90, 1: 0.91, 2: 0.89}, 1: {0: 0.93, 1: 0.86, 2: 0.87}}
    assert incumbent(worse, maximize=True) == 0


def test_a_challenger_that_falls_behind_stops_racing():
    scores = {0: {0: 0.90, 1: 0.91}, 1: {0: 0.92}}
    assert next_evaluation(scores, maximize=True, max_repeats=2) == (1, 1)
    scores = {0: {0: 0.90, 1: 0.91}, 1: {0: 0.88}}  # worse on repeat 0: no race, the incumbent is at its max
    assert next_evaluation(scores, maximize=True, max_repeats=2) is None


def test_minimize():
    scores = {0: {0: 0.10, 1: 0.12}, 1: {0: 0.08, 1: 0.09}, 2: {0: 0.05}}
    assert incumbent(scores, maximize=False) == 1
    assert next_evaluation(scores, maximize=False, max_repeats=3) == (2, 1)


def test_ties_keep_the_incumbent():
    assert incumbent({0: {0: 0.9}, 1: {0: 0.9}}, maximize=True) == 0
    assert not beats({0: 0.9, 1: 0.8}, {0: 0.8, 1: 0.9}, maximize=True)


def test_missing_and_hostile_values_never_win_nor_crash():
    scores = {
        0: {0: 0.90},
        1: {0: math.nan},
        2: {0: math.inf},
        3: {0: -math.inf, 1: "0.99"},  # a string read from a store counts as what it says
        4: {},
        5: {0: None},
    }
    assert incumbent(scores, maximize=True) == 0
    assert incumbent(scores, maximize=False) == 0
    assert incumbent({1: {0: math.nan}}, maximize=True) is None
    assert next_evaluation({}, maximize=True, max_repeats=3) is None
    # a failed repeat is missing: the challenger must still run it before it can win
    assert not beats({0: 0.95}, {0: 0.90, 1: 0.90}, maximize=True)


def test_estimate_is_the_mean_and_standard_error_over_all_evaluations():
    assert estimate({0: 0.9}) == Estimate(0.9, math.nan, 1) or math.isnan(estimate({0: 0.9}).standard_error)
    got = estimate({0: 0.80, 1: 0.90, 2: math.nan, 3: 0.85})
    assert got.n == 3 and math.isclose(got.mean, 0.85)
    assert math.isclose(got.standard_error, np.std([0.80, 0.90, 0.85], ddof=1) / math.sqrt(3))
    assert "± " in str(got) and "3 evaluations" in str(got)
    assert estimate({0: math.nan}) is None


def test_the_rule_beats_the_best_mean_on_noisy_trials():
    # 200 trials whose truth is spread by 0.01 and whose each evaluation has noise 0.015: racing with 3 repeats
    # picks a trial whose truth is better on average than the best single evaluation's, over many draws
    rng = np.random.default_rng(0)
    regret_plain, regret_raced = [], []
    for _ in range(40):
        truth = rng.normal(0.9, 0.01, 200)
        scores: dict[int, dict[int, float]] = {}
        for number, value in enumerate(truth):
            scores[number] = {0: value + rng.normal(0, 0.015)}
            while (step := next_evaluation(scores, maximize=True, max_repeats=3)) is not None:
                scores[step[0]][step[1]] = truth[step[0]] + rng.normal(0, 0.015)
        plain = max(scores, key=lambda n: scores[n][0])
        regret_plain.append(truth.max() - truth[plain])
        regret_raced.append(truth.max() - truth[incumbent(scores, maximize=True)])
    assert np.mean(regret_raced) < np.mean(regret_plain)
