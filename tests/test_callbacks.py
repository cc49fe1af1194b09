"""Callbacks: Optuna callbacks run by the driver (optuna-integration's MLflowCallback into a real local MLflow
store), and per-fold Keras callbacks (one log per trial and fold)."""

from __future__ import annotations

import optuna
import pytest

import tlsearch
from tlsearch.execution import _driver as driver
from tlsearch.stores._stores import Stores

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _fit(params, fold, report):
    return params["x"] + 0.1 * fold.index


def test_mlflow_callback_logs_each_trial_with_params_and_fold_scores(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    from optuna_integration.mlflow import MLflowCallback

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    seen = []
    spec = tlsearch.StudySpec(
        name="tracked",
        dataset="sklearn:iris",
        space=lambda t: {"x": t.suggest_float("x", 0, 1)},
        model=tlsearch.CustomLoop(_fit),
        cv=3,
        metric="accuracy",
        direction="maximize",
        n_trials=3,
        callbacks=[
            MLflowCallback(tracking_uri=uri, metric_name="mean_test_accuracy"),
            lambda study, trial: seen.append((trial.number, trial.user_attrs.get("split2_test_score"))),
        ],
    )
    study = driver.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=1, progress="off")

    assert sorted(n for n, _ in seen) == [0, 1, 2] and all(score is not None for _, score in seen)
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    [experiment] = client.search_experiments(filter_string="name = 'tracked'")
    runs = {int(r.data.tags["number"]): r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == [0, 1, 2]
    for trial in study.trials:
        run = runs[trial.number]
        assert float(run.data.params["x"]) == pytest.approx(trial.params["x"])
        assert run.data.metrics["mean_test_accuracy"] == pytest.approx(trial.value)
        for k in range(3):  # the cv_results_ user attributes come along as tags
            assert float(run.data.tags[f"split{k}_test_score"]) == pytest.approx(trial.params["x"] + 0.1 * k)
        assert float(run.data.tags["mean_test_score"]) == pytest.approx(trial.value)


def test_a_failing_callback_is_reported_and_the_study_goes_on(tmp_path, caplog):
    def broken(study, trial):
        raise ConnectionError("tracking server down")

    spec = tlsearch.StudySpec(
        name="broken-callback",
        dataset="sklearn:iris",
        space=lambda t: {"x": t.suggest_float("x", 0, 1)},
        model=tlsearch.CustomLoop(_fit),
        cv=2,
        metric="accuracy",
        direction="maximize",
        n_trials=2,
        callbacks=[broken],
    )
    study = driver.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=1, progress="off")
    assert len(study.trials) == 2
    assert "callback broken failed on trial 0: ConnectionError: tracking server down" in caplog.text


def _build(params, input_shape, n_classes):
    import keras

    model = keras.Sequential([keras.Input(input_shape), keras.layers.Dense(n_classes, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def test_keras_callbacks_are_fresh_per_fold_and_run_with_early_stopping(tmp_path):
    logs = tmp_path / "logs"

    def callbacks(trial_number, fold_index):
        import keras

        folder = logs / f"trial-{trial_number:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        return [keras.callbacks.CSVLogger(str(folder / f"fold-{fold_index}.csv"))]

    spec = tlsearch.StudySpec(
        name="keras-callbacks",
        dataset="sklearn:iris",
        space=lambda t: {"u": t.suggest_int("u", 1, 2)},
        model=tlsearch.KerasModel(_build, epochs=2, early_stopping=1, callbacks=callbacks),
        cv=2,
        metric="accuracy",
        n_trials=2,
        pruner=optuna.pruners.NopPruner(),
    )
    study = driver.run(spec, stores=Stores(home=tmp_path / "home"), n_workers=1, progress="off")

    assert [(t.state.name, t.user_attrs.get("error_message")) for t in study.trials] == [("COMPLETE", None)] * 2
    for trial in study.trials:
        for fold in range(2):
            lines = (logs / f"trial-{trial.number:04d}" / f"fold-{fold}.csv").read_text().splitlines()
            assert "val_loss" in lines[0]  # the rows early stopping watches: tlsearch's callbacks ran too
            assert len(lines) - 1 == trial.user_attrs[f"split{fold}_n_epochs"]  # one fresh logger per fold
