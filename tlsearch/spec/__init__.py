"""What a study is: `StudySpec`, the model kinds it declares, and loading it from a study file."""

from tlsearch.errors import StudyFileError, StudySpecError
from tlsearch.models import CustomLoop, KerasModel, SklearnModel
from tlsearch.spec._spec import StudySpec, example_path, examples, load_study_file, study_file_path

__all__ = [
    "CustomLoop",
    "KerasModel",
    "SklearnModel",
    "StudyFileError",
    "StudySpec",
    "StudySpecError",
    "example_path",
    "examples",
    "load_study_file",
    "study_file_path",
]
