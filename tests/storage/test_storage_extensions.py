"""tlsearch's storage extensions are declared protocols that both study stores implement, and trial slots
behave alike on both: `limit` slots can be taken, no more, and a released one can be taken again."""

from __future__ import annotations

import optuna
import pytest
from optuna.study import StudyDirection

from tlsearch.storage._extensions import BatchedUserAttrs, FoldCounter, TrialSlotCounter
from tlsearch.storage._journal import open_journal
from tlsearch.storage._slots import ClaimedFolds, TrialSlots


@pytest.fixture(params=["mongo", "journal"])
def storage(request, tmp_path):
    if request.param == "mongo":
        return request.getfixturevalue("mongo_storage")
    return open_journal(str(tmp_path / "studies.journal"))


def test_both_stores_implement_the_extensions(storage):
    assert isinstance(storage, BatchedUserAttrs) and isinstance(storage, TrialSlotCounter)


def test_trial_slots_are_counted_alike_on_both_stores(storage):
    slots = TrialSlots(storage, storage.create_new_study([StudyDirection.MINIMIZE]))
    assert [slots.claim(3, lambda: 1) for _ in range(3)] == [2, 3, None]  # one taken before the counter
    slots.release()
    assert [slots.claim(3, lambda: 1) for _ in range(2)] == [3, None]


def test_a_store_without_slots_is_refused_by_name():
    with pytest.raises(TypeError, match="InMemoryStorage keeps no trial slots"):
        TrialSlots(optuna.storages.InMemoryStorage(), 0)


def test_folds_are_claimed_and_given_back_alike_on_both_stores(storage):
    study_id = storage.create_new_study([StudyDirection.MINIMIZE])
    folds = ClaimedFolds(storage, study_id)
    assert folds.count() is None and isinstance(storage, FoldCounter)
    assert [folds.claim(3, 10, lambda: 2) for _ in range(3)] == [5, 8, None]  # 2 trained before the counter
    folds.release(2)  # a trial pruned after its first fold
    assert folds.claim(3, 10, lambda: 0) == 9 and folds.count() == 9
    assert folds.claim(3, 8, lambda: 0) is None  # a smaller budget than what is used: nothing more, no error
    folds.release(20)
    assert folds.count() == 0
