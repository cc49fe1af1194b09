"""Digits (8x8 images as 64 features, 10 classes) with a Keras MLP: the demo study, 12 trials of 3-fold CV."""

import tlsearch
from search_spaces.mlp import make_mlp, mlp
from search_spaces.optimizers import compile_model, optimizer


def space(trial):
    return {"mlp": mlp(trial, max_layers=2, units=(16, 128)), "optimizer": optimizer(trial, learning_rate=(1e-3, 1e-1))}


def build(params, input_shape, n_classes):
    model = make_mlp(params["mlp"], input_shape, n_classes, rescale=1 / 16)  # pixels are 0..16
    return compile_model(model, params["optimizer"], n_classes)


spec = tlsearch.StudySpec(
    name="digits-mlp",
    dataset="sklearn:digits",
    space=space,
    model=tlsearch.KerasModel(build, epochs=8, batch_size=32, early_stopping=2),
    cv=3,
    metric="accuracy",
    n_trials=12,
)
