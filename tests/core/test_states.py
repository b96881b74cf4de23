"""The application state machine: one table, checked by the store before any write."""

from itertools import pairwise

import pytest

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import (
    ACTIVE,
    FINAL,
    HOLDING,
    PLACED,
    TRANSITIONS,
    AppState,
    IllegalTransition,
    transition,
)
from coorm_bridge.store import Store

S = AppState
SLIDES = (S.SUBMITTED, S.REQUEST_SENT, S.WAITING, S.STARTED, S.FINISH_SENT, S.GHOST, S.FINISHED)


def test_the_slides_chain_is_allowed_and_final_states_are_final():
    for old, new in pairwise(SLIDES):
        assert transition(old, new) is new
    assert all(not TRANSITIONS[state] for state in FINAL)
    assert set(TRANSITIONS) == set(AppState)


def test_every_state_is_reachable_and_every_path_ends():
    reached, frontier = {S.SUBMITTED}, [S.SUBMITTED]
    while frontier:
        for new in TRANSITIONS[frontier.pop()]:
            if new not in reached:
                reached.add(new)
                frontier.append(new)
    assert reached == set(AppState)
    # Nothing leads back to a placed state once hosts were held: a started application never
    # waits again.
    assert not any(new in PLACED for old in HOLDING for new in TRANSITIONS[old])


def test_the_groups_partition_the_states():
    assert set(ACTIVE) == set(PLACED) | set(HOLDING)
    assert set(ACTIVE) | set(FINAL) == set(AppState)
    assert not set(ACTIVE) & set(FINAL)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.STARTED, S.WAITING),
        (S.GHOST, S.STARTED),
        (S.FINISHED, S.SUBMITTED),
        (S.CANCELLED, S.REQUEST_SENT),
        (S.SUBMITTED, S.STARTED),
        (S.STARTED, S.CANCELLED),
    ],
)
def test_a_change_the_table_does_not_allow_is_refused(old, new):
    with pytest.raises(IllegalTransition, match=f"from {old} to {new}"):
        transition(old, new)


def test_the_store_refuses_an_illegal_change_and_writes_nothing(tmp_path):
    with Store(tmp_path / "bridge.sqlite") as store:
        row = store.create_session("alice", None, Filter(), ("c1",), now=1)
        request = Request(nodes={"c1": 1}, duration=10)
        store.update_session(row.id, now=2, state=S.REQUEST_SENT, request=request)
        waiting = store.update_session(row.id, now=3, state=S.WAITING)
        with pytest.raises(IllegalTransition):
            store.update_session(row.id, now=4, state=S.GHOST, started_at=3, done_at=4)
        assert store.session(row.id) == waiting
        cancelled = store.update_session(row.id, now=5, state=S.CANCELLED)
        with pytest.raises(IllegalTransition):
            store.update_session(row.id, now=6, state=S.REQUEST_SENT)
        assert store.session(row.id) == cancelled
