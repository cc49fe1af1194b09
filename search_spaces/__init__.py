"""Reusable search spaces, and helpers that turn their sampled dicts into models.

Each space is a plain function `space(trial, prefix=...) -> dict`: call it from your own space to compose
(its parameters are named "prefix.name", so two spaces never clash). Keras is imported only by the
`make_*` helpers, so sampling a space never imports TensorFlow.

- optimizers: `optimizer` (adam, sgd with momentum, rmsprop; log-uniform learning rate; weight decay),
  `make_optimizer`, `compile_model`
- mlp: `mlp` (depth, width per layer, dropout, activation, batch norm), `make_mlp`
- cnn: `cnn` (blocks, filters, kernel size, pooling, dropout), `make_cnn`
- tree_ensembles: `random_forest` / `make_random_forest`, `gradient_boosting` / `make_gradient_boosting`
  (scikit-learn)
"""
