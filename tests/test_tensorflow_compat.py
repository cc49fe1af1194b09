"""The TensorFlow internals tlsearch relies on (tlsearch/_compat/tensorflow.py) are as it expects on the pinned
TensorFlow, and each turns itself off, leaving plain Keras behaviour, where they are not."""

from __future__ import annotations

import types

import pytest

from tlsearch._compat import tensorflow as compat
from tlsearch.models._keras_backend import import_keras


@pytest.mark.slow  # importing TensorFlow starts a subprocess
def test_the_internals_are_found_on_the_pinned_tensorflow():
    keras = import_keras()
    assert keras.backend.backend() == "tensorflow"
    context = compat.eager_context(keras)
    assert context is not None, "TensorFlow's eager context changed: see tlsearch/_compat/tensorflow.py"
    assert isinstance(compat.gradient_registry(keras), dict)


@pytest.mark.slow
def test_kernels_are_kept_inside_and_the_contexts_own_methods_are_back_after():
    keras = import_keras()
    context = compat.eager_context(keras)
    with compat.kernels_kept(keras):
        keras.utils.set_random_seed(5)
        assert context._seed == 5
        assert "clear_kernel_cache" in vars(context)  # shadowed on the instance
    assert "clear_kernel_cache" not in vars(context) and "_set_global_seed" not in vars(context)


def test_on_another_backend_every_internal_is_off():
    other = types.SimpleNamespace(backend=types.SimpleNamespace(backend=lambda: "jax"))
    assert compat.eager_context(other) is None and compat.gradient_registry(other) is None
    with compat.kernels_kept(other):  # a plain block
        pass
    compat.forget_kernels(other)
