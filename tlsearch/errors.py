"""Every error tlsearch raises, in one place: each one is a `TLSearchError`, and keeps the builtin base a caller
may already catch (`except ValueError`). The command line prints a `TLSearchError`'s message as one line.

A model's own code may raise `RetryableTrialError` or `FatalTrialError` to decide whether its trial is retried;
that choice is checked before tlsearch's own rules (see the faults guide). `tlsearch.cv.EpochPruned`, the signal
that stops a trial between epochs, is an `optuna.TrialPruned` as well and lives with the pruners. The one
exception, `main_guard_exit`, ends a script that lacks the main guard.
"""

from __future__ import annotations


class TLSearchError(Exception):
    """Base of every error caused by input or state the user can fix; its message says what and how."""


# ---- a trial's failure, as the model's code marks it -----------------------------------------------------------


class RetryableTrialError(TLSearchError):
    """Raise it (or raise from it) in a model's code to have the trial retried, up to `StudySpec.retries` times,
    whatever tlsearch's own rules would say of its cause."""


class FatalTrialError(TLSearchError):
    """Raise it (or raise from it) in a model's code to fail the trial for good: it is never retried."""


class NonFiniteLossError(TLSearchError, FloatingPointError):
    """Training produced a NaN or infinite loss (usually a too-large learning rate): the trial fails."""


class NonFiniteScoreError(TLSearchError, FloatingPointError):
    """A fold's score is NaN or infinite: the trial fails instead of reporting it."""


# ---- what a study declares ---------------------------------------------------------------------------------------


class StudySpecError(TLSearchError, ValueError):
    """A StudySpec field with a bad value; the message names the field."""


class StudyFileError(TLSearchError):
    """A study file that is missing, fails to import, or defines no StudySpec named `study`."""


class InvalidSpaceError(TLSearchError, ValueError):
    """A search space that cannot be sampled; the message names the space and, when known, the parameter."""


# ---- files on this machine ---------------------------------------------------------------------------------------


class _FileError(TLSearchError, OSError):
    def __str__(self) -> str:
        return str(self.strerror)  # the one line, without OSError's "[Errno N]" prefix


class SymlinkRefusedError(_FileError):
    """tlsearch was asked to write through a symbolic link: it never follows one."""


class DiskFullError(_FileError):
    """A write ran out of disk space or quota (or past the file-size limit)."""


# ---- the study store ---------------------------------------------------------------------------------------------


class MongoUnavailableError(TLSearchError, ConnectionError):
    """The MongoDB server cannot be reached (or stayed unreachable longer than the retry window)."""


class GridFSDamagedError(TLSearchError, ValueError):
    """A GridFS file whose chunks are missing, out of order or of the wrong size. `problem` is "damaged" or
    "truncated", `detail` says where."""

    def __init__(self, problem: str, detail: str) -> None:
        super().__init__(f"{problem} ({detail})")
        self.problem, self.detail = problem, detail


class JournalDamagedError(TLSearchError):
    """A line in the middle of the journal file is not a journal operation."""


class SlotCounterError(TLSearchError, ValueError):
    """The trial-slot counter holds something no driver wrote: not obeyed."""


# ---- the dataset store, the host cache and fold plans ------------------------------------------------------------


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


class DatasetChangedError(TLSearchError):
    """The dataset a running study is bound to no longer holds the content the study was bound to."""


# ---- reading a study -----------------------------------------------------------------------------------------------


class UnsafeModelError(TLSearchError):
    """A model file that was changed since it was saved, or that holds code-carrying types."""


# ---- running a study -----------------------------------------------------------------------------------------------


def main_guard_exit(what: str) -> SystemExit:
    """What ends a script that calls tlsearch.run outside `if __name__ == "__main__":` (and each worker process
    that imports it): a SystemExit, so the script ends with this one line rather than a traceback."""
    return SystemExit(f'tlsearch: error: {what}: put the call under `if __name__ == "__main__":`')
