"""KFoldPruner's decisions on constructed fold scores, and the prune_reason a pruned trial of a real run records."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState, create_trial

from tlsearch.cv._pruners import KFoldPruner, describe, fold_scores
from tlsearch.execution import _driver as driver
from tlsearch.spec._spec import load_study_file
from tlsearch.stores._stores import Stores

optuna.logging.set_verbosity(optuna.logging.WARNING)

FOLD_DIFFICULTY = np.array([-0.03, 0.0, 0.01, 0.02, 0.0])


def study_with_complete_trials(fold_scores_per_trial, direction="maximize", pruned=0, **options) -> optuna.Study:
    """A study of complete trials with these fold scores (reported as running means, as tlsearch does), then
    `pruned` pruned trials."""
    study = optuna.create_study(direction=direction, pruner=KFoldPruner(**options))
    for scores in fold_scores_per_trial:
        running = np.cumsum(scores) / np.arange(1, len(scores) + 1)
        study.add_trial(create_trial(value=float(running[-1]), intermediate_values=dict(enumerate(running))))
    for _ in range(pruned):
        study.add_trial(create_trial(state=TrialState.PRUNED, intermediate_values={0: 0.5}))
    return study


def decide(study: optuna.Study, scores: list[float]):
    """The pruner's decision on a running trial that has reported these fold scores."""
    trial = study.ask()
    for step, value in enumerate(np.cumsum(scores) / np.arange(1, len(scores) + 1)):
        trial.report(float(value), step)
    return study.pruner.decide(study, study._storage.get_trial(trial._trial_id))


def noisy_equals(n_trials=12, noise=0.02, truth=0.90):
    """Fold scores of trials that are all truly `truth`: fold difficulty plus run-to-run noise."""
    rng = np.random.default_rng(0)
    return (truth + FOLD_DIFFICULTY + rng.normal(0, noise, (n_trials, len(FOLD_DIFFICULTY)))).round(3).tolist()


def test_fold_scores_are_recovered_from_running_means():
    scores = np.array([0.9, 0.8, 0.95, 0.7])
    running = np.cumsum(scores) / np.arange(1, 5)
    assert fold_scores(dict(enumerate(running)), 3) == pytest.approx(scores)
    assert fold_scores({0: 0.9, 2: 0.8}, 2) is None
    assert fold_scores({0: float("nan")}, 0) is None


def test_compares_fold_by_fold_and_prunes_only_the_hopeless():
    study = study_with_complete_trials(noisy_equals())
    assert decide(study, [0.86]) is None  # fold 0 is hard for everyone: 0.86 is within noise
    assert decide(study, [0.89, 0.92]) is None  # better than the best
    assert decide(study, [0.80]) is not None  # hopeless after one fold
    assert decide(study, [0.84, 0.87, 0.88]) is not None  # consistently 0.03 worse

    minimized = study_with_complete_trials([[-s for s in row] for row in noisy_equals()], direction="minimize")
    assert decide(minimized, [-0.80]) is not None
    assert decide(minimized, [-0.86]) is None


def test_a_lucky_incumbent_is_not_the_bar():
    # twelve trials all truly 0.90; the best observed CV mean, 0.925, owes its lead to run-to-run noise
    complete = noisy_equals()
    study = study_with_complete_trials(complete)
    best = max(complete, key=np.mean)
    assert np.mean(best) > 0.92
    typical = [0.86, 0.88, 0.90]  # truly 0.90 too, but 0.02 below the best's first three folds
    assert np.mean(typical) < np.mean(best[:3]) - 0.02
    assert decide(study, typical) is None
    decision = decide(study, [0.80, 0.85])
    assert decision.reference_trial == complete.index(best)
    assert 0.89 < decision.reference_score < np.mean(best) - 0.01  # shrunk towards what the trials share


def test_decision_says_why():
    study = study_with_complete_trials(noisy_equals())
    decision = decide(study, [0.80, 0.85])
    reason = decision.as_attr()
    assert reason["fold"] == 1 and reason["n_folds"] == 5
    assert reason["gap"] > reason["tolerance"] > 0 and reason["noise"] > 0
    assert reason["gap"] == pytest.approx(reason["reference_score"] - reason["score"], abs=1e-5)
    assert reason["scores"] == [0.8, 0.85] and reason["n_contenders"] == 6
    assert reason["score"] == pytest.approx(
        np.mean(np.subtract(reason["scores"], reason["fold_means"][:2])) + np.mean(reason["fold_means"]), abs=1e-5
    )
    line = describe(reason)
    assert line.startswith(f"pruned after folds 0–1 of 5: 0.800, 0.850 vs trial #{reason['reference_trial']}'s ")
    assert ", ".join(f"{s:.3f}" for s in reason["reference_scores"]) + " on the same folds" in line
    # a reason stored before the scores were recorded still reads
    old = {key: reason[key] for key in ("fold", "n_folds", "score", "reference_trial", "reference_score")}
    old |= {key: reason[key] for key in ("gap", "tolerance", "noise")}
    assert describe(old).startswith("pruned after fold 1 of 5: estimated CV score 0.842 is 0.066 below trial #")


def test_trials_with_the_same_fold_scores_count_once():
    # many parameters, one model (an iris LogisticRegression's C): identical fold scores measure no noise
    same = [[1.0, 1.0, 0.967, 0.967, 0.967]] * 10
    assert decide(study_with_complete_trials(same), [1.0, 0.967]) is None
    assert decide(study_with_complete_trials(same + noisy_equals(n_trials=2)), [0.1]) is None  # 3 distinct < 4
    decision = decide(study_with_complete_trials(same + noisy_equals(n_trials=3)), [0.5])
    assert decision.reference_trial == 0 and decision.n_contenders == 3 and decision.noise > 0


def test_no_noise_measured_prunes_nothing():
    # trials that differ by the same amount on every fold: no trial x fold spread to measure the noise with
    shifted = [(0.9 + FOLD_DIFFICULTY + shift).tolist() for shift in (0.0, 0.01, 0.02, 0.03, 0.04)]
    assert decide(study_with_complete_trials(shifted), [0.1]) is None


def test_waits_for_startup_trials_warmup_folds_and_keeps_a_floor_of_complete_trials():
    three = noisy_equals(n_trials=3)
    assert decide(study_with_complete_trials(three), [0.1]) is None  # 3 complete < n_startup_trials=4
    assert decide(study_with_complete_trials(three, n_startup_trials=3), [0.1]) is not None
    assert decide(study_with_complete_trials(three, n_startup_trials=3, n_warmup_folds=1), [0.1]) is None
    # 4 complete, 12 pruned: under a quarter complete if this one is pruned too
    assert decide(study_with_complete_trials(noisy_equals(n_trials=4), pruned=12), [0.1]) is None
    assert (
        decide(study_with_complete_trials(noisy_equals(n_trials=4), pruned=12, min_complete_fraction=0.2), [0.1])
        is not None
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"margin_sigmas": -1}, "margin_sigmas"),
        ({"n_startup_trials": 2}, "n_startup_trials"),
        ({"n_warmup_folds": -1}, "n_warmup_folds"),
        ({"min_complete_fraction": 1.5}, "min_complete_fraction"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        KFoldPruner(**options)


STUDY_FILE = """
import math
import optuna
import tlsearch

def space(trial):
    return {"x": trial.suggest_float("x", -10, 10)}

def fit(params, fold, report):
    return -(params["x"] - 2) ** 2 + 0.3 * math.sin(7 * fold.index + 13 * params["x"])

study = tlsearch.StudySpec(
    name="pruned", dataset="sklearn:iris", space=space, model=tlsearch.CustomLoop(fit),
    cv=4, direction="maximize", n_trials=16, sampler=optuna.samplers.RandomSampler(seed=3))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pruned_trials_of_a_run_record_why(tmp_path):
    path = tmp_path / "study.py"
    path.write_text(STUDY_FILE)
    study = driver.run(load_study_file(path), stores=Stores(home=tmp_path / "home"), n_workers=1, progress="off")
    pruned = study.get_trials(states=(TrialState.PRUNED,))
    assert pruned, "no trial was pruned"
    complete = {trial.number: trial for trial in study.get_trials(states=(TrialState.COMPLETE,))}
    for trial in pruned:
        reason = trial.user_attrs["prune_reason"]
        assert reason["fold"] == trial.last_step == trial.user_attrs["n_folds_run"] - 1
        assert reason["n_folds"] == 4 and reason["reference_trial"] in complete
        assert reason["gap"] > reason["tolerance"]
        # the scores it names are the stored ones, of this trial and of the reference trial on the same folds
        reference = complete[reason["reference_trial"]]
        folds = range(reason["fold"] + 1)
        assert reason["scores"] == pytest.approx([trial.user_attrs[f"split{k}_test_score"] for k in folds], abs=1e-6)
        stored = [reference.user_attrs[f"split{k}_test_score"] for k in folds]
        assert reason["reference_scores"] == pytest.approx(stored, abs=1e-6)
        line = describe(reason)
        assert f"vs trial #{reference.number}'s {', '.join(f'{s:.3f}' for s in stored)} on the same folds" in line
    # ...and people see it: `tlsearch trials` has a prune_reason column, the report a pruned-trials table.
    from tlsearch import cli
    from tlsearch.reading._report import write_report

    assert (
        cli.main(
            ["trials", "pruned", "--home", str(tmp_path / "home"), "--format", "csv", "-o", str(tmp_path / "t.csv")]
        )
        == 0
    )
    import pandas as pd

    table = pd.read_csv(tmp_path / "t.csv")
    shown = table.set_index("number")["prune_reason"]
    assert all(shown[t.number] == describe(t.user_attrs["prune_reason"]) for t in pruned)
    assert all(shown[t.number].startswith(("pruned after fold 0 of 4: ", "pruned after folds 0–")) for t in pruned)
    assert shown.drop([t.number for t in pruned]).isna().all()
    page = write_report(study, tmp_path / "report.html").read_text()
    assert "Why it was pruned" in page and f"#{pruned[0].number}" in page


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_says_what_pruning_saved(tmp_path, capsys):
    from tlsearch import cli

    path = tmp_path / "study.py"
    path.write_text(STUDY_FILE)
    home = tmp_path / "home"
    assert cli.main(["run", str(path), "--home", str(home), "--workers", "1", "--progress", "off", "--no-report"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pruning stopped")]

    from tlsearch.reading._study_attrs import load

    trials = load(Stores(home=home), "pruned").get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    not_trained = sum(t.user_attrs["n_splits"] - t.user_attrs["n_folds_run"] for t in pruned)
    n_folds = sum(t.user_attrs["n_splits"] for t in trials)
    assert pruned and line.startswith(
        f"pruning stopped {len(pruned)} of {len(trials)} trials early: {not_trained} of {n_folds} folds not trained "
        f"({not_trained / n_folds:.0%}, about "
    )


# An iris-like study where most parameters give the same model (as C does for an iris LogisticRegression):
# fold scores on 30 validation rows, one row apart. x = 1 is one row behind the others on fold 1 only.
TIES_FILE = """
import optuna
import tlsearch

SCORES = {0: [29, 29, 29, 29, 28], 1: [30, 29, 29, 29, 29]}

def fit(params, fold, report):
    return SCORES.get(params["x"], [30, 30, 29, 29, 29])[fold.index] / 30

study = tlsearch.StudySpec(
    name="ties", dataset="sklearn:iris", space=lambda trial: {"x": trial.suggest_int("x", 0, 9)},
    model=tlsearch.CustomLoop(fit), cv=5, n_trials=30, sampler=optuna.samplers.RandomSampler(seed=1))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_trials_with_the_same_fold_scores_do_not_make_the_noise_zero(tmp_path):
    path = tmp_path / "ties.py"
    path.write_text(TIES_FILE)
    study = driver.run(load_study_file(path), stores=Stores(home=tmp_path / "home"), n_workers=1, progress="off")
    trials = study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    assert len(trials) == 30 and {t.params["x"] for t in trials} >= {0, 1, 2}
    # three distinct sets of fold scores, fewer than n_startup_trials=4: nothing is pruned (counted once per
    # trial, the many ties measured a noise of zero and pruned x = 1 after folds 0-1, its mean 0.983 above 0.98)
    assert all(t.state == TrialState.COMPLETE for t in trials)
