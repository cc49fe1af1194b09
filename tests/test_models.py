"""Model kinds and their trainers with Keras (the only test file that imports TensorFlow), and fit_full."""

from __future__ import annotations

import contextlib
import random
import tempfile
import threading

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState
from sklearn.datasets import load_diabetes
from sklearn.neighbors import KNeighborsClassifier

from search_spaces.mlp import make_mlp
from search_spaces.optimizers import compile_model
from tests.stored_study import StoredStudy
from tlsearch.cv._evaluate import describe_failure
from tlsearch.errors import NonFiniteLossError
from tlsearch.models import _fold_random, _keras, _keras_reuse
from tlsearch.spec._spec import CustomLoop, KerasModel, SklearnModel, StudySpec
from tlsearch.stores._stores import Stores

optuna.logging.set_verbosity(optuna.logging.WARNING)

SMALL_MLP = {
    "mlp": {"units": [32], "dropout": 0.0, "activation": "relu", "batch_norm": False},
    "optimizer": {"name": "adam", "learning_rate": 0.01, "weight_decay": None},
}


def build_mlp(params, input_shape, n_classes):
    model = make_mlp(params["mlp"], input_shape, n_classes, rescale=1 / 16)
    return compile_model(model, params["optimizer"], n_classes)


def stored(spec, tmp_path, arrays=None):
    """`spec`'s study stored as the driver stores it, in a home of its own under `tmp_path`: its first trial is
    number 0, so one study name gives the same fold seeds in every such study."""
    return StoredStudy(spec, tempfile.mkdtemp(dir=tmp_path), arrays)


def run(spec, tmp_path, arrays=None):
    """One trial of `spec`, evaluated as a worker evaluates it; the trial as stored."""
    return stored(spec, tmp_path, arrays).trial()


@pytest.mark.slow
def test_keras_mlp_on_digits_three_folds(tmp_path):
    spec = StudySpec(
        name="keras-digits",
        dataset="sklearn:digits",
        space=SMALL_MLP,
        model=KerasModel(build_mlp, epochs=2, batch_size=32),
        cv=3,
        metric="accuracy",
        return_train_score=True,
    )
    trial = run(spec, tmp_path)
    assert trial.state == TrialState.COMPLETE
    attrs = trial.user_attrs
    scores = [attrs[f"split{k}_test_score"] for k in range(3)]
    assert all(0.6 < score <= 1.0 for score in scores), scores  # 10 classes: chance is 0.1
    assert [attrs[f"split{k}_n_epochs"] for k in range(3)] == [2, 2, 2]
    assert all(attrs[f"split{k}_fit_time"] > 0 for k in range(3))
    assert attrs["mean_test_score"] == pytest.approx(np.mean(scores)) == trial.value
    assert attrs["mean_train_score"] > 0.6 and list(trial.intermediate_values) == [0, 1, 2]
    # the same study, trial number and fold give the same seeds: fold 0 run again as a fold task scores the same
    rerun = stored(spec, tmp_path)
    rerun.evaluate(folds=(0,))
    assert rerun.study.trials[0].user_attrs["split0_test_score"] == pytest.approx(scores[0], abs=1e-6)


@pytest.mark.slow
def test_keras_early_stopping_and_scikit_learn_scorers(tmp_path):
    spec = StudySpec(
        name="keras-scorers",
        dataset="sklearn:digits",
        space=SMALL_MLP,
        model=KerasModel(build_mlp, epochs=4, batch_size=64, early_stopping=1),
        cv=2,
        metric=["loss", "neg_log_loss", "balanced_accuracy"],
        direction=["minimize", "maximize", "maximize"],
    )
    trial = run(spec, tmp_path)
    attrs = trial.user_attrs
    for k in range(2):
        assert 1 <= attrs[f"split{k}_n_epochs"] <= 4
        # the model's own loss and scikit-learn's log loss of its predicted probabilities agree
        assert attrs[f"split{k}_test_neg_log_loss"] == pytest.approx(-attrs[f"split{k}_test_loss"], abs=1e-3)
        assert 0.6 < attrs[f"split{k}_test_balanced_accuracy"] <= 1.0


@pytest.mark.slow
def test_keras_regression_and_binary_sigmoid_outputs(tmp_path):
    import keras

    X, y = load_diabetes(return_X_y=True)
    regression = StudySpec(
        name="keras-regression",
        dataset="diabetes",
        space=SMALL_MLP,
        cv=2,
        model=KerasModel(build_mlp, epochs=1),
        metric=["loss", "neg_mean_squared_error"],
        direction=["minimize", "maximize"],
    )
    trial = run(regression, tmp_path, {"X": X, "y": y})
    assert trial.user_attrs["split0_test_neg_mean_squared_error"] == pytest.approx(
        -trial.user_attrs["split0_test_loss"], rel=1e-3
    )

    def sigmoid_model(params, input_shape, n_classes):
        assert n_classes == 2
        model = keras.Sequential(
            [
                keras.Input(input_shape),
                keras.layers.Normalization(axis=None),
                keras.layers.Dense(1, activation="sigmoid"),
            ]
        )
        model.compile("adam", "binary_crossentropy")
        return model

    binary = StudySpec(
        name="keras-binary",
        dataset="sklearn:breast_cancer",
        space={},
        cv=2,
        model=KerasModel(sigmoid_model, epochs=1),
        metric="roc_auc",
    )
    assert 0.0 <= run(binary, tmp_path).value <= 1.0


@pytest.mark.slow
def test_non_finite_loss_fails_the_trial(tmp_path):
    import keras

    def exploding(params, input_shape, n_classes):
        model = keras.Sequential(
            [
                keras.Input(input_shape),
                keras.layers.Rescaling(float("inf")),
                keras.layers.Dense(n_classes, activation="softmax"),
            ]
        )
        model.compile("adam", "sparse_categorical_crossentropy")
        return model

    spec = StudySpec(name="nan", dataset="sklearn:digits", space={}, model=KerasModel(exploding, epochs=3), cv=2)
    with pytest.raises(
        NonFiniteLossError, match="epoch 1: the training data is finite, so training diverged"
    ) as raised:
        stored(spec, tmp_path).evaluate()
    assert describe_failure(raised.value)["error_type"] == "tlsearch.errors.NonFiniteLossError"
    assert describe_failure(raised.value)["error_retryable"] is False


@pytest.mark.slow
def test_a_nan_loss_from_missing_feature_values_names_them(tmp_path):
    import keras

    home = tmp_path / "home"
    X, y = load_diabetes(return_X_y=True)
    X[::10, 2] = np.nan  # pushed with allow_missing, for models that accept NaN; Keras does not
    Stores(home=home).dataset_store().push("gappy", {"X": X, "y": y}, allow_missing=True)

    def linear(params, input_shape, n_classes):  # a ReLU would turn NaN into 0 and train on, quietly wrong
        model = keras.Sequential([keras.Input(input_shape), keras.layers.Dense(1)])
        model.compile("adam", "mse")
        return model

    spec = StudySpec(name="gaps", dataset="gappy", space={}, model=KerasModel(linear, epochs=1), cv=2)
    with pytest.raises(NonFiniteLossError, match=r"the training features hold 22 NaN or infinite values \(a dataset"):
        StoredStudy(spec, home).evaluate()


def test_a_non_finite_loss_says_its_likely_cause():
    finite = np.ones((4, 2), np.float32)
    gappy = finite.copy()
    gappy[1, 1] = np.nan
    assert _keras.non_finite_loss_message(float("nan"), 2, finite, np.zeros(4)) == (
        "training loss is nan at epoch 2: the training data is finite, so training diverged: lower the learning "
        "rate, scale the features or labels, or check that the loss suits the labels"
    )
    assert _keras.non_finite_loss_message(float("inf"), 1, gappy, np.zeros(4)).startswith(
        "training loss is inf at epoch 1: the training features hold 1 NaN or infinite values"
    )
    assert "training labels hold 1" in _keras.non_finite_loss_message(float("nan"), 1, finite, [0.0, np.nan, 1, 2])


@pytest.mark.slow
def test_builder_errors_propagate(tmp_path):
    def broken(params, input_shape, n_classes):
        raise KeyError("units")

    with pytest.raises(KeyError):
        stored(
            StudySpec(name="broken", dataset="sklearn:digits", space={}, model=KerasModel(broken), cv=2), tmp_path
        ).evaluate()

    def uncompiled(params, input_shape, n_classes):
        return make_mlp(SMALL_MLP["mlp"], input_shape, n_classes)

    spec = StudySpec(name="uncompiled", dataset="sklearn:digits", space={}, model=KerasModel(uncompiled), cv=2)
    with pytest.raises(TypeError, match="not compiled"):
        stored(spec, tmp_path).evaluate()


def fit_full(spec, params, X, y):
    """What `tlsearch refit` trains: the model kind's trainer on all rows."""
    return spec.model.trainer(spec, {"X": X, "y": y}).fit_full(params, X, y, None, 0)


@pytest.mark.slow
def test_fit_full_returns_trained_models(digits):
    X, y = np.asarray(digits["X"]), np.asarray(digits["y"])
    keras_spec = StudySpec(name="full", dataset="d", space=SMALL_MLP, model=KerasModel(build_mlp, epochs=2))
    model = fit_full(keras_spec, SMALL_MLP, X, y)
    assert np.mean(np.argmax(model.predict(X, verbose=0), axis=1) == y) > 0.7
    sklearn_spec = StudySpec(
        name="full", dataset="d", space={}, model=SklearnModel(lambda p: KNeighborsClassifier(p["k"]))
    )
    assert fit_full(sklearn_spec, {"k": 1}, X, y).score(X, y) == 1.0
    custom = StudySpec(name="full", dataset="d", space={}, model=CustomLoop(lambda p, f, r: 0.0))
    with pytest.raises(TypeError, match="no refit function"):
        fit_full(custom, {}, X, y)
    custom = StudySpec(
        name="full",
        dataset="d",
        space={},
        model=CustomLoop(lambda p, f, r: 0.0, refit=lambda p, X, y: ("trained", len(X))),
    )
    assert fit_full(custom, {}, X, y) == ("trained", len(X))


@pytest.mark.slow
def test_later_folds_reuse_the_traced_model_with_the_scores_of_fresh_models(tmp_path):
    import keras

    params = {
        "mlp": {"units": [32, 16], "dropout": 0.2, "activation": "relu", "batch_norm": True},
        "optimizer": {"name": "adam", "learning_rate": 0.01, "weight_decay": None},
    }
    built = []

    def deterministic(params, input_shape, n_classes):
        built.append(build_mlp(params, input_shape, n_classes))
        return built[-1]

    def alternating(params, input_shape, n_classes):
        # The same network behind one or two Identity layers: equal math, a structure that differs from the
        # previous fold's, so every fold trains the model built for it.
        mlp = make_mlp(params["mlp"], input_shape, n_classes, rescale=1 / 16)
        inputs = x = keras.Input(input_shape)
        for _ in range(1 + len(built) % 2):
            x = keras.layers.Identity()(x)
        built.append(compile_model(keras.Model(inputs, mlp(x)), params["optimizer"], n_classes))
        return built[-1]

    scores, trained = {}, {}
    for builder in (deterministic, alternating):
        built.clear()
        _keras_reuse.kept_model.clear()  # no model traced by an earlier test
        spec = StudySpec(
            name="reuse",
            dataset="sklearn:digits",
            space=params,
            cv=3,
            metric="accuracy",
            model=KerasModel(builder, epochs=3, batch_size=64, early_stopping=2),
        )
        attrs = run(spec, tmp_path).user_attrs
        scores[builder.__name__] = [attrs[f"split{k}_test_score"] for k in range(3)]
        trained[builder.__name__] = sum(int(model.optimizer.iterations.numpy()) > 0 for model in built)
    assert trained == {"deterministic": 1, "alternating": 3}
    assert scores["deterministic"] == pytest.approx(scores["alternating"], abs=1e-6)


@pytest.mark.slow
def test_a_trial_reuses_the_model_an_earlier_trial_traced_when_only_its_learning_rate_differs(tmp_path):
    import keras

    built = []

    def deterministic(params, input_shape, n_classes):
        built.append(build_mlp(params, input_shape, n_classes))
        return built[-1]

    def fresh(params, input_shape, n_classes):
        # The same network behind a new number of Identity layers each time: equal math, a structure never seen
        # before, so every fold trains the model built for it.
        inputs = x = keras.Input(input_shape)
        for _ in range(1 + len(built)):
            x = keras.layers.Identity()(x)
        mlp = make_mlp(params["mlp"], input_shape, n_classes, rescale=1 / 16)
        built.append(compile_model(keras.Model(inputs, mlp(x)), params["optimizer"], n_classes))
        return built[-1]

    def trial(builder, units=(32, 16), learning_rate=0.01, weight_decay=None):
        """(fold scores, how many of the models built for the trial were trained)."""
        params = {
            "mlp": {"units": list(units), "dropout": 0.2, "activation": "relu", "batch_norm": True},
            "optimizer": {"name": "adam", "learning_rate": learning_rate, "weight_decay": weight_decay},
        }
        spec = StudySpec(
            name="reuse-across-trials",
            dataset="sklearn:digits",
            space=params,
            cv=3,
            metric="accuracy",
            model=KerasModel(builder, epochs=2, batch_size=64),
        )
        first = len(built)
        attrs = run(spec, tmp_path).user_attrs
        trained = sum(int(model.optimizer.iterations.numpy()) > 0 for model in built[first:])
        return [attrs[f"split{k}_test_score"] for k in range(3)], trained

    _keras_reuse.kept_model.clear()
    first_scores, first_trained = trial(deterministic)
    later_scores, later_trained = trial(deterministic, learning_rate=0.003)
    assert (first_trained, later_trained) == (1, 0)  # the later trial trained the first trial's model
    assert first_scores == pytest.approx(trial(fresh)[0], abs=1e-6)
    assert later_scores == pytest.approx(trial(fresh, learning_rate=0.003)[0], abs=1e-6)
    assert trial(deterministic, units=(32,))[1] == 1  # another architecture: built and traced anew
    assert trial(deterministic, weight_decay=1e-4)[1] == 1  # a constant of the traced update: anew too


@pytest.mark.slow
def test_steps_per_call_leave_the_scores_as_they_are_and_stay_at_one_under_the_studys_callbacks(tmp_path):
    built, scores = [], {}

    def recorded(params, input_shape, n_classes):
        built.append(build_mlp(params, input_shape, n_classes))
        return built[-1]

    for callbacks in (None, lambda trial_number, fold_index: []):
        built.clear()
        spec = StudySpec(
            name="steps-per-call",  # the same name, so the same fold seeds
            dataset="sklearn:digits",
            space=SMALL_MLP,
            cv=2,
            metric="accuracy",
            model=KerasModel(recorded, epochs=2, batch_size=64, callbacks=callbacks),
        )
        scores[callbacks is None] = [run(spec, tmp_path).user_attrs[f"split{k}_test_score"] for k in range(2)]
        assert built[0].steps_per_execution == (_keras.STEPS_PER_EXECUTION if callbacks is None else 1)
    assert scores[True] == pytest.approx(scores[False], abs=1e-6)


def _backend_state():
    import gc
    import sys

    if "tensorflow" not in sys.modules:
        return None
    from tlsearch.models import import_keras

    import_keras()  # waits for a background import to finish setting the backend up
    import tensorflow as tf

    threading = tf.config.threading
    return (
        threading.get_intra_op_parallelism_threads(),
        threading.get_inter_op_parallelism_threads(),
        gc.get_freeze_count() > 0,
    )


@pytest.mark.slow
def test_workers_run_keras_on_their_share_of_the_cores_and_only_keras_studies_import_it(tmp_path):
    import distributed

    from tlsearch.execution import _driver as driver
    from tlsearch.execution._worker_setup import host_cores
    from tlsearch.stores._stores import Stores

    custom = StudySpec(
        name="custom",
        dataset="sklearn:digits",
        space={},
        cv=2,
        n_trials=2,
        model=CustomLoop(lambda params, fold, report: 0.5),
    )
    keras_study = StudySpec(
        name="keras", dataset="sklearn:digits", space=SMALL_MLP, cv=2, n_trials=1, model=KerasModel(build_mlp, epochs=1)
    )
    stores = Stores(home=tmp_path)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as local:
        with distributed.Client(local) as client:
            driver.run(custom, stores=stores, client=client, progress="off")
            assert set(client.run(_backend_state).values()) == {None}
            study = driver.run(keras_study, stores=stores, client=client, progress="off")
            assert study.trials[0].state == TrialState.COMPLETE
            share = max(1, host_cores() // 2)
            assert set(client.run(_backend_state).values()) == {(share, share, True)}


@pytest.mark.slow
def test_seeding_without_clearing_tensorflows_caches_trains_as_keras_set_random_seed_does(tmp_path, monkeypatch):
    """tlsearch seeds each fold without clearing TensorFlow's kernel cache (see _keras_backend.set_random_seed);
    with dropout, early stopping and a shuffled pipeline, the fold scores equal those of keras.utils.set_random_seed,
    which clears it."""
    params = {
        "mlp": {"units": [32], "dropout": 0.3, "activation": "relu", "batch_norm": False},
        "optimizer": {"name": "adam", "learning_rate": 0.01, "weight_decay": None},
    }
    spec = StudySpec(
        name="seeding",
        dataset="sklearn:digits",
        space=params,
        cv=3,
        metric="accuracy",
        model=KerasModel(build_mlp, epochs=3, batch_size=64, early_stopping=2),
    )

    def keras_seeding(keras, seed):
        keras.utils.set_random_seed(seed)
        _fold_random.seed_thread(seed)  # Keras' default seeds come from the thread's own stream: see test below

    scores = {}
    for seeding in ("tlsearch", "keras"):
        if seeding == "keras":
            monkeypatch.setattr(_keras, "set_random_seed", keras_seeding)
        attrs = run(spec, tmp_path).user_attrs
        scores[seeding] = [attrs[f"split{k}_test_score"] for k in range(3)]
    assert scores["tlsearch"] == pytest.approx(scores["keras"], abs=1e-6)
    assert len(set(scores["tlsearch"])) > 1  # the folds differ: their scores are not a constant


@pytest.mark.slow
def test_small_folds_go_in_as_a_pipeline_that_reports_what_keras_reports_for_the_arrays(digits):
    import keras
    import tensorflow as tf

    from tlsearch.models import _keras_inputs as inputs

    x, y = digits["X"][:300].astype("float32"), digits["y"][:300].astype("int32")
    weights = np.linspace(0.1, 1.0, len(x))
    small = inputs.training(keras, x, y, weights, 32, seed=1, fit_kwargs={})
    assert isinstance(small["x"], tf.data.Dataset) and small["shuffle"] is False
    assert len(next(iter(small["x"]))) == 3  # rows, labels and their weights
    for fit_kwargs in ({"shuffle": False}, {"validation_split": 0.2}):  # Keras honours these for arrays only
        assert inputs.training(keras, x, y, None, 32, seed=1, fit_kwargs=fit_kwargs)["x"] is x
    big = np.zeros((inputs.SMALL_FOLD_ROWS + 1, 2), "float32")
    assert inputs.training(keras, big, big[:, 0], None, 32, seed=1, fit_kwargs={})["x"] is big
    assert inputs.evaluation(keras, big, big[:, 0], 256)["x"] is big

    model = build_mlp(SMALL_MLP, x.shape[1:], 10)
    model.fit(**small, epochs=1, verbose=0)
    piped = model.evaluate(**inputs.evaluation(keras, x, y, 256), verbose=0, return_dict=True)
    direct = model.evaluate(x, y, batch_size=256, verbose=0, return_dict=True)
    assert piped == pytest.approx(direct, abs=1e-6)


@pytest.mark.slow
def test_a_worker_keeps_tensorflows_kernels_for_the_model_it_keeps_and_drops_them_with_it(tmp_path, monkeypatch):
    """Between trials of one structure the traced model's instantiated functions stay in TensorFlow's kernel
    cache; when another structure replaces the kept model the cache is cleared, so a search over many
    structures does not grow."""
    forgotten = []
    monkeypatch.setattr(_keras, "forget_kernels", lambda keras: forgotten.append(len(_keras_reuse.kept_model)))
    _keras_reuse.kept_model.clear()
    for units in ([16], [16], [24], [24]):
        params = {"mlp": {**SMALL_MLP["mlp"], "units": units}, "optimizer": SMALL_MLP["optimizer"]}
        spec = StudySpec(
            name="kernels",
            dataset="sklearn:digits",
            space=params,
            cv=2,
            metric="accuracy",
            model=KerasModel(build_mlp, epochs=1, batch_size=64),
        )
        assert run(spec, tmp_path).state == TrialState.COMPLETE
    assert forgotten == [1]  # once: when [24] replaced the kept [16] model


@contextlib.contextmanager
def drawing_from_the_global_stream():
    """Within: another thread draws from Python's global `random` in a loop, as Dask's event loop does (sizeof)."""
    stop = threading.Event()

    def draw():
        while not stop.is_set():
            random.random()

    thread = threading.Thread(target=draw, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@pytest.mark.slow
def test_a_fold_trained_in_a_dask_worker_scores_as_in_a_plain_process_while_another_thread_draws(tmp_path):
    import distributed
    from keras.src.random import seed_generator

    params = {
        "mlp": {"units": [32], "dropout": 0.3, "activation": "relu", "batch_norm": False},
        "optimizer": {"name": "adam", "learning_rate": 0.01, "weight_decay": None},
    }
    spec = StudySpec(
        name="worker-seeds",
        dataset="sklearn:digits",
        space=params,
        cv=3,
        metric="accuracy",
        model=KerasModel(build_mlp, epochs=1, batch_size=64),
    )

    def fold_score():
        first_fold = stored(spec, tmp_path)
        first_fold.evaluate(folds=(0,))
        return first_fold.study.trials[0].user_attrs["split0_test_score"]

    plain = fold_score()
    # Keras draws its default seeds through the name tlsearch redirects: a Keras that renames it fails here
    assert isinstance(seed_generator.python_random, _fold_random._ThreadStreams)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as local:
        with distributed.Client(local) as client, drawing_from_the_global_stream():
            in_worker = [client.submit(fold_score, pure=False).result() for _ in range(4)]
    assert in_worker == [plain] * 4


def keras_spec(metric, **options):
    return StudySpec(
        name="d", dataset="sklearn:digits", space={}, model=KerasModel(build_mlp), metric=metric, **options
    )


@pytest.mark.parametrize(
    "metric",
    ["categorical_hinge", "dice", "tversky", "ctc", "perplexity", "binary_focal_crossentropy", "kl_divergence",
     "root_mean_squared_error", "log_cosh", "poisson", "false_negatives", "val_loss"],
)  # fmt: skip
def test_a_lower_is_better_keras_metric_is_minimised_by_default(metric):
    assert keras_spec(metric).directions_ == ("minimize",)


@pytest.mark.parametrize(
    "metric", ["accuracy", "top_k_categorical_accuracy", "auc", "mean_iou", "f1_score", "r2_score", "cosine_similarity"]
)
def test_a_higher_is_better_keras_metric_is_maximised_by_default(metric):
    assert keras_spec(metric).directions_ == ("maximize",)


@pytest.mark.slow
def test_every_name_keras_registers_as_a_loss_is_minimised_by_default():
    from keras.src import losses

    names = {name for name in losses.ALL_OBJECTS_DICT if name.islower()} - {"cosine_similarity"}  # see MINIMIZED
    assert len(names) > 20
    assert {name: keras_spec(name).directions_[0] for name in names} == dict.fromkeys(names, "minimize")


def test_a_keras_metric_of_unknown_direction_asks_for_one():
    from tlsearch.errors import StudySpecError

    with pytest.raises(StudySpecError, match=r"^StudySpec.direction .*'my_score'.* direction='maximize'") as error:
        keras_spec("my_score")
    assert "\n" not in str(error.value)
    assert keras_spec("my_score", direction="maximize").directions_ == ("maximize",)
    assert keras_spec(["accuracy", "my_score"], directions=["maximize", "minimize"]).directions_ == (
        "maximize",
        "minimize",
    )


@pytest.mark.slow
def test_a_kept_model_stands_in_only_for_a_trial_whose_compiled_loss_and_metric_are_its_own(tmp_path):
    """A loss and a metric whose parameter is not in their get_config(): a later trial on the worker with other
    values trains and scores with its own objects, as a fresh model would; with the same values it still reuses."""
    import keras

    class FocalLoss(keras.losses.Loss):
        def __init__(self, gamma, name="focal_loss", **kwargs):
            super().__init__(name=name, **kwargs)
            self.gamma = gamma

        def call(self, y_true, y_pred):
            crossentropy = keras.losses.sparse_categorical_crossentropy(y_true, y_pred)
            return crossentropy * (1 - keras.ops.exp(-crossentropy)) ** self.gamma

    class ScaledCrossentropy(keras.metrics.Mean):
        def __init__(self, scale, name="scaled_crossentropy_metric", **kwargs):
            super().__init__(name=name, **kwargs)
            self.scale = scale

        def update_state(self, y_true, y_pred, sample_weight=None):
            values = keras.losses.sparse_categorical_crossentropy(y_true, y_pred) * self.scale
            return super().update_state(values, sample_weight=sample_weight)

    built = []

    def build(params, input_shape, n_classes):
        model = make_mlp(SMALL_MLP["mlp"], input_shape, n_classes, rescale=1 / 16)
        model.compile(optimizer="adam", loss=FocalLoss(params["gamma"]), metrics=[ScaledCrossentropy(params["scale"])])
        built.append(model)
        return model

    def trial(gamma, scale, fresh=False):
        """(fold scores, how many of the models built for the trial were trained)."""
        if fresh:
            _keras_reuse.kept_model.clear()  # nothing an earlier trial traced
        spec = StudySpec(
            name="reuse-objects",  # one name: the same fold seeds for every trial here
            dataset="sklearn:digits",
            space={"gamma": gamma, "scale": scale},
            cv=2,
            metric="scaled_crossentropy_metric",
            direction="minimize",
            model=KerasModel(build, epochs=2, batch_size=64),
        )
        first = len(built)
        attrs = run(spec, tmp_path).user_attrs
        trained = sum(int(model.optimizer.iterations.numpy()) > 0 for model in built[first:])
        return [attrs[f"split{k}_test_score"] for k in range(2)], trained

    trial(2.0, 1.0, fresh=True)
    other_gamma, trained_for_gamma = trial(0.0, 1.0)
    assert other_gamma == pytest.approx(trial(0.0, 1.0, fresh=True)[0], abs=1e-6), "trained with gamma 2"
    other_scale, trained_for_scale = trial(0.0, 3.0)
    assert other_scale == pytest.approx(trial(0.0, 3.0, fresh=True)[0], abs=1e-6), "scored with scale 1"
    assert other_scale == pytest.approx([3 * score for score in other_gamma], rel=1e-4)
    assert (trained_for_gamma, trained_for_scale) == (1, 1)  # a model of their own, reused by their second fold
    assert trial(0.0, 3.0)[1] == 0, "the same loss and metric: the kept model stands in"
