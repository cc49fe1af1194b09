"""Which way a Keras metric is better, from what the metric is: losses and errors minimise, scores maximise."""

from __future__ import annotations

from tlsearch.errors import StudySpecError

# Every name Keras 3 registers as a loss (keras.losses), and error-like metrics. cosine_similarity is left out: as a
# reported metric (keras.metrics.CosineSimilarity) it is the similarity itself, greater is better.
MINIMIZED = frozenset(
    {
        "loss",
        "bce",
        "binary_crossentropy",
        "binary_focal_crossentropy",
        "categorical_crossentropy",
        "categorical_focal_crossentropy",
        "sparse_categorical_crossentropy",
        "categorical_generalized_cross_entropy",
        "hinge",
        "squared_hinge",
        "categorical_hinge",
        "circle",
        "ctc",
        "dice",
        "tversky",
        "huber",
        "log_cosh",
        "logcosh",
        "kl_divergence",
        "kld",
        "kullback_leibler_divergence",
        "poisson",
        "mae",
        "mape",
        "mse",
        "msle",
        "rmse",
        "mean_absolute_error",
        "mean_absolute_percentage_error",
        "mean_squared_error",
        "mean_squared_logarithmic_error",
        "root_mean_squared_error",
        "false_negatives",
        "false_positives",
        "perplexity",  # keras_hub
        "edit_distance",  # keras_hub
    }
)
MAXIMIZED = frozenset(
    {
        "acc",
        "auc",
        "precision",
        "recall",
        "f1_score",
        "fbeta_score",
        "r2_score",
        "iou",
        "mean_iou",
        "binary_iou",
        "one_hot_iou",
        "one_hot_mean_iou",
        "precision_at_recall",
        "recall_at_precision",
        "sensitivity_at_specificity",
        "specificity_at_sensitivity",
        "cosine_similarity",
        "pearson_correlation",
        "concordance_correlation",
        "true_positives",
        "true_negatives",
        "bleu",  # keras_hub
        "rouge_n",  # keras_hub
        "rouge_l",  # keras_hub
    }
)
_MINIMIZED_ENDINGS = ("loss", "_error", "crossentropy", "cross_entropy", "hinge", "divergence")
_MAXIMIZED_ENDINGS = ("accuracy", "_iou", "_auc")


def keras_metric_direction(name: str) -> str:
    """The direction ("minimize" or "maximize") of the Keras metric called `name`; StudySpecError for a name
    whose direction is not known (a metric of the study's own, say), asking for StudySpec.direction."""
    name = name.lower()
    if name in MINIMIZED or name.endswith(_MINIMIZED_ENDINGS):
        return "minimize"
    if name in MAXIMIZED or name.endswith(_MAXIMIZED_ENDINGS):
        return "maximize"
    raise StudySpecError(
        f"StudySpec.direction is needed: tlsearch does not know whether Keras metric {name!r} is better "
        "higher or lower; give direction='maximize' or direction='minimize' (directions=[...] for several metrics)"
    )
