"""tlsearch's three stores (study, dataset, artifact) opened together, the artifact store, and this machine's
record of study files."""

from tlsearch.stores._artifacts import MongoArtifactStore, open_artifact_store
from tlsearch.stores._stores import Stores, check_study_name, require_shared
from tlsearch.stores._study_files import StudyFileChangedWarning, UntrustedRecordWarning

__all__ = [
    "MongoArtifactStore",
    "Stores",
    "StudyFileChangedWarning",
    "UntrustedRecordWarning",
    "check_study_name",
    "open_artifact_store",
    "require_shared",
]
