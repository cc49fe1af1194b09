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
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import optuna

from tlsearch import runner
from tlsearch.errors import TLSearchError
from tlsearch.stores import Stores

ATTR_REFIT = "tlsearch:refit"
# What a scikit-learn model file may contain; anything else is refused at load time.
TRUSTED_MODULES = ("sklearn.", "numpy.", "scipy.", "builtins.", "collections.")


class UnsafeModelError(TLSearchError):
    """A model file that was changed since it was saved, or that holds code-carrying types."""


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
    classes: list | None
    created: str


def refit(name: str, *, stores: Stores | None = None, trial_number: int | None = None, spec=None,
          output: str | Path | None = None) -> tuple[RefitRecord, Path]:
    """Train trial `trial_number`'s parameters (default: the best trial's) on the study's whole dataset,
    save the model to `output` (default: HOME/models/NAME.keras or .skops), upload it as an artifact of the
    study and return its record and path. `spec` defaults to the study file the store recorded."""
    from tlsearch.data import HostCache
    from tlsearch.study import KerasModel, load_study_file

    stores = stores or Stores.resolve()
    study = runner.load(stores, name)
    attrs = runner.system_attrs(study)
    trial = _chosen_trial(study, trial_number)
    if spec is None:
        if runner.ATTR_STUDY_FILE not in attrs:
            raise TLSearchError(f"the store has no study file for {name!r}: pass the study file")
        spec = load_study_file(attrs[runner.ATTR_STUDY_FILE])
    dataset = HostCache().open(stores.dataset_store(), attrs[runner.ATTR_DATASET_REF])
    if dataset.info.hash != attrs[runner.ATTR_DATASET_HASH]:
        raise TLSearchError(f"dataset {attrs[runner.ATTR_DATASET_REF]} changed since study {name!r} ran")
    params = _space_params(spec, trial)
    model, test_score = _fit(spec, params, dataset.arrays)
    y = dataset["y"]
    is_keras = isinstance(spec.model, KerasModel)
    suffix = ".keras" if is_keras else ".skops"
    path = Path(output) if output else stores.home / "models" / f"{name}{suffix}"
    if path.suffix != suffix:
        raise TLSearchError(f"a {'Keras' if is_keras else 'scikit-learn'} model is saved as {suffix}, got {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    _save(model, path, is_keras)
    artifact_id = optuna.artifacts.upload_artifact(artifact_store=stores.artifact_store(), file_path=str(path),
                                                   study_or_trial=study)
    record = RefitRecord(
        trial_number=trial.number, artifact_id=artifact_id, filename=path.name,
        format="keras" if is_keras else "skops", sha256=_sha256(path),
        dataset_ref=attrs[runner.ATTR_DATASET_REF], dataset_hash=attrs[runner.ATTR_DATASET_HASH],
        params=trial.params, cv_score=trial.user_attrs.get("mean_test_score"), test_score=test_score,
        classes=_classes(spec, y) if is_keras else None,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    study._storage.set_study_system_attr(study._study_id, ATTR_REFIT, asdict(record))
    return record, path


def load_model(name: str, *, mongo: str | None = None, database: str = "tlsearch", home=None,
               stores: Stores | None = None):
    """The refit model of study `name` (a `keras.Model` or a scikit-learn estimator), loaded safely.

    Raises `UnsafeModelError` when the stored file changed since it was saved or holds untrusted types,
    and `TLSearchError` when the study has no refit model or its dataset changed since the refit.
    """
    stores = stores or Stores.resolve(mongo, database, home)
    study = runner.load(stores, name)
    attrs = runner.system_attrs(study)
    if ATTR_REFIT not in attrs:
        raise TLSearchError(f"study {name!r} has no refit model: run `tlsearch refit {name}` first")
    record = RefitRecord(**attrs[ATTR_REFIT])
    if record.dataset_hash != attrs.get(runner.ATTR_DATASET_HASH):
        raise TLSearchError(f"the refit model of {name!r} was trained on dataset {record.dataset_ref} "
                            f"(sha256 {record.dataset_hash[:12]}), but the study now uses "
                            f"{attrs.get(runner.ATTR_DATASET_REF)}: refit it again")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / record.filename
        optuna.artifacts.download_artifact(artifact_store=stores.artifact_store(), file_path=str(path),
                                           artifact_id=record.artifact_id)
        return load_model_file(path, record.sha256)


def load_model_file(path: str | Path, sha256: str | None = None):
    """Load a model saved by `refit` without running code from it; check its sha256 when given."""
    path = Path(path)
    if sha256 is not None and _sha256(path) != sha256:
        raise UnsafeModelError(f"model file {path.name} changed since it was saved (sha256 mismatch): refusing it")
    if path.suffix == ".keras":
        from tlsearch.models._keras import import_keras

        keras = import_keras()
        try:
            return keras.saving.load_model(path, safe_mode=True)
        except ValueError as error:  # safe_mode refuses lambdas and other code
            raise UnsafeModelError(f"model file {path.name} was refused by Keras safe mode: {error}") from None
    if path.suffix == ".skops":
        import skops.io

        untrusted = skops.io.get_untrusted_types(file=path)
        refused = [t for t in untrusted if not t.startswith(TRUSTED_MODULES)]
        if refused:
            raise UnsafeModelError(f"model file {path.name} holds untrusted types: {', '.join(refused)}")
        return skops.io.load(path, trusted=untrusted)
    raise TLSearchError(f"unknown model format {path.suffix!r}: expected .keras or .skops")


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
    try:
        return study.best_trial
    except ValueError:
        raise TLSearchError(f"study {study.study_name!r} has no complete trial yet") from None


def _fit(spec, params: dict, arrays) -> tuple[object, float | None]:
    """Train on every row, or, when the study declares a test hold-out, on every row but those, and score
    the model on them (the first metric)."""
    from tlsearch import models
    from tlsearch.cv import Holdout

    X, y, weights = arrays["X"], arrays["y"], arrays.get("sample_weight")
    trainer = models.trainer_for(spec, arrays)
    seed = models.full_fit_seed(spec)
    if not isinstance(spec.cv, Holdout):
        return trainer.fit_full(params, X, y, weights, seed), None
    train, test = spec.cv.partition(X, y)
    model = trainer.fit_full(params, X[train], y[train], None if weights is None else weights[train], seed)
    score = getattr(trainer, "score", None)
    return model, None if score is None else score(model, X[test], y[test])[0]


def _space_params(spec, trial: optuna.trial.FrozenTrial) -> dict:
    """The dict the study's space returned for `trial`, replayed from its stored parameters."""
    from tlsearch import spaces

    return spaces.sample(optuna.trial.FixedTrial(trial.params, trial.number), spec.space)


def _save(model, path: Path, is_keras: bool) -> None:
    if is_keras:
        model.save(path)
    else:
        import skops.io

        skops.io.dump(model, path)


def _classes(spec, y) -> list | None:
    """The labels a Keras classifier's output columns stand for (it is trained on their indices)."""
    from tlsearch.models._keras import describe_target

    classes = describe_target(np.asarray(y), spec.model.task).classes
    return None if classes is None else classes.tolist()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
