"""What one process knows about a study: its fixed facts and the trials it has read, kept between calls.

Finished trials never change, so they are read once. Trial numbers are dense (a trial numbered n exists only
once n-1 does), so the trials a process knows are always a prefix 0..n-1, and what it has to read again is
exactly the unfinished trials it knows plus the numbers just past the prefix. `StudyCache` keeps that state and
says which trial ids to read; the storage does the reading. Not thread-safe: the storage holds its lock.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tlsearch.storage._codec import trial_id_of

_MIN_WINDOW = 16
_MAX_WINDOW = 4096


class StudyCache:
    """One study's immutable facts, the trials read so far, and the parameter distributions seen."""

    def __init__(self, study_id: int, name: str, directions: list[StudyDirection]) -> None:
        self.study_id = study_id
        self.name = name
        self.directions = directions
        self.trials: list[FrozenTrial] = []  # trials[n].number == n
        self.loaded = False  # whether the whole study has been read once
        self.param_distributions: dict[str, BaseDistribution] = {}
        self._unfinished: dict[int, None] = {}  # numbers, in order
        self._documents: dict[int, Mapping[str, Any]] = {}  # the last document read of each unfinished trial
        self._finished_prefix = 0  # every trial numbered below this is finished
        self._views: dict[frozenset, tuple[int, list[FrozenTrial]]] = {}
        self._window = _MIN_WINDOW

    # What to read

    def ids_to_refresh(self, waiting_only: bool = False) -> tuple[list[int], range]:
        """The ids of the unfinished trials known (`waiting_only`: of those WAITING, enough to find every WAITING
        trial, as a trial becomes WAITING only when it is created), and of the numbers just past the known
        prefix."""
        numbers = self._unfinished
        if waiting_only:
            numbers = [number for number in numbers if self.trials[number].state == TrialState.WAITING]
        unfinished = [trial_id_of(self.study_id, number) for number in numbers]
        start = len(self.trials)
        return unfinished, range(trial_id_of(self.study_id, start), trial_id_of(self.study_id, start + self._window))

    def merge(self, documents: Iterable[Mapping[str, Any]], decode, window: range | None = None) -> bool:
        """Take in trial documents just read; True when `window` came back full (more new trials may follow).

        A document past a gap in the numbers (a trial whose predecessor was inserted after this read began)
        is left for the next refresh, so the known trials stay a prefix."""
        new: dict[int, Mapping[str, Any]] = {}
        for document in documents:
            number = int(document["number"])
            if number < len(self.trials):
                self._replace(number, document, decode)
            else:
                new[number] = document
        added = 0
        while len(self.trials) in new:
            self._append(new.pop(len(self.trials)), decode)
            added += 1
        while self._finished_prefix < len(self.trials) and self.trials[self._finished_prefix].state.is_finished():
            self._finished_prefix += 1
        if window is None:
            return False
        full = added >= len(window)
        if full:
            self._window = min(self._window * 2, _MAX_WINDOW)
        elif added * 4 < self._window:
            self._window = max(self._window // 2, _MIN_WINDOW)
        return full

    def add(self, trial: FrozenTrial, document: Mapping[str, Any] | None = None) -> None:
        """Take in a trial this process wrote (created, or finished) without reading it back."""
        self.merge([document if document is not None else {"number": trial.number}], lambda _: trial)

    def _replace(self, number: int, document: Mapping[str, Any], decode) -> None:
        old = self.trials[number]
        if old.state.is_finished() or self._documents.get(number) == document:
            return
        trial = decode(document)
        self.trials[number] = trial
        self._track(trial, document)

    def _append(self, document: Mapping[str, Any], decode) -> None:
        trial = decode(document)
        self.trials.append(trial)
        self._track(trial, document)

    def _track(self, trial: FrozenTrial, document: Mapping[str, Any]) -> None:
        if trial.state.is_finished():
            self._unfinished.pop(trial.number, None)
            self._documents.pop(trial.number, None)
        else:
            self._unfinished[trial.number] = None
            self._documents[trial.number] = document
        for name, distribution in trial.distributions.items():
            self.param_distributions.setdefault(name, distribution)

    # What to answer

    def finished_trial(self, number: int) -> FrozenTrial | None:
        if number < len(self.trials) and self.trials[number].state.is_finished():
            return self.trials[number]
        return None

    def knows(self, number: int) -> bool:
        return 0 <= number < len(self.trials)

    def view(self, states: Container | None) -> list[FrozenTrial]:
        """The known trials in `states` (all when None), by number, as a new list.

        The finished prefix is filtered once per state set and extended as it grows, so a call costs
        about the number of trials past the prefix, not the size of the study."""
        if states is None:
            return list(self.trials)
        try:
            key = frozenset(states)  # type: ignore[arg-type]
        except TypeError:  # a Container that cannot be iterated
            return [trial for trial in self.trials if trial.state in states]
        covered, matching = self._views.get(key, (0, []))
        if covered < self._finished_prefix:
            matching.extend(trial for trial in self.trials[covered : self._finished_prefix] if trial.state in key)
            self._views[key] = (self._finished_prefix, matching)
        return matching + [trial for trial in self.trials[self._finished_prefix :] if trial.state in key]
