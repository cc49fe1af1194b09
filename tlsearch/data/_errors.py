"""Errors of the dataset store, the host cache and fold plans; each message says what is wrong and what to do."""

from __future__ import annotations

from tlsearch.errors import TLSearchError


class DatasetError(TLSearchError):
    """Base of every dataset error."""


class DatasetNotFoundError(DatasetError, KeyError):
    """No dataset (or fold plan) with that name, version or hash is stored."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class FoldPlanNotFoundError(DatasetNotFoundError):
    """No fold plan with that hash is stored."""


class DatasetExistsError(DatasetError):
    """The name already holds different content, and no new version was asked for."""


class DatasetValidationError(DatasetError, ValueError):
    """The arrays, columns or metadata given to push cannot be stored as they are."""


class DatasetCorruptedError(DatasetError):
    """Stored or cached bytes do not match the dataset's content hash."""


class DatasetBusyError(DatasetError):
    """Another process has been uploading or deleting the same content for too long."""


class FoldPlanMismatchError(DatasetError):
    """A stored fold plan does not belong to the dataset or splitter a study now uses."""


class UnsafeStoreValueError(DatasetError, ValueError):
    """A value read from the store that would become part of a local path does not have its exact form."""
