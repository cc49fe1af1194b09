"""One trial, k folds (scikit-learn and custom loops; Keras is in test_models.py): results, pruning, failures.

Each trial runs as in production: a study on the embedded default bound to its dataset and fold plan by the
driver, evaluated as a worker evaluates it (tests/stored_study.py), its folds the host cache's."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState
from sklearn.datasets import load_iris
from sklearn.dummy import DummyClassifier
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import make_scorer, mean_absolute_error
from sklearn.model_selection import KFold, StratifiedKFold, cross_validate

from tests.stored_study import StoredStudy
from tlsearch.cv._evaluate import AutoKFold, describe_failure, is_infrastructure_error
from tlsearch.cv._pruners import KFoldPruner
from tlsearch.errors import InvalidSpaceError, NonFiniteLossError, NonFiniteScoreError
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.seeds import derive_seed
from tlsearch.spec._spec import CustomLoop, SklearnModel, StudySpec

optuna.logging.set_verbosity(optuna.logging.WARNING)


def logistic(params):
    return LogisticRegression(C=params["C"], max_iter=3000)


@pytest.mark.slow
def test_fold_scores_equal_cross_validate(digits, tmp_path):
    splitter = StratifiedKFold(4, shuffle=True, random_state=3)
    spec = StudySpec(
        name="exact",
        dataset="sklearn:digits",
        space={"C": 0.3},
        model=SklearnModel(logistic),
        cv=splitter,
        metric="f1_macro",
        return_train_score=True,
    )
    stored = StoredStudy(spec, tmp_path)
    trial = stored.trial()
    expected = cross_validate(
        LogisticRegression(C=0.3, max_iter=3000),
        np.asarray(digits["X"]),
        np.asarray(digits["y"]),
        cv=splitter,
        scoring="f1_macro",
        return_train_score=True,
    )
    attrs = trial.user_attrs
    for k in range(4):
        assert attrs[f"split{k}_test_score"] == pytest.approx(expected["test_score"][k], abs=1e-12)
        assert attrs[f"split{k}_train_score"] == pytest.approx(expected["train_score"][k], abs=1e-12)
        assert attrs[f"split{k}_fit_time"] > 0
    assert attrs["mean_test_score"] == pytest.approx(np.mean(expected["test_score"]), abs=1e-12)
    assert attrs["std_test_score"] == pytest.approx(np.std(expected["test_score"]), abs=1e-12)
    assert attrs["mean_train_score"] == pytest.approx(np.mean(expected["train_score"]), abs=1e-12)
    assert trial.value == attrs["mean_test_score"]
    assert attrs["dataset_hash"] == stored.attrs[study_attrs.DATASET_HASH]
    assert attrs["fold_plan_hash"] == stored.attrs[study_attrs.FOLD_PLAN]
    assert attrs["n_splits"] == 4 and attrs["n_folds_run"] == 4
    for key in ("mean_fit_time", "std_fit_time", "mean_score_time", "std_score_time"):
        assert attrs[key] >= 0
    running = np.cumsum(expected["test_score"]) / np.arange(1, 5)
    assert [trial.intermediate_values[k] for k in range(4)] == pytest.approx(running, abs=1e-12)


def test_default_scoring_and_callable_scorer_equal_cross_validate(tmp_path):
    X, y = load_iris(return_X_y=True)
    splitter = KFold(3, shuffle=True, random_state=0)
    scorer = make_scorer(mean_absolute_error, greater_is_better=False)
    spec = StudySpec(
        name="ridge",
        dataset="sklearn:iris",
        space={"alpha": 2.0},
        model=SklearnModel(lambda p: Ridge(alpha=p["alpha"])),
        cv=splitter,
    )
    trial = StoredStudy(spec, tmp_path).trial()
    expected = cross_validate(Ridge(alpha=2.0), X, y, cv=splitter)["test_score"]  # scoring=None: estimator.score
    assert [trial.user_attrs[f"split{k}_test_score"] for k in range(3)] == pytest.approx(expected, abs=1e-12)
    spec = StudySpec(
        name="ridge-mae",
        dataset="sklearn:iris",
        space={"alpha": 2.0},
        model=SklearnModel(lambda p: Ridge(alpha=p["alpha"])),
        cv=splitter,
        metric=scorer,
    )
    trial = StoredStudy(spec, tmp_path).trial()
    expected = cross_validate(Ridge(alpha=2.0), X, y, cv=splitter, scoring=scorer)["test_score"]
    assert [trial.user_attrs[f"split{k}_test_score"] for k in range(3)] == pytest.approx(expected, abs=1e-12)
    assert spec.directions_ == ("maximize",)


@pytest.mark.slow
def test_multi_objective_names_results_by_metric(digits, tmp_path):
    splitter = StratifiedKFold(3, shuffle=True, random_state=0)
    spec = StudySpec(
        name="multi",
        dataset="sklearn:digits",
        space={"C": 0.1},
        model=SklearnModel(logistic),
        cv=splitter,
        metric=["accuracy", "neg_log_loss"],
        direction=["maximize", "maximize"],
    )
    trial = StoredStudy(spec, tmp_path).trial()
    expected = cross_validate(
        logistic({"C": 0.1}),
        np.asarray(digits["X"]),
        np.asarray(digits["y"]),
        cv=splitter,
        scoring=["accuracy", "neg_log_loss"],
    )
    for name in ("accuracy", "neg_log_loss"):
        scores = [trial.user_attrs[f"split{k}_test_{name}"] for k in range(3)]
        assert scores == pytest.approx(expected[f"test_{name}"], abs=1e-12)
        assert trial.user_attrs[f"mean_test_{name}"] == pytest.approx(np.mean(scores))
    assert trial.values == [trial.user_attrs["mean_test_accuracy"], trial.user_attrs["mean_test_neg_log_loss"]]
    assert trial.intermediate_values == {}  # Optuna cannot report or prune multi-objective trials


def choose_model(params):
    return DummyClassifier() if params["model"] == "dummy" else LogisticRegression(C=params["model"], max_iter=3000)


@pytest.mark.slow
def test_hopeless_trial_is_pruned_after_its_first_fold(tmp_path):
    spec = StudySpec(
        name="prune",
        dataset="sklearn:digits",
        model=SklearnModel(choose_model),
        space=lambda t: {"model": t.suggest_categorical("model", [0.03, 0.1, 0.3, "dummy"])},
        pruner=KFoldPruner(n_startup_trials=3),
        cv=4,
    )
    stored = StoredStudy(spec, tmp_path)
    for model in (0.03, 0.1, 0.3, "dummy"):  # three good models: copies of one would measure no noise
        stored.study.enqueue_trial({"model": model})
    good = [stored.trial() for _ in range(3)]
    assert all(trial.state == TrialState.COMPLETE for trial in good)
    hopeless = stored.trial()
    assert hopeless.state == TrialState.PRUNED
    assert list(hopeless.intermediate_values) == [0]
    attrs = hopeless.user_attrs
    assert "split0_test_score" in attrs and "split1_test_score" not in attrs
    assert attrs["n_folds_run"] == 1 and attrs["mean_test_score"] == attrs["split0_test_score"]
    assert attrs["prune_reason"]["fold"] == 0 and attrs["prune_reason"]["reference_trial"] in (0, 1, 2)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_wilcoxon_pruner_gets_each_fold_score(tmp_path):
    spec = StudySpec(
        name="wilcoxon",
        dataset="sklearn:digits",
        space={"C": 0.1},
        model=SklearnModel(logistic),
        pruner=optuna.pruners.WilcoxonPruner(),
        cv=3,
    )
    trial = StoredStudy(spec, tmp_path).trial()
    assert [trial.intermediate_values[k] for k in range(3)] == [
        trial.user_attrs[f"split{k}_test_score"] for k in range(3)
    ]


class WeightRecorder(LogisticRegression):
    seen: list = []

    def fit(self, X, y, sample_weight=None):
        WeightRecorder.seen.append((len(X), sample_weight))
        return super().fit(X, y, sample_weight=sample_weight)


def test_sample_weight_and_groups_are_used(tmp_path):
    """A dataset pushed with groups and sample weights: each fold trains on whole groups, with the weights."""
    X, y = load_iris(return_X_y=True)
    groups = np.arange(len(y)) // 10
    arrays = {"X": X, "y": y, "sample_weight": groups + 1.0, "groups": groups}  # weight: which group a row is
    spec = StudySpec(
        name="weights",
        dataset="iris-weighted",
        space={},
        cv=3,
        model=SklearnModel(lambda p: WeightRecorder(max_iter=1000)),
    )
    WeightRecorder.seen.clear()
    StoredStudy(spec, tmp_path, arrays).trial()
    assert len(WeightRecorder.seen) == 3 and all(n == len(w) for n, w in WeightRecorder.seen)
    held_out = [set(groups) - {int(w) - 1 for w in weights} for _, weights in WeightRecorder.seen]
    assert sorted(g for fold in held_out for g in fold) == sorted(set(groups)), held_out  # each group once


def test_custom_loop_gets_fold_arrays_and_reports_a_curve(tmp_path):
    seen = []

    def loop(params, fold, report):
        seen.append((fold.index, fold.seed, fold.x_train.shape, fold.x_validation.shape, fold.y_train.shape))
        for epoch in range(3):
            report(0.1 * epoch, epoch)
        return float(len(fold.y_validation))

    spec = StudySpec(name="custom", dataset="sklearn:digits", space={}, model=CustomLoop(loop), cv=3)
    trial = StoredStudy(spec, tmp_path).trial()
    assert [index for index, *_ in seen] == [0, 1, 2]
    assert sum(valid_shape[0] for _, _, _, valid_shape, _ in seen) == 1797
    assert trial.user_attrs["split1_curve"] == [[0, 0.0], [1, 0.1], [2, 0.2]]
    assert trial.user_attrs["split1_n_epochs"] == 3
    assert trial.value == pytest.approx(1797 / 3)
    assert seen[0][1] == derive_seed(0, "custom", trial.number, 0)  # same study, trial and fold: same seed
    assert len({s[1] for s in seen}) == 3


def test_a_custom_loop_reading_the_old_fold_names_still_works_with_a_warning(tmp_path):
    def loop(params, fold, report):
        return float(len(fold.y_valid) + 0 * fold.x_valid.shape[0])

    spec = StudySpec(name="old-names", dataset="sklearn:digits", space={}, model=CustomLoop(loop), cv=3)
    with pytest.warns(
        DeprecationWarning, match=r"Fold.y_valid is deprecated and removed in tlsearch 3\.0: use Fold.y_validation"
    ):
        trial = StoredStudy(spec, tmp_path).trial()
    assert trial.value == pytest.approx(1797 / 3)


def test_non_finite_score_fails_the_trial(tmp_path):
    spec = StudySpec(name="nan", dataset="sklearn:digits", space={}, model=CustomLoop(lambda p, f, r: float("nan")))
    with pytest.raises(NonFiniteScoreError, match="fold 0: test score is nan"):
        StoredStudy(spec, tmp_path).evaluate()


def test_errors_in_user_code_propagate_and_are_described(tmp_path):
    def broken_factory(params):
        raise ValueError("no such kernel: 'rbff'")

    spec = StudySpec(name="broken", dataset="sklearn:digits", space={}, model=SklearnModel(broken_factory))
    with pytest.raises(ValueError) as raised:
        StoredStudy(spec, tmp_path).evaluate()
    description = describe_failure(raised.value)
    assert description["error_type"] == "ValueError"
    assert description["error_message"] == "no such kernel: 'rbff'"
    assert description["error_retryable"] is False
    assert "broken_factory" in description["error_traceback"]

    spec = StudySpec(name="not-a-dict", dataset="sklearn:digits", space=lambda t: 3, model=SklearnModel(logistic))
    with pytest.raises(InvalidSpaceError, match="returned int"):
        StoredStudy(spec, tmp_path).evaluate()


class ResourceExhaustedError(Exception):
    """Stands in for tensorflow's out-of-memory error, matched by name so the engine never imports tensorflow."""


class KilledWorker(Exception):
    pass


@pytest.mark.parametrize(
    "exc, retryable",
    [
        (ConnectionResetError("peer reset"), True),
        (TimeoutError(), True),
        (MemoryError(), True),
        (ResourceExhaustedError("OOM when allocating tensor"), True),
        (RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"), True),
        (KilledWorker("worker lost"), True),
        (ValueError("bad learning rate"), False),
        (NonFiniteLossError("training loss is nan"), False),
        (KeyError("units"), False),
        (optuna.TrialPruned(), False),
    ],
)
def test_infrastructure_errors_are_retryable(exc, retryable):
    assert is_infrastructure_error(exc) is retryable
    assert describe_failure(exc)["error_retryable"] is retryable


def test_infrastructure_error_found_in_the_cause_chain():
    import pymongo.errors

    try:
        try:
            raise pymongo.errors.AutoReconnect("connection closed")
        except pymongo.errors.AutoReconnect as inner:
            raise RuntimeError("could not save user attribute") from inner
    except RuntimeError as outer:
        assert is_infrastructure_error(outer)
        assert describe_failure(outer)["error_type"] == "RuntimeError"
    assert describe_failure(pymongo.errors.AutoReconnect("x"))["error_type"] == "pymongo.errors.AutoReconnect"


def test_auto_kfold_stratifies_classes_and_plain_splits_continuous_targets():
    y = np.array([0] * 80 + [1] * 20)
    X = np.zeros((100, 1))
    for _, valid in AutoKFold(5).split(X, y):
        assert np.sum(y[valid] == 1) == 4
    assert type(AutoKFold(5).splitter_for(y)).__name__ == "StratifiedKFold"
    assert type(AutoKFold(5).splitter_for(np.linspace(0, 1, 100))).__name__ == "KFold"
    assert type(AutoKFold(5).splitter_for(np.arange(100.0))).__name__ == "KFold"  # whole-number floats: a target
    assert type(AutoKFold(5).splitter_for(np.array(["a", "b"] * 50))).__name__ == "StratifiedKFold"
    assert type(AutoKFold(5).splitter_for(y, groups=np.arange(100) // 5)).__name__ == "StratifiedGroupKFold"
    assert type(AutoKFold(5).splitter_for(np.linspace(0, 1, 100), np.arange(100))).__name__ == "GroupKFold"
    assert repr(AutoKFold(3)) == "AutoKFold(n_splits=3, random_state=0, shuffle=True)"
    first = [valid.tolist() for _, valid in AutoKFold(5).split(X, y)]
    assert first == [valid.tolist() for _, valid in AutoKFold(5).split(X, y)]


def test_a_trial_stores_its_params_in_one_write_and_each_fold_in_one_the_last_with_the_summaries(
    tmp_path, mongo_uri, mongo_db_name, mongo_client
):
    """Evaluated as a worker evaluates it, on MongoDB, where every write to a trial adds 1 to its `version`: a
    3-parameter, 3-fold trial writes its parameters once, its first two folds once each (results and report),
    and its last fold with the summaries, 4 writes in all (10, one each)."""
    from tlsearch.stores._stores import Stores

    space = lambda trial: {  # noqa: E731
        "a": trial.suggest_float("a", 0, 1),
        "b": trial.suggest_int("b", 0, 3),
        "c": trial.suggest_categorical("c", ["x", "y"]),
    }
    spec = StudySpec(name="w", dataset="sklearn:iris", cv=3, space=space, model=CustomLoop(lambda p, fold, r: p["a"]))
    stored = StoredStudy(spec, tmp_path, stores=Stores(mongo_uri, mongo_db_name, tmp_path))
    trial = stored.study.ask()
    trials = mongo_client[mongo_db_name].trials
    version = trials.find_one({"_id": trial._trial_id}).get("version", 0)
    stored.study.tell(trial, stored.evaluate_asked(trial))
    assert trials.find_one({"_id": trial._trial_id})["version"] - version == 4 + 1  # + the finishing write
    told = stored.study.trials[trial.number]
    assert set(told.params) == {"a", "b", "c"} and told.intermediate_values.keys() == {0, 1, 2}
    assert told.user_attrs["n_folds_run"] == 3 and told.user_attrs["mean_test_score"] == told.params["a"]
    assert all(f"split{k}_test_score" in told.user_attrs for k in range(3))
