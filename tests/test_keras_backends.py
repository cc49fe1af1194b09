"""Keras studies through `tlsearch run` on whichever backend $KERAS_BACKEND names (TensorFlow by default): `.ci/run`
runs this file a second time with KERAS_BACKEND=jax (and jax[cpu] from `.ci/setup`). Each trial records the
backend its worker trained on, so a run that silently fell back to TensorFlow fails."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from optuna.trial import TrialState

from tlsearch.errors import TLSearchError
from tlsearch.models._keras_backend import check_backend

pytestmark = pytest.mark.timeout(600)

EXPECTED = os.environ.get("KERAS_BACKEND", "tensorflow")

STUDY = """
import os

import tlsearch
from tlsearch.cv import EpochPruning, KFoldPruner

LOG = LOG_PATH

def space(trial):
    # three trials of one structure that learn (their models stand in for each other), then a hopeless one
    return {"learning_rate": [0.01, 0.005, 0.02][trial.number] if trial.number < 3 else 1e-7}

def build(params, input_shape, n_classes):
    import keras

    with open(LOG, "a") as log:  # the backend each fold's model was built on, as the worker saw it
        log.write(f"{os.getpid()} {keras.backend.backend()}\\n")
    model = keras.Sequential([keras.Input(input_shape), keras.layers.Rescaling(1 / 16),
                              keras.layers.Dense(16, activation="relu"), keras.layers.Dense(n_classes, activation="softmax")])
    model.compile(keras.optimizers.Adam(params["learning_rate"]), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model

study = tlsearch.StudySpec(
    name="backends", dataset="sklearn:digits", space=space, cv=2, n_trials=4, metric="accuracy",
    model=tlsearch.KerasModel(build, epochs=3, batch_size=64),
    pruner=KFoldPruner(epochs=EpochPruning(eta=2, min_peers=3)))
"""


@pytest.mark.slow
def test_a_keras_study_runs_prunes_refits_and_predicts_on_the_backend_named(
    tmp_path, mongo_uri, mongo_db_name, monkeypatch
):
    """`tlsearch run` on a local cluster against the test MongoDB: a study with epoch pruning whose trials reuse
    one traced model across folds and trials, then `tlsearch refit`, `load_model` and `predict` (labels). On
    JAX, the workers keep their compiled programs in the host cache."""
    import tlsearch
    from tlsearch import cli

    monkeypatch.setenv("TLSEARCH_CACHE_DIR", str(tmp_path / "cache"))  # the workers' host cache
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)

    study_file = tmp_path / "study.py"
    log = tmp_path / "backends.log"
    study_file.write_text(STUDY.replace("LOG_PATH", repr(str(log))))
    where = ["--mongo", mongo_uri, "--database", mongo_db_name, "--home", str(tmp_path / "home")]
    code = cli.main(["run", str(study_file), *where, "--workers", "1", "--progress", "off", "--no-report"])
    assert code == 0
    built = [line.split() for line in log.read_text().splitlines()]
    assert {backend for _, backend in built} == {EXPECTED}, built
    assert all(int(pid) != os.getpid() for pid, _ in built)  # trained in the worker, not here
    compiled = list((tmp_path / "cache" / "jax").glob("*-cache"))  # JAX's own naming of an entry
    assert bool(compiled) == (EXPECTED == "jax"), compiled

    from tlsearch.reading import _study_attrs as study_attrs
    from tlsearch.stores._stores import Stores

    stores = Stores(mongo=mongo_uri, database=mongo_db_name, home=tmp_path / "home")
    study = study_attrs.load(stores, "backends")
    trials = sorted(study.trials, key=lambda t: t.number)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3 + [TrialState.PRUNED]
    assert all(t.value > 0.6 for t in trials[:3]), [t.value for t in trials]  # 10 classes: chance is 0.1
    assert "split0_test_score" not in trials[3].user_attrs  # pruned at an epoch of its first fold

    assert cli.main(["refit", "backends", *where]) == 0
    model = tlsearch.load_model("backends", stores=stores)
    import keras

    assert keras.backend.backend() == EXPECTED
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    predicted = np.asarray(tlsearch.predict(model, X)).astype(str)  # the labels, as the refit records them
    assert set(predicted) <= set(map(str, range(10))) and (predicted == y.astype(str)).mean() > 0.6


def test_only_tensorflow_and_jax_are_accepted():
    check_backend("tensorflow")
    check_backend("jax")
    for other in ("torch", "numpy", "openvino"):
        with pytest.raises(TLSearchError, match=f"Keras backend '{other}' is not supported") as refused:
            check_backend(other)
        assert "\n" not in str(refused.value)


@pytest.mark.slow
def test_a_study_on_pytorch_is_refused_in_one_line_before_any_trial(tmp_path):
    """PyTorch is not installed here, and Keras on torch imports it at once: the refusal comes first."""
    study_file = tmp_path / "study.py"
    study_file.write_text(STUDY.replace("LOG_PATH", repr(str(tmp_path / "backends.log"))))
    result = subprocess.run(
        [sys.executable, "-m", "tlsearch", "run", str(study_file), "--home", str(tmp_path / "home")]
        + ["--workers", "1", "--progress", "off", "--no-report"],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "torch"},
        timeout=300,
    )
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "Keras backend 'torch' is not supported" in errors[0], result.stderr
    assert not (tmp_path / "backends.log").exists()


def test_the_recorded_backend_is_a_real_one():
    """A typo in KERAS_BACKEND would make every test above check the wrong thing."""
    assert EXPECTED in ("tensorflow", "jax")
