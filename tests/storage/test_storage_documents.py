"""What MongoStorage writes: readable documents, and values that come back exactly as they went in."""

from __future__ import annotations

import math
from datetime import datetime

import optuna
import pymongo
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.study import StudyDirection
from optuna.trial import TrialState

from tlsearch.storage import MongoStorage
from tlsearch.storage import _codec as codec

ODD_KEYS = ["a.b", "$where", "a:b", "with space", "", "%", "%2E", "..", "$", "nul\x00byte", "ünïcødé.$"]


def reopen(mongo_uri: str, mongo_db_name: str) -> MongoStorage:
    """A second storage on the same database: what another process would read, with no cache."""
    return MongoStorage(mongo_uri, mongo_db_name)


def same(a, b) -> bool:
    """Equality that counts NaN equal to NaN, through lists and dicts."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def test_nan_and_infinities_round_trip(mongo_storage, mongo_uri, mongo_db_name):
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE, StudyDirection.MAXIMIZE])
    special = [float("nan"), float("inf"), float("-inf")]
    trial_id = mongo_storage.create_new_trial(study_id)
    for step, value in enumerate(special):
        mongo_storage.set_trial_intermediate_value(trial_id, step, value)
    attr = {"values": special, "nested": {"nan": float("nan"), "inf": [float("inf")]}}
    mongo_storage.set_trial_user_attr(trial_id, "attr", attr)
    mongo_storage.set_trial_system_attr(trial_id, "attr", attr)
    mongo_storage.set_study_user_attr(study_id, "attr", attr)
    mongo_storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [float("inf"), float("-inf")])

    storage = reopen(mongo_uri, mongo_db_name)
    trial = storage.get_trial(trial_id)
    assert trial.values == [float("inf"), float("-inf")]
    assert same(trial.intermediate_values, dict(enumerate(special)))
    assert same(trial.user_attrs["attr"], attr) and same(trial.system_attrs["attr"], attr)
    assert same(storage.get_study_user_attrs(study_id)["attr"], attr)
    nan_trial = storage.create_new_trial(study_id)
    storage.set_trial_state_values(nan_trial, TrialState.COMPLETE, [float("nan"), 1.0])
    assert math.isnan(reopen(mongo_uri, mongo_db_name).get_trial(nan_trial).values[0])


@pytest.mark.parametrize("key", ODD_KEYS)
def test_odd_attribute_keys_and_param_names_round_trip(mongo_storage, mongo_uri, mongo_db_name, key):
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    trial_id = mongo_storage.create_new_trial(study_id)
    value = {key: [1, {key: "nested"}], "plain": key}
    mongo_storage.set_trial_user_attr(trial_id, key, value)
    mongo_storage.set_trial_system_attr(trial_id, key, value)
    mongo_storage.set_study_user_attr(study_id, key, value)
    mongo_storage.set_study_system_attr(study_id, key, value)
    mongo_storage.set_trial_param(trial_id, key, 1.0, CategoricalDistribution([key, "other"]))

    storage = reopen(mongo_uri, mongo_db_name)
    trial = storage.get_trial(trial_id)
    assert trial.user_attrs == {key: value} and trial.system_attrs == {key: value}
    assert trial.params == {key: "other"}
    assert storage.get_study_user_attrs(study_id) == {key: value}
    assert storage.get_study_system_attrs(study_id) == {key: value}


def test_attribute_values_follow_json(mongo_storage, mongo_uri, mongo_db_name):
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    trial_id = mongo_storage.create_new_trial(study_id)
    mongo_storage.set_trial_user_attr(trial_id, "big", 2**80)
    mongo_storage.set_trial_user_attr(trial_id, "tuple", (1, "a", None, True))
    mongo_storage.set_trial_user_attr(trial_id, "keys", {1: "one", 2.5: "x", None: "null", False: "false"})
    mongo_storage.set_trial_user_attr(trial_id, "marker", {"%int": "not a number"})
    with pytest.raises(TypeError, match="JSON serializable"):
        mongo_storage.set_trial_user_attr(trial_id, "set", {1, 2})

    attrs = reopen(mongo_uri, mongo_db_name).get_trial(trial_id).user_attrs
    assert attrs == {
        "big": 2**80,
        "tuple": [1, "a", None, True],
        "keys": {"1": "one", "2.5": "x", "null": "null", "false": "false"},
        "marker": {"%int": "not a number"},
    }
    assert type(attrs["big"]) is int


def test_datetimes_round_trip_in_optunas_convention(mongo_storage, mongo_uri, mongo_db_name):
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    start, complete = datetime(2024, 2, 29, 23, 59, 59, 123456), datetime(2024, 3, 1, 0, 0, 1, 999999)
    template = optuna.trial.create_trial(state=TrialState.COMPLETE, value=1.0)
    template.datetime_start, template.datetime_complete = start, complete
    trial_id = mongo_storage.create_new_trial(study_id, template)
    running_id = mongo_storage.create_new_trial(study_id)

    storage = reopen(mongo_uri, mongo_db_name)
    trial = storage.get_trial(trial_id)
    assert (trial.datetime_start, trial.datetime_complete) == (start, complete)  # naive local time, exact
    running = storage.get_trial(running_id)
    assert running.datetime_start.tzinfo is None
    assert abs((datetime.now() - running.datetime_start).total_seconds()) < 60


def test_documents_are_readable(mongo_storage, mongo_uri, mongo_db_name):
    study = optuna.create_study(study_name="readable", storage=mongo_storage, directions=["minimize", "maximize"])
    trial = study.ask()
    trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    trial.suggest_int("layers", 1, 4)
    trial.suggest_categorical("activation", ["relu", "tanh"])
    mongo_storage.set_trial_intermediate_value(trial._trial_id, 0, 0.5)  # Trial.report is single-objective only
    trial.set_user_attr("split0.test_score", 0.9)
    study.tell(trial, [0.25, 0.75])

    db = pymongo.MongoClient(mongo_uri)[mongo_db_name]
    study_document = db["studies"].find_one({"name": "readable"})
    assert study_document["directions"] == ["MINIMIZE", "MAXIMIZE"]
    assert set(study_document["param_distributions"]) == {"lr", "layers", "activation"}
    document = db["trials"].find_one({"study_id": study_document["_id"], "number": 0})
    assert document["state"] == "COMPLETE" and document["values"] == [0.25, 0.75]
    assert document["params"]["activation"]["value"] in ("relu", "tanh")
    assert document["params"]["layers"]["distribution"] == {
        "name": "IntDistribution",
        "attributes": {"log": False, "step": 1, "low": 1, "high": 4},
    }
    assert document["intermediate_values"] == {"0": 0.5}
    assert document["user_attrs"] == {"split0%2Etest_score": 0.9}
    assert isinstance(document["datetime_start"], datetime) and isinstance(document["datetime_complete"], datetime)
    # Queries people write find what they expect.
    assert db["trials"].count_documents({"state": "COMPLETE", "params.lr.value": {"$lt": 1}}) == 1


def test_trial_ids_say_where_a_trial_lives(mongo_storage):
    first = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    second = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    mongo_storage.create_new_trial(second)
    trial_id = mongo_storage.create_new_trial(second)
    assert codec.study_id_and_number(trial_id) == (second, 1)
    assert mongo_storage.get_trial_id_from_study_id_trial_number(second, 1) == trial_id
    with pytest.raises(KeyError):
        mongo_storage.get_trial_id_from_study_id_trial_number(first, 1)


def test_incompatible_distributions_are_refused_across_processes(mongo_storage, mongo_uri, mongo_db_name):
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    mongo_storage.set_trial_param(mongo_storage.create_new_trial(study_id), "x", 0.5, FloatDistribution(0, 1))
    other = reopen(mongo_uri, mongo_db_name)
    trial_id = other.create_new_trial(study_id)
    other.set_trial_param(trial_id, "x", 5.0, FloatDistribution(0, 10))  # compatible: another range
    with pytest.raises(ValueError):
        other.set_trial_param(trial_id, "x", 1, IntDistribution(0, 10))
    template = optuna.trial.create_trial(
        params={"x": "a"}, distributions={"x": CategoricalDistribution(["a"])}, value=1.0
    )
    with pytest.raises(ValueError):
        other.create_new_trial(study_id, template)


def test_several_user_attrs_in_one_write(mongo_storage, mongo_uri, mongo_db_name):
    study_id = mongo_storage.create_new_study([StudyDirection.MINIMIZE])
    trial_id = mongo_storage.create_new_trial(study_id)
    scores = {f"split{k}_test_score": 0.9 + k / 100 for k in range(5)} | {"mean_fit_time": 1.5, "a.b": [1]}
    mongo_storage.set_trial_user_attrs(trial_id, scores)
    mongo_storage.set_trial_user_attrs(trial_id, {})
    assert reopen(mongo_uri, mongo_db_name).get_trial(trial_id).user_attrs == scores
    mongo_storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [1.0])
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        mongo_storage.set_trial_user_attrs(trial_id, {"late": 1})
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        mongo_storage.set_trial_user_attrs(trial_id, {})
