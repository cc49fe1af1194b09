"""Wine (13 chemical measurements, 3 cultivars) with a scikit-learn random forest, 5-fold CV."""

import tlsearch
from search_spaces.tree_ensembles import make_random_forest, random_forest

spec = tlsearch.StudySpec(
    name="wine-random-forest",
    dataset="sklearn:wine",
    space=lambda trial: random_forest(trial, n_estimators=(20, 200)),
    model=tlsearch.SklearnModel(make_random_forest),
    metric="balanced_accuracy",
    n_trials=30,
)
