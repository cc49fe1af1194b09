"""Search spaces: sampling, composition, validation before a study starts, and the shipped spaces."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from search_spaces.cnn import cnn
from search_spaces.mlp import mlp
from search_spaces.optimizers import optimizer
from search_spaces.tree_ensembles import gradient_boosting, make_gradient_boosting, make_random_forest, random_forest
from tlsearch.errors import InvalidSpaceError, TLSearchError
from tlsearch.spaces import check_space, sample, scoped

optuna.logging.set_verbosity(optuna.logging.WARNING)


def new_trial(seed: int = 0) -> optuna.Trial:
    return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()


def test_dict_space_samples_distributions_and_passes_constants_through():
    space = {
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "layers": IntDistribution(1, 3),
        "act": CategoricalDistribution(["relu", "tanh"]),
        "epochs": 5,
    }
    trial = new_trial()
    params = sample(trial, space)
    assert 1e-4 <= params["lr"] <= 1e-1 and params["layers"] in (1, 2, 3) and params["act"] in ("relu", "tanh")
    assert params["epochs"] == 5
    assert set(trial.params) == {"lr", "layers", "act"}


def test_function_spaces_compose_under_prefixes():
    def outer(trial):
        return {
            "head": inner(scoped(trial, "head")),
            "body": inner(scoped(trial, "body")),
            "batch": trial.suggest_categorical("batch", [32, 64]),
        }

    def inner(trial):
        return {"units": trial.suggest_int("units", 8, 64)}

    trial = new_trial()
    params = sample(trial, outer)
    assert set(trial.params) == {"head.units", "body.units", "batch"}
    assert params["head"]["units"] == trial.params["head.units"]
    nested = scoped(scoped(trial, "a"), "b")
    nested.suggest_float("x", 0, 1)
    assert "a.b.x" in trial.params


def test_conditional_space_is_define_by_run():
    params = [optimizer(new_trial(seed)) for seed in range(20)]
    sgd = [p for p in params if p["name"] == "sgd"]
    adam = [p for p in params if p["name"] == "adam"]
    assert sgd and adam
    assert all("momentum" in p for p in sgd) and not any("momentum" in p for p in adam)


@pytest.mark.parametrize(
    "space, parameter, words",
    [
        (lambda t: {"x": t.suggest_float("x", 1.0, 0.5)}, "x", "low"),
        (lambda t: {"lr": t.suggest_float("lr", 0.0, 1.0, log=True)}, "lr", "log"),
        (lambda t: {"n": t.suggest_int("n", 10, 1)}, "n", "low"),
        (lambda t: {"act": t.suggest_categorical("act", [])}, "act", "choices"),
        (lambda t: {"u": scoped(t, "mlp").suggest_int("units", 0, 8, log=True)}, "mlp.units", "log"),
    ],
)
def test_unsampleable_parameter_is_named_with_the_space(space, parameter, words):
    with pytest.raises(InvalidSpaceError) as raised:
        check_space(space, "my-space")
    message = str(raised.value)
    assert "'my-space'" in message and f"'{parameter}'" in message and words in message.lower()
    assert isinstance(raised.value, TLSearchError)


def test_non_dict_return_and_broken_space_fail_with_the_space_name():
    with pytest.raises(InvalidSpaceError, match="'s1' returned list"):
        check_space(lambda t: [t.suggest_float("x", 0, 1)], "s1")
    with pytest.raises(InvalidSpaceError, match="'s2' failed while sampling: KeyError"):
        check_space(lambda t: {}["missing"], "s2")
    with pytest.raises(InvalidSpaceError, match="'s3' must be a function"):
        check_space(42, "s3")


def test_conditional_branch_errors_are_found_by_sampling_several_times():
    def space(trial):
        if trial.suggest_categorical("kind", ["a", "b"]) == "b":
            return {"y": trial.suggest_float("y", 2.0, 1.0)}
        return {}

    with pytest.raises(InvalidSpaceError, match="'y'"):
        check_space(space, "branchy")


def test_check_space_leaves_no_trace_and_accepts_good_spaces():
    check_space({"c": FloatDistribution(0.1, 10, log=True), "fixed": 3}, "dict-space")
    for space in (optimizer, mlp, cnn, random_forest, gradient_boosting):
        check_space(space, space.__name__)


def test_shipped_spaces_return_documented_keys():
    trial = new_trial(3)
    network = mlp(trial, max_layers=2)
    assert set(network) == {"units", "dropout", "activation", "batch_norm"} and 1 <= len(network["units"]) <= 2
    assert trial.params["mlp.n_layers"] == len(network["units"])
    conv = cnn(trial)
    assert set(conv) == {"filters", "kernel_size", "pooling", "dropout", "dense_units"}
    opt = optimizer(trial, names=("rmsprop",))
    assert opt["name"] == "rmsprop" and "rho" in opt


def test_scikit_learn_space_builds_estimators():
    forest = make_random_forest(random_forest(new_trial()))
    assert forest.get_params()["random_state"] == 0
    boosting = make_gradient_boosting(gradient_boosting(new_trial()), task="regression")
    assert type(boosting).__name__ == "HistGradientBoostingRegressor"
