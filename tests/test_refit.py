"""Refit of the best trial, kept as an artifact in the store and loaded back safely in a fresh process."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest

import tlsearch
from tlsearch.errors import TLSearchError, UnsafeModelError
from tlsearch.execution import _driver as driver
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.reading._refit import load_model, refit
from tlsearch.spec._spec import load_study_file
from tlsearch.stores._stores import Stores

pytestmark = pytest.mark.timeout(300)

SKLEARN_STUDY = """
import tlsearch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

def space(trial):
    return {"C": trial.suggest_float("C", 0.01, 10, log=True)}

study = tlsearch.StudySpec(name="wine-refit", dataset="sklearn:wine", space=space,
                           model=tlsearch.SklearnModel(lambda p: make_pipeline(StandardScaler(), LogisticRegression(C=p["C"]))),
                           cv=3, metric="accuracy", n_trials=3)
"""

KERAS_STUDY = """
import keras
import tlsearch

def space(trial):
    return {"units": trial.suggest_int("units", 4, 16)}

def build(params, input_shape, n_classes):
    model = keras.Sequential([keras.Input(input_shape), keras.layers.Dense(params["units"], activation="relu"),
                              keras.layers.Dense(n_classes, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model

study = tlsearch.StudySpec(name="iris-refit", dataset="sklearn:iris", space=space,
                           model=tlsearch.KerasModel(build, epochs=2, batch_size=16), cv=2,
                           metric="accuracy", n_trials=2)
"""

PREDICT = """
import sys, numpy as np, tlsearch
from sklearn.datasets import load_{dataset}
model = tlsearch.load_model(sys.argv[1], home=sys.argv[2])
X = load_{dataset}(return_X_y=True)[0]
np.save(sys.argv[3], np.asarray(model.predict(X)))
"""


def _run_and_refit(tmp_path, source, dataset):
    study_file = tmp_path / "study.py"
    study_file.write_text(source)
    spec = load_study_file(study_file)
    stores = Stores(home=tmp_path / "home")
    driver.run(spec, stores=stores, n_workers=1, progress="off", study_file=study_file)
    record, path = refit(spec.name, stores=stores)
    model = load_model(spec.name, stores=stores)
    from sklearn import datasets

    X = getattr(datasets, f"load_{dataset}")(return_X_y=True)[0]
    before = np.asarray(model.predict(X))
    script = tmp_path / "predict.py"
    script.write_text(PREDICT.format(dataset=dataset))
    out = tmp_path / "predictions.npy"
    subprocess.run([sys.executable, str(script), spec.name, str(stores.home), str(out)], check=True, cwd=tmp_path)
    if before.dtype.kind in "US":  # a classifier's original labels
        np.testing.assert_array_equal(np.load(out), before)
    else:
        np.testing.assert_allclose(np.load(out), before, rtol=1e-6, atol=1e-6)
    return spec, stores, record, path


@pytest.fixture(scope="module")
def sklearn_refit(tmp_path_factory):
    return _run_and_refit(tmp_path_factory.mktemp("sklearn"), SKLEARN_STUDY, "wine")


@pytest.mark.slow
def test_sklearn_refit_round_trip_in_a_fresh_process(sklearn_refit):
    spec, stores, record, path = sklearn_refit
    study = study_attrs.load(stores, spec.name)
    assert record.trial_number == study.best_trial.number and record.format == "skops"
    assert record.params == study.best_trial.params and record.cv_score == study.best_value
    assert path.suffix == ".skops"


@pytest.mark.slow
def test_a_study_of_one_name_in_two_stores_keeps_a_model_file_each(sklearn_refit, mongo_uri, mongo_db_name, capsys):
    from tlsearch import cli

    spec, stores, _, local_path = sklearn_refit
    assert local_path == stores.home / "models" / f"{spec.name}.skops"
    mongo = ["--mongo", mongo_uri, "--database", mongo_db_name, "--home", str(stores.home)]
    assert (
        cli.main(["copy", spec.name, "--home", str(stores.home), "--to", mongo_uri, "--to-database", mongo_db_name])
        == 0
    )
    assert cli.main(["refit", spec.name, *mongo]) == 0
    mongo_path = Path(capsys.readouterr().out.split(": ")[-1].split("\n")[0])
    assert mongo_path.parent.parent == stores.home / "models" and mongo_path.parent.name.startswith("mongodb-")
    assert mongo_path.name == local_path.name and mongo_path.is_file() and local_path.is_file()


@pytest.mark.slow
def test_keras_refit_round_trip_in_a_fresh_process(tmp_path):
    spec, stores, record, path = _run_and_refit(tmp_path, KERAS_STUDY, "iris")
    assert record.format == "keras" and record.classes == ["setosa", "versicolor", "virginica"]
    model = load_model(spec.name, stores=stores)
    from sklearn.datasets import load_iris

    assert set(tlsearch.predict(model, load_iris().data)) <= {"setosa", "versicolor", "virginica"}


@pytest.mark.slow
def test_model_of_a_changed_dataset_is_refused(sklearn_refit):
    spec, stores, record, _ = sklearn_refit
    study = study_attrs.load(stores, spec.name)
    study_attrs.write(study, study_attrs.DATASET_HASH, "0" * 64)
    try:
        with pytest.raises(TLSearchError, match="refit it again"):
            load_model(spec.name, stores=stores)
    finally:
        study_attrs.write(study, study_attrs.DATASET_HASH, record.dataset_hash)


@pytest.mark.slow
def test_tampered_model_is_refused(sklearn_refit, tmp_path):
    spec, stores, record, _ = sklearn_refit
    with open(tmp_path / "tampered.skops", "wb") as f:
        f.write(b"PK not the model")
    with open(tmp_path / "tampered.skops", "rb") as f:
        stores.artifact_store().write(record.artifact_id, f)
    with pytest.raises(UnsafeModelError, match="sha256"):
        load_model(spec.name, stores=stores)


def test_study_without_refit_says_how_to_make_one(tmp_path):
    stores = Stores(home=tmp_path)
    optuna.create_study(study_name="plain", storage=stores.study_storage())
    with pytest.raises(TLSearchError, match="tlsearch refit plain"):
        load_model("plain", stores=stores)


@pytest.mark.slow
def test_test_holdout_is_never_cross_validated_and_scores_the_refit(tmp_path):
    study_file = tmp_path / "study.py"
    study_file.write_text(SKLEARN_STUDY.replace("n_trials=3)", "n_trials=2, holdout=0.25)"))
    spec = load_study_file(study_file)
    stores = Stores(home=tmp_path / "home")
    study = driver.run(spec, stores=stores, n_workers=1, progress="off", study_file=study_file)
    plan = stores.dataset_store().get_fold_plan(study_attrs.read(study)[study_attrs.FOLD_PLAN])
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    kept, held_out = spec.cv_.partition(X, y)
    assert len(held_out) == math.ceil(0.25 * len(X)) and not set(kept) & set(held_out)
    used = {int(i) for train, valid in plan.folds for i in (*train, *valid)}
    assert used == set(kept.tolist()), "cross-validation must use every row but the hold-out, and only those"
    record, _ = refit(spec.name, stores=stores)
    assert record.test_score is not None and 0.5 < record.test_score <= 1.0


def _keras_file(tmp_path, *layers):
    import keras

    model = keras.Sequential([keras.Input((4,)), *layers, keras.layers.Dense(2)])
    path = tmp_path / "model.keras"
    model.save(path)
    return path


@pytest.mark.slow
def test_keras_model_with_a_lambda_layer_is_refused(tmp_path):
    import keras

    from tlsearch.reading._refit import load_model_file

    path = _keras_file(tmp_path, keras.layers.Lambda(lambda x: x * 2))
    with pytest.raises(UnsafeModelError, match="Lambda"):
        load_model_file(path)


@pytest.mark.slow
def test_keras_model_with_an_unregistered_custom_object_is_refused(tmp_path):
    import json
    import zipfile

    import keras

    from tlsearch.reading._refit import load_model_file

    path = _keras_file(tmp_path, keras.layers.Dense(3))
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(files["config.json"])
    config["config"]["layers"][0].update(module="attacker.layers", class_name="Boom", registered_name="Boom")
    files["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    with pytest.raises(UnsafeModelError, match="attacker.layers.Boom"):
        load_model_file(path)


MEDALS_STUDY = """
import tlsearch
from sklearn.linear_model import LogisticRegression

study = tlsearch.StudySpec(name="medals", dataset="medals", model=tlsearch.SklearnModel(lambda p: LogisticRegression()),
                           space=lambda trial: {}, cv=2, metric="accuracy", n_trials=1)
"""


@pytest.mark.slow
def test_the_refit_model_predicts_the_original_labels(tmp_path):
    from tlsearch import cli

    rng = np.random.default_rng(0)
    score = rng.normal(size=60)
    medal = np.where(score > 0.5, "gold", np.where(score > -0.5, "silver", "bronze"))
    csv = tmp_path / "medals.csv"
    csv.write_text("score,medal\n" + "".join(f"{s},{m}\n" for s, m in zip(score, medal)))
    home = str(tmp_path / "home")
    assert cli.main(["dataset", "push", "medals", str(csv), "--label", "medal", "--home", home, "-q"]) == 0
    study_file = tmp_path / "study.py"
    study_file.write_text(MEDALS_STUDY)
    stores = Stores(home=tmp_path / "home")
    driver.run(load_study_file(study_file), stores=stores, n_workers=1, progress="off", study_file=study_file)
    record, _ = refit("medals", stores=stores)
    assert record.classes == ["bronze", "gold", "silver"]
    model = load_model("medals", stores=stores)
    assert list(model.classes_) == ["bronze", "gold", "silver"]
    predicted = tlsearch.predict(model, score.reshape(-1, 1))
    assert set(predicted) <= {"bronze", "gold", "silver"} and (predicted == medal).mean() > 0.8
