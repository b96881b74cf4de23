"""``Store.active_sessions``: kept in memory for the policy pass, it must always say what the file
says, whatever commits, whatever rolls back (a whole transaction or one savepoint)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import ACTIVE, AppState
from coorm_bridge.store import SessionRow, Store
from tests.profiles import fewer

REQUEST = Request(nodes={"c1": 1}, duration=60)


class Undo(Exception):
    """Raised inside a block so that its writes are rolled back."""


def step(store: Store, kind: str, pick: int) -> None:
    """One change: a new session, or one of the existing sessions' next state."""
    rows = store.sessions()
    if kind == "new" or not rows:
        store.create_session("alice", "run", Filter(), ("c1",), 100)
        return
    row = rows[pick % len(rows)]
    nexts: dict[AppState, dict[str, object]] = {
        AppState.SUBMITTED: {"state": AppState.REQUEST_SENT, "request": REQUEST},
        AppState.REQUEST_SENT: {"state": AppState.WAITING, "estimated_start": 200},
        AppState.WAITING: {"state": AppState.STARTED, "started_at": 200, "alloc_end": 260},
        AppState.STARTED: {"state": AppState.FINISH_SENT, "done_at": 230},
        AppState.FINISH_SENT: {"state": AppState.GHOST},
        AppState.GHOST: {"state": AppState.FINISHED},
    }
    if kind == "cancel" and row.state in (AppState.SUBMITTED, AppState.WAITING):
        store.update_session(row.id, now=100, state=AppState.CANCELLED)
    elif row.state in nexts:
        store.update_session(row.id, now=100, **nexts[row.state])  # type: ignore[arg-type]


KINDS = st.sampled_from(["new", "next", "cancel"])
STEPS = st.lists(st.tuples(KINDS, st.integers(0, 50)), min_size=1, max_size=4)
#: How a group of steps is written: alone, in a transaction that rolls back, or in a savepoint of
#: a transaction that commits (the steps before and after the savepoint kept).
HOW = st.sampled_from(["commit", "rollback", "savepoint-undone", "savepoint-kept"])


def truth(store: Store) -> list[SessionRow]:
    return store.sessions(states=ACTIVE)


@settings(max_examples=fewer(60), deadline=None)
@given(st.lists(st.tuples(HOW, STEPS, STEPS), min_size=1, max_size=12))
def test_the_active_sessions_in_memory_are_those_of_the_file(groups) -> None:
    with tempfile.TemporaryDirectory() as folder, Store(Path(folder) / "bridge.db") as store:
        assert store.active_sessions() == []  # read once: kept in memory from here on
        for how, outer, inner in groups:
            try:
                with store.transaction():
                    for kind, pick in outer:
                        step(store, kind, pick)
                    if how.startswith("savepoint"):
                        try:
                            with store.transaction():
                                for kind, pick in inner:
                                    step(store, kind, pick)
                                # Inside, the writer reads its own uncommitted writes.
                                assert store.active_sessions() == truth(store)
                                if how == "savepoint-undone":
                                    raise Undo
                        except Undo:
                            pass
                    if how == "rollback":
                        raise Undo
            except Undo:
                pass
            assert store.active_sessions() == truth(store)
            assert [row.order for row in store.active_sessions()] == sorted(
                row.order for row in store.active_sessions()
            )
