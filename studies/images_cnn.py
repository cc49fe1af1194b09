"""Digits as 8x8 grey-scale images (scikit-learn's digits reshaped to 8x8x1) with a small Keras CNN, 3-fold CV."""

import tlsearch
from search_spaces.cnn import cnn, make_cnn
from search_spaces.optimizers import compile_model, optimizer


def space(trial):
    return {"cnn": cnn(trial, max_blocks=2, filters=(8, 32)), "optimizer": optimizer(trial, names=("adam",))}


def build(params, input_shape, n_classes):
    model = make_cnn(params["cnn"], input_shape, n_classes, image_shape=(8, 8, 1), rescale=1 / 16)
    return compile_model(model, params["optimizer"], n_classes)


spec = tlsearch.StudySpec(
    name="digits-cnn",
    dataset="sklearn:digits",
    space=space,
    model=tlsearch.KerasModel(build, epochs=6, batch_size=64, early_stopping=2),
    cv=3,
    metric="accuracy",
    n_trials=10,
)
