"""MongoStorage with the rest of Optuna: create/load/copy studies across storages, and optuna-dashboard."""

from __future__ import annotations

import io
import json
from wsgiref.util import setup_testing_defaults

import optuna
import pytest
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from tlsearch.storage import MongoStorage


def objective(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", -5, 5)
    layers = trial.suggest_int("layers", 1, 3)
    trial.suggest_categorical("optimizer", ["adam", "sgd"])
    trial.set_user_attr("fold.scores", [x, x / 2])
    for step in range(3):
        trial.report(x * x + step, step)
    if layers == 3 and x > 4:
        raise optuna.TrialPruned()
    return x * x


def summary(study: optuna.Study) -> list[tuple]:
    return [
        (
            t.number,
            t.state,
            t.values,
            t.params,
            t.distributions,
            t.user_attrs,
            t.intermediate_values,
            t.datetime_start,
            t.datetime_complete,
        )
        for t in study.get_trials()
    ]


def test_create_optimize_and_load(mongo_storage, mongo_uri, mongo_db_name):
    import tlsearch

    assert tlsearch.MongoStorage is MongoStorage
    study = optuna.create_study(study_name="eco", storage=mongo_storage, sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(objective, n_trials=15)
    with pytest.raises(optuna.exceptions.DuplicatedStudyError):
        optuna.create_study(study_name="eco", storage=mongo_storage)

    loaded = optuna.load_study(study_name="eco", storage=MongoStorage(mongo_uri, mongo_db_name))
    assert summary(loaded) == summary(study)
    assert loaded.best_trial.number == study.best_trial.number
    assert optuna.get_all_study_names(mongo_storage) == ["eco"]
    with pytest.raises(KeyError):
        optuna.load_study(study_name="missing", storage=mongo_storage)


@pytest.mark.parametrize("other_kind", ["rdb", "journal"])
def test_copy_study_to_and_from_optunas_storages(mongo_storage, tmp_path, other_kind):
    other = (
        RDBStorage(f"sqlite:///{tmp_path}/studies.sqlite3")
        if other_kind == "rdb"
        else JournalStorage(JournalFileBackend(str(tmp_path / "studies.journal")))
    )
    source = optuna.create_study(study_name="source", storage=other, directions=["minimize"])
    source.set_user_attr("dataset", "digits")
    source.optimize(objective, n_trials=12)

    optuna.copy_study(from_study_name="source", from_storage=other, to_storage=mongo_storage)
    in_mongo = optuna.load_study(study_name="source", storage=mongo_storage)
    assert summary(in_mongo) == summary(source)
    assert in_mongo.user_attrs == {"dataset": "digits"}
    assert {t.state for t in in_mongo.get_trials()} >= {TrialState.COMPLETE}

    optuna.copy_study(from_study_name="source", from_storage=mongo_storage, to_storage=other, to_study_name="back")
    assert summary(optuna.load_study(study_name="back", storage=other)) == summary(source)


def test_optuna_dashboard_lists_studies_and_trials(mongo_storage):
    from optuna_dashboard import wsgi

    study = optuna.create_study(study_name="shown", storage=mongo_storage)
    study.optimize(objective, n_trials=5)
    app = wsgi(mongo_storage)

    studies = call(app, "/api/studies")["study_summaries"]
    assert [s["study_name"] for s in studies] == ["shown"]
    detail = call(app, f"/api/studies/{studies[0]['study_id']}")
    assert [trial["number"] for trial in detail["trials"]] == list(range(5))
    assert detail["trials"][0]["params"]
    assert len(detail["best_trials"]) == 1


def call(app, path: str) -> dict:
    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    assert status[0].startswith("200"), (status, body[:500])
    return json.loads(body)
