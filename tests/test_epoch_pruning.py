"""Pruning on the epoch axis inside a fold: the schedule's decisions on constructed curves, and a real Keras run."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from tlsearch.cv._pruners import EpochPruning, KFoldPruner, describe

optuna.logging.set_verbosity(optuna.logging.WARNING)


def study_with_curves(curves, direction="maximize", **schedule) -> optuna.Study:
    """A study of finished trials whose fold-0 validation scores at the rung epochs are `curves` ({epoch: score})."""
    study = optuna.create_study(direction=direction, pruner=KFoldPruner(epochs=EpochPruning(**schedule)))
    for curve in curves:
        attrs = {"split0_epoch_scores": {str(epoch): score for epoch, score in curve.items()}}
        study.add_trial(create_trial(value=0.5, user_attrs=attrs))
    return study


def decide(study, epoch, score, fold=0):
    return study.pruner.decide_epoch(study, 1000, fold, 3, epoch, score)


CURVES = [{1: 0.60, 3: 0.80}, {1: 0.70, 3: 0.85}, {1: 0.50, 3: 0.90}, {1: 0.40, 3: 0.70}, {1: 0.65, 3: 0.88}]


def test_rungs_are_epochs_min_times_powers_of_eta_before_the_last_epoch_of_early_folds():
    schedule = EpochPruning(min_epochs=1, eta=3)
    assert [epoch for epoch in range(1, 31) if schedule.is_rung(0, epoch, 30)] == [1, 3, 9, 27]
    assert [epoch for epoch in range(1, 10) if schedule.is_rung(0, epoch, 9)] == [1, 3]  # 9 ends the fold
    assert not schedule.is_rung(1, 3, 9)  # only the first fold by default
    assert EpochPruning(n_folds=2).is_rung(1, 3, 9)
    assert [epoch for epoch in range(1, 20) if EpochPruning(min_epochs=2, eta=2).is_rung(0, epoch, 20)] == [2, 4, 8, 16]


def test_the_bottom_of_a_rung_is_stopped_and_the_top_third_goes_on():
    study = study_with_curves(CURVES)  # 5 peers + this trial: the top 6 // 3 = 2 go on
    assert decide(study, 3, 0.95) is None  # best
    assert decide(study, 3, 0.89) is None  # second
    decision = decide(study, 3, 0.75)
    assert (decision.rank, decision.n_ranked, decision.cutoff) == (5, 6, 0.88)
    assert decide(study, 1, 0.66) is None  # second at epoch 1: 0.70, 0.66 | 0.65, 0.60, ...
    assert decide(study, 1, 0.65) is None  # ties go the trial's way
    assert decide(study, 1, 0.64) is not None
    reason = decision.as_attr()
    assert reason["epoch"] == 3 and reason["fold"] == 0 and reason["n_folds"] == 3
    assert describe(reason).startswith("pruned at epoch 3 of fold 0 of 3: validation score 0.75 ranked 5 of 6")


def test_loss_is_ranked_the_other_way():
    study = study_with_curves([{3: 1 - curve[3]} for curve in CURVES], direction="minimize")
    assert decide(study, 3, 0.05) is None  # lowest loss
    assert decide(study, 3, 0.25) is not None


def test_too_few_peers_at_a_rung_decide_nothing():
    study = study_with_curves(CURVES[:3])  # 3 peers < min_peers=4
    assert decide(study, 3, 0.01) is None
    assert decide(study_with_curves(CURVES[:3], min_peers=3), 3, 0.01) is not None
    assert decide(study_with_curves(CURVES), 9, 0.01) is None  # nobody else reached epoch 9
    assert decide(study_with_curves(CURVES), 3, 0.01, fold=1) is None  # nor fold 1


def test_the_floor_of_complete_trials_holds_on_epochs_too():
    study = study_with_curves(CURVES)
    for _ in range(20):
        study.add_trial(create_trial(state=TrialState.PRUNED))
    assert decide(study, 3, 0.01) is None  # 5 complete of 26 finished: under a quarter
    assert KFoldPruner().decide_epoch(study, 1000, 0, 3, 3, 0.01) is None  # no schedule: between folds only


@pytest.mark.parametrize("options", [{"eta": 1}, {"min_epochs": 0}, {"min_peers": 0}, {"n_folds": 0}])
def test_bad_schedules_are_refused(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        EpochPruning(**options)


STUDY_FILE = """
import tlsearch
from search_spaces.mlp import make_mlp
from search_spaces.optimizers import compile_model
from tlsearch.cv._pruners import EpochPruning, KFoldPruner

def space(trial):
    # three trials that learn, then one whose learning rate is far too small to learn in time
    return {"learning_rate": 0.01 if trial.number < 3 else 1e-7}

def build(params, input_shape, n_classes):
    mlp = {"units": [16], "dropout": 0.0, "activation": "relu", "batch_norm": False}
    optimizer = {"name": "adam", "learning_rate": params["learning_rate"], "weight_decay": None}
    return compile_model(make_mlp(mlp, input_shape, n_classes, rescale=1 / 16), optimizer, n_classes)

study = tlsearch.StudySpec(
    name="epochs", dataset="sklearn:digits", space=space, cv=2, n_trials=4, metric="accuracy",
    model=tlsearch.KerasModel(build, epochs=3, batch_size=64),
    pruner=KFoldPruner(epochs=EpochPruning(eta=2, min_peers=3)))
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_keras_run_stops_a_hopeless_trial_at_an_epoch_and_says_why(tmp_path):
    import pandas as pd

    from tlsearch import cli
    from tlsearch.execution import _driver as driver
    from tlsearch.spec._spec import load_study_file
    from tlsearch.stores._stores import Stores

    path = tmp_path / "study.py"
    path.write_text(STUDY_FILE)
    home = tmp_path / "home"
    study = driver.run(load_study_file(path), stores=Stores(home=home), n_workers=1, progress="off")
    states = [trial.state for trial in study.trials]
    assert states == [TrialState.COMPLETE] * 3 + [TrialState.PRUNED]
    hopeless = study.trials[3]
    reason = hopeless.user_attrs["prune_reason"]
    assert (reason["fold"], reason["epoch"], reason["rank"], reason["n_ranked"]) == (0, 1, 4, 4)
    assert hopeless.user_attrs["n_folds_run"] == 0 and "split0_test_score" not in hopeless.user_attrs
    assert set(hopeless.user_attrs["split0_epoch_scores"]) == {"1"}
    assert all(set(trial.user_attrs["split0_epoch_scores"]) == {"1", "2"} for trial in study.trials[:3])
    table = tmp_path / "t.csv"
    assert cli.main(["trials", "epochs", "--home", str(home), "--format", "csv", "-o", str(table)]) == 0
    shown = pd.read_csv(table).set_index("number")["prune_reason"]
    assert shown[3].startswith("pruned at epoch 1 of fold 0 of 2: ")
    from tlsearch.reading._report import write_report

    page = write_report(study, tmp_path / "report.html").read_text()
    assert "pruned at epoch 1 of fold 0 of 2" in page
