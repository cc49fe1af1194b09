"""The best model: refit a trial's parameters on the whole dataset, keep it as an artifact, load it safely.

A refit model is saved without pickle (Keras: the `.keras` format, loaded with `safe_mode=True`;
scikit-learn: `skops.io`, loaded with an explicit list of trusted types) and uploaded as an Optuna artifact
of the study (finished trials are immutable in every Optuna storage, so the record lives on the study:
system attribute `tlsearch:refit`, naming the trial). Loading checks the file's sha256 and that the
study's dataset is still the one the model was trained on.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import optuna

from tlsearch import spaces
from tlsearch._files import write_file_with
from tlsearch.config import database_name, uri_servers
from tlsearch.cv._evaluate import Holdout
from tlsearch.data import HostCache
from tlsearch.errors import TLSearchError, UnsafeModelError
from tlsearch.models import describe_target, import_keras
from tlsearch.mongo import mask_uri
from tlsearch.reading import _study_attrs as study_attrs
from tlsearch.reading._pick import pick
from tlsearch.reading._trials_table import number_attr
from tlsearch.seeds import derive_seed
from tlsearch.spec._spec import load_study_file
from tlsearch.stores import _study_files as study_files
from tlsearch.stores._stores import Stores, check_study_name

ATTR_REFIT = "tlsearch:refit"
# What a scikit-learn model file may hold beyond skops' own trusted types (estimators, transformers and plain
# containers): the concrete types fitted scikit-learn models carry. Never a function that can reach arbitrary
# code (builtins.exec, eval, getattr, __import__, operator.*, functools.partial); anything else is refused.
TRUSTED_SKLEARN_TYPES = frozenset(
    {
        "numpy.dtype",
        "sklearn.tree._tree.Tree",
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
        "sklearn.neighbors._kd_tree.KDTree",
        "sklearn.neighbors._ball_tree.BallTree",
        *(
            f"sklearn.metrics._dist_metrics.{metric}{bits}"
            for bits in ("64", "32")
            for metric in ("EuclideanDistance", "ManhattanDistance", "ChebyshevDistance", "MinkowskiDistance")
        ),
        "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
        "sklearn.neural_network._stochastic_optimizers.SGDOptimizer",
        *(
            f"sklearn.feature_selection._univariate_selection.{score}"
            for score in ("f_classif", "f_regression", "chi2", "r_regression")
        ),
    }
)
_MODEL_FORMATS = {"keras": ".keras", "skops": ".skops"}
_ARTIFACT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class RefitRecord:
    """What the study store keeps about a refit model."""

    trial_number: int
    artifact_id: str
    filename: str
    format: str  # "keras" or "skops"
    sha256: str
    dataset_ref: str
    dataset_hash: str
    params: dict
    cv_score: float | None
    test_score: float | None  # on the study's test hold-out, when it declares one
    classes: list | None  # a classifier's original labels, in the order of its class indices
    created: str


def refit(
    name: str,
    *,
    stores: Stores | None = None,
    trial_number: int | None = None,
    spec=None,
    output: str | Path | None = None,
) -> tuple[RefitRecord, Path]:
    """Train trial `trial_number`'s parameters (default: the best trial's) on the study's whole dataset,
    save the model to `output` (default: `default_model_path`), upload it as an artifact of the
    study and return its record and path. `spec` defaults to the study file the store recorded."""
    stores = stores or Stores.resolve()
    study = study_attrs.load(stores, name)
    attrs = study_attrs.read(study)
    trial = _chosen_trial(study, trial_number)
    if spec is None:
        spec = load_study_file(study_files.resolve(stores, name, None, attrs.get(study_attrs.STUDY_FILE)))
    dataset = HostCache().open(stores.dataset_store(), attrs[study_attrs.DATASET_REF])
    if dataset.info.hash != attrs[study_attrs.DATASET_HASH]:
        raise TLSearchError(f"dataset {attrs[study_attrs.DATASET_REF]} changed since study {name!r} ran")
    params = _space_params(spec, trial)
    model, test_score = _fit(spec, params, dataset.arrays)
    y = dataset["y"]
    is_keras = spec.model.framework == "keras"
    suffix = ".keras" if is_keras else ".skops"
    path = Path(output) if output else default_model_path(stores, name, suffix)
    if path.suffix != suffix:
        raise TLSearchError(f"a {'Keras' if is_keras else 'scikit-learn'} model is saved as {suffix}, got {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    _save(model, path, is_keras)
    artifact_id = optuna.artifacts.upload_artifact(
        artifact_store=stores.artifact_store(), file_path=str(path), study_or_trial=study
    )
    record = RefitRecord(
        trial_number=trial.number,
        artifact_id=artifact_id,
        filename=path.name,
        format="keras" if is_keras else "skops",
        sha256=_sha256(path),
        dataset_ref=attrs[study_attrs.DATASET_REF],
        dataset_hash=attrs[study_attrs.DATASET_HASH],
        params=trial.params,
        cv_score=number_attr(trial, "mean_test_score"),
        test_score=test_score,
        classes=_classes(model, spec, y, dataset.info.metadata.get("class_names"), is_keras),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    study_attrs.write(study, ATTR_REFIT, asdict(record))
    return record, path


def default_model_path(stores: Stores, name: str, suffix: str) -> Path:
    """Where `refit` saves study `name`'s model by default: HOME/models/NAME.SUFFIX for a local study,
    HOME/models/mongodb-HASH/NAME.SUFFIX for one in MongoDB, HASH naming its servers and database (never its
    credentials): studies of one name in two stores keep a file each."""
    folder = stores.home / "models"
    if not stores.is_local:
        where = f"{uri_servers(stores.mongo) or mask_uri(stores.mongo)}/{database_name(stores.mongo, stores.database)}"
        folder /= f"mongodb-{hashlib.sha256(where.encode()).hexdigest()[:8]}"
    return folder / f"{check_study_name(name)}{suffix}"


def load_model(
    name: str, *, mongo: str | None = None, database: str | None = None, home=None, stores: Stores | None = None
):
    """The refit model of study `name` (a `keras.Model` or a scikit-learn estimator), loaded safely.

    Raises `UnsafeModelError` when the stored file changed since it was saved or holds untrusted types,
    and `TLSearchError` when the study has no refit model or its dataset changed since the refit.
    """
    stores = stores or Stores.resolve(mongo, database, home)
    study = study_attrs.load(stores, name)
    attrs = study_attrs.read(study)
    if ATTR_REFIT not in attrs:
        raise TLSearchError(f"study {name!r} has no refit model: run `tlsearch refit {name}` first")
    record = _checked_record(attrs[ATTR_REFIT], name)
    if record.dataset_hash != attrs.get(study_attrs.DATASET_HASH):
        raise TLSearchError(
            f"the refit model of {name!r} was trained on dataset {record.dataset_ref} "
            f"(sha256 {record.dataset_hash[:12]}), but the study now uses "
            f"{attrs.get(study_attrs.DATASET_REF)}: refit it again"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"model{_MODEL_FORMATS[record.format]}"  # never a name from the store
        optuna.artifacts.download_artifact(
            artifact_store=stores.artifact_store(), file_path=str(path), artifact_id=record.artifact_id
        )
        return _with_classes(load_model_file(path, record.sha256), record.classes)


def predict(model, X) -> np.ndarray:
    """Predictions of a model from `load_model` in the dataset's original labels (e.g. "gold", not 1) for a
    classifier, or its values for a regressor."""
    if hasattr(model, "get_params"):  # scikit-learn: its `classes_` maps its outputs already
        return np.asarray(model.predict(X))
    classes = getattr(model, "classes_", None)
    outputs = np.asarray(model.predict(np.asarray(X), verbose=0))
    if classes is None:
        return outputs.reshape(len(outputs), -1)[:, 0] if outputs.ndim == 2 and outputs.shape[1] == 1 else outputs
    if outputs.ndim == 2 and outputs.shape[1] == 1:  # a single sigmoid unit
        return np.asarray(classes)[(outputs[:, 0] >= 0.5).astype(int)]
    return np.asarray(classes)[np.argmax(outputs, axis=1)]


def load_model_file(path: str | Path, sha256: str | None = None):
    """Load a model saved by `refit` without running code from it; check its sha256 when given."""
    path = Path(path)
    if sha256 is not None and _sha256(path) != sha256:
        raise UnsafeModelError(f"model file {path.name} changed since it was saved (sha256 mismatch): refusing it")
    if path.suffix == ".keras":
        keras = import_keras()
        _refuse_keras_code(path, keras)
        try:
            return keras.saving.load_model(path, safe_mode=True)
        except ValueError as error:  # safe_mode refuses lambdas and other code
            raise UnsafeModelError(f"model file {path.name} was refused by Keras safe mode: {error}") from None
    if path.suffix == ".skops":
        import skops.io

        untrusted = skops.io.get_untrusted_types(file=path)
        refused = sorted(set(untrusted) - TRUSTED_SKLEARN_TYPES)
        if refused:
            raise UnsafeModelError(
                f"model file {path.name} holds type(s) not on tlsearch's allow-list, refusing it: {', '.join(refused)}"
            )
        return skops.io.load(path, trusted=untrusted)
    raise TLSearchError(f"unknown model format {path.suffix!r}: expected .keras or .skops")


def _checked_record(document: object, name: str) -> RefitRecord:
    """The study's refit record, with every field that decides a path or a check in its exact form."""
    try:
        record = RefitRecord(**document)
    except TypeError as error:
        raise UnsafeModelError(f"the refit record of {name!r} is malformed ({error}): refit it again") from None
    checks = {
        "format": record.format in _MODEL_FORMATS,
        "artifact_id": isinstance(record.artifact_id, str) and _ARTIFACT_ID.fullmatch(record.artifact_id),
        "sha256": isinstance(record.sha256, str) and re.fullmatch(r"[0-9a-f]{64}", record.sha256),
        "classes": record.classes is None
        or (
            isinstance(record.classes, list)
            and len(record.classes) <= 100_000
            and all(isinstance(c, (str, int, float, bool)) for c in record.classes)
        ),
        "filename": isinstance(record.filename, str)
        and Path(record.filename).name == record.filename
        and record.filename.endswith(_MODEL_FORMATS.get(record.format, "?")),
    }
    for field, ok in checks.items():
        if not ok:
            raise UnsafeModelError(
                f"refusing the refit record of {name!r}: field {field} is "
                f"{str(getattr(record, field))[:80]!r}, not a value tlsearch writes"
            )
    return record


def _refuse_keras_code(path: Path, keras) -> None:
    """Refuse a .keras file whose config holds a Lambda layer or a custom object the user has not registered."""
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise UnsafeModelError(f"model file {path.name} is not a .keras archive: {error}") from None
    registered = set(keras.saving.get_custom_objects())
    for item in _config_objects(config):
        class_name, module = item.get("class_name"), item.get("module")
        if class_name in ("Lambda", "__lambda__"):
            raise UnsafeModelError(f"model file {path.name} holds a {class_name} (code): refusing it")
        if module and not str(module).startswith("keras") and item.get("registered_name") not in registered:
            raise UnsafeModelError(
                f"model file {path.name} holds custom object {module}.{class_name}, which is "
                "not registered here (keras.saving.register_keras_serializable): refusing it"
            )


def _config_objects(config):
    """Every serialized object (a dict with a class_name) inside a Keras config."""
    if isinstance(config, dict):
        if "class_name" in config:
            yield config
        for value in config.values():
            yield from _config_objects(value)
    elif isinstance(config, list):
        for value in config:
            yield from _config_objects(value)


def _chosen_trial(study: optuna.Study, number: int | None) -> optuna.trial.FrozenTrial:
    if number is not None:
        trials = [t for t in study.get_trials(deepcopy=False) if t.number == number]
        if not trials:
            raise TLSearchError(f"study {study.study_name!r} has no trial {number}")
        if trials[0].state != optuna.trial.TrialState.COMPLETE:
            raise TLSearchError(f"trial {number} is {trials[0].state.name}, not COMPLETE")
        return trials[0]
    if len(study.directions) > 1:
        raise TLSearchError("a multi-objective study has several best trials: choose one with --trial N")
    picked = pick(study)
    if picked is None:
        raise TLSearchError(f"study {study.study_name!r} has no complete trial yet")
    return picked.trial


def _fit(spec, params: dict, arrays) -> tuple[object, float | None]:
    """Train on every row, or, when the study declares a test hold-out, on every row but those, and score
    the model on them (the first metric)."""
    X, y, weights = arrays["X"], arrays["y"], arrays.get("sample_weight")
    trainer = spec.model.trainer(spec, arrays)
    seed = derive_seed(spec.seed, spec.name, "full")  # distinct from every fold's
    if not isinstance(spec.cv_, Holdout):
        return trainer.fit_full(params, X, y, weights, seed), None
    train, test = spec.cv_.partition(X, y)
    model = trainer.fit_full(params, X[train], y[train], None if weights is None else weights[train], seed)
    score = getattr(trainer, "score", None)
    return model, None if score is None else score(model, X[test], y[test])[0]


def _space_params(spec, trial: optuna.trial.FrozenTrial) -> dict:
    """The dict the study's space returned for `trial`, replayed from its stored parameters."""
    return spaces.sample(optuna.trial.FixedTrial(trial.params, trial.number), spec.space)


def _save(model, path: Path, is_keras: bool) -> None:
    """Save `model` to `path` whole (`tlsearch._files`): a model already there stays until the new one is."""
    if is_keras:
        write_file_with(path, model.save)
    else:
        import skops.io

        write_file_with(path, lambda tmp: skops.io.dump(model, tmp))


def _classes(model, spec, y, class_names: list | None, is_keras: bool) -> list | None:
    """A classifier's original labels by class index: the dataset's class names where it encoded its labels
    (a CSV's "bronze", "gold", "silver" as 0, 1, 2), else the label values; None for a regressor."""
    if is_keras:
        codes = describe_target(np.asarray(y), spec.model.task).classes
    else:
        codes = getattr(model, "classes_", None)
    if codes is None:
        return None
    if class_names and all(float(c).is_integer() and 0 <= c < len(class_names) for c in codes):
        return [class_names[int(c)] for c in codes]
    return np.asarray(codes).tolist()


def _with_classes(model, classes: list | None):
    """`model` with `classes_` set to the original labels, so its predictions map back to them."""
    if classes is None:
        return model
    labels = np.asarray(classes)
    final = model[-1] if hasattr(model, "steps") else model  # a Pipeline's classes_ are its last step's
    try:
        final.classes_ = labels
    except AttributeError:  # a scikit-learn estimator whose classes_ cannot be set: it keeps its codes
        pass
    return model


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
