"""scikit-learn tree ensembles: random forests and histogram gradient boosting.

params = random_forest(trial)       # {"n_estimators": 120, "max_depth": 14, ...}
estimator = make_random_forest(params)
"""

from __future__ import annotations

from typing import Any

from tlsearch.spaces import scoped


def random_forest(
    trial: Any, prefix: str | None = "random_forest", *, n_estimators: tuple[int, int] = (20, 300)
) -> dict:
    """Sample a random forest: n_estimators and max_depth (log-uniform), max_features, min_samples_leaf,
    and whether to bootstrap."""
    trial = scoped(trial, prefix)
    return {
        "n_estimators": trial.suggest_int("n_estimators", *n_estimators, log=True),
        "max_depth": trial.suggest_int("max_depth", 2, 32, log=True),
        "max_features": trial.suggest_categorical("max_features", ["sqrt", "log2", 0.5]),
        "min_samples_leaf": trial.suggest_int("min_samples_leaf", 1, 32, log=True),
        "bootstrap": trial.suggest_categorical("bootstrap", [True, False]),
    }


def make_random_forest(
    params: dict, *, task: str = "classification", random_state: int = 0, n_jobs: int | None = 1
) -> Any:
    """A RandomForestClassifier (or Regressor for task="regression") for a dict sampled by `random_forest`."""
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    estimator = RandomForestClassifier if task == "classification" else RandomForestRegressor
    return estimator(random_state=random_state, n_jobs=n_jobs, **params)


def gradient_boosting(
    trial: Any, prefix: str | None = "gradient_boosting", *, max_iter: tuple[int, int] = (50, 500)
) -> dict:
    """Sample histogram gradient boosting: learning_rate, max_iter, max_leaf_nodes, min_samples_leaf and
    l2_regularization (log-uniform), max_features."""
    trial = scoped(trial, prefix)
    return {
        "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.5, log=True),
        "max_iter": trial.suggest_int("max_iter", *max_iter, log=True),
        "max_leaf_nodes": trial.suggest_int("max_leaf_nodes", 4, 64, log=True),
        "min_samples_leaf": trial.suggest_int("min_samples_leaf", 2, 64, log=True),
        "l2_regularization": trial.suggest_float("l2_regularization", 1e-6, 10.0, log=True),
        "max_features": trial.suggest_float("max_features", 0.3, 1.0),
    }


def make_gradient_boosting(params: dict, *, task: str = "classification", random_state: int = 0) -> Any:
    """A HistGradientBoostingClassifier (or Regressor) for a dict sampled by `gradient_boosting`; early stopping
    off, so a fold trains exactly max_iter rounds on its own rows."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    estimator = HistGradientBoostingClassifier if task == "classification" else HistGradientBoostingRegressor
    return estimator(random_state=random_state, early_stopping=False, **params)
