"""The admin commands in process (``coorm-bridge sessions``, ``cancel``, ``drain``, ``resume``):
who may do what, what a launcher is told, what the batch system holds afterwards, and that a
drain outlives the service that recorded it. tests/daemon/test_daemon_admin.py runs them
against a real daemon through the command line."""

from __future__ import annotations

import logging

import pytest

from coorm_bridge.core.states import AppState
from coorm_bridge.service.config import BridgeSettings
from coorm_bridge.service.errors import NotAdmin, NotFound
from tests import sites

T0 = sites.T0
ADMIN = "root"


@pytest.fixture
def site(make_site):
    made = make_site(config={"bridge": BridgeSettings(admins=(ADMIN,))})
    made.step(T0)
    return made


def started(site, user: str, nodes: dict[str, int], at: int) -> str:
    """A session of ``user``'s started at ``at`` (the platform is free)."""
    sid = site.subscribe(user)
    site.request(sid, nodes, 1000, user=user)
    site.step(at)
    site.step(at + 1)
    assert site.state(sid) is AppState.STARTED
    return sid


def test_an_admin_sees_every_session_with_its_placeholders_and_a_user_only_their_own(site):
    alice = started(site, "alice", {"c1": 2}, T0 + 1)
    bob = site.subscribe("bob")
    listed = site.service.admin.sessions(ADMIN)
    assert [(s.session, s.owner) for s in listed] == [(alice, "alice"), (bob, "bob")]
    (held,) = listed[0].placeholders
    assert (held.cluster, held.status, held.hosts) == ("c1", "held", 2)
    assert held.name in site.ours("c1")
    assert listed[0].started_at == T0 + 1
    assert listed[0].end == T0 + 1 + 1000
    assert listed[1].placeholders == ()
    assert listed[1].created == T0 + 2
    by_state = site.service.admin.sessions(ADMIN, state=AppState.SUBMITTED)
    assert [s.session for s in by_state] == [bob]
    assert [s.session for s in site.service.admin.sessions(ADMIN, owner="alice")] == [alice]
    assert [s.session for s in site.service.admin.sessions("bob")] == [bob]
    with pytest.raises(NotAdmin, match="only admins see other users' sessions"):
        site.service.admin.sessions("bob", owner="alice")


def test_an_admin_cancels_a_started_session_its_launcher_is_told_why_and_its_hosts_go(site, caplog):
    sid = started(site, "alice", {"c1": 2, "c2": 1}, T0 + 1)
    with caplog.at_level(logging.INFO, logger="coorm_bridge.audit"):
        row = site.service.admin.cancel(ADMIN, sid, "node maintenance at noon")
    assert row.state is AppState.FINISHED
    killed, ended = site.events(sid)[-2:]
    assert killed.type == "killed"
    assert killed.reason == f"cancelled by {ADMIN}: node maintenance at noon"
    assert (ended.type, ended.state) == ("ended", AppState.FINISHED)
    audit = [r for r in caplog.records if r.name == "coorm_bridge.audit"]
    assert [r.getMessage() for r in audit] == [
        f"admin root cancelled session {sid} of alice (was started): node maintenance at noon"
    ]
    site.step(T0 + 3)
    assert site.ours("c1") == site.ours("c2") == {}
    assert site.store.placeholders(sid) == []
    again = site.service.admin.cancel(ADMIN, sid, "twice")  # harmless: nothing changes
    assert again.state is AppState.FINISHED
    assert site.events(sid)[-1] == ended


def test_a_user_cancels_their_own_waiting_session_and_not_anothers(site):
    mine = site.subscribe("alice")
    site.request(mine, {"c1": 9}, 100, user="alice")  # more than c1 has: it waits
    theirs = started(site, "bob", {"c2": 1}, T0 + 1)
    before = site.events(theirs)
    with pytest.raises(NotFound):
        site.service.admin.cancel("alice", theirs, "mine now")
    assert site.state(theirs) is AppState.STARTED
    assert site.events(theirs) == before
    row = site.service.admin.cancel("alice", mine, "wrong input deck")
    assert row.state is AppState.CANCELLED
    withdrawn, _ = site.events(mine)[-2:]
    assert (withdrawn.type, withdrawn.reason) == (
        "withdrawn",
        "cancelled by alice: wrong input deck",
    )


def test_a_drained_cluster_gets_no_new_placeholder_and_resume_lets_the_waiting_start(site):
    holder = started(site, "alice", {"c1": 2}, T0 + 1)
    held = set(site.ours("c1"))
    info = site.service.admin.drain(ADMIN, "c1", "disk swap")
    assert (info.drained, info.by, info.reason) == (True, ADMIN, "disk swap")
    assert site.bridge.health().drained == ("c1",)
    waiting = site.subscribe("bob")
    site.request(waiting, {"c1": 1}, 100, user="bob")
    elsewhere = site.subscribe("carol")
    site.request(elsewhere, {"c2": 1}, 100, user="carol")
    site.step(T0 + 10)
    site.step(T0 + 11)
    assert site.state(waiting) is AppState.WAITING
    assert site.store.session(waiting).estimated_start is None  # never, while drained
    assert site.state(elsewhere) is AppState.STARTED  # other clusters go on
    assert site.state(holder) is AppState.STARTED
    assert set(site.ours("c1")) == held
    site.assemble()  # as after a restart: the drain was in the store
    site.step(T0 + 20)
    site.step(T0 + 21)
    assert site.state(waiting) is AppState.WAITING
    assert set(site.ours("c1")) == held
    assert site.service.admin.resume(ADMIN, "c1").drained is False
    assert site.bridge.health().drained == ()
    site.step(T0 + 22)
    site.step(T0 + 23)
    assert site.state(waiting) is AppState.STARTED


def test_only_admins_drain_or_resume_and_only_known_clusters(site, caplog):
    with pytest.raises(NotAdmin, match="only admins drain clusters"):
        site.service.admin.drain("alice", "c1", None)
    with pytest.raises(NotAdmin, match="only admins resume clusters"):
        site.service.admin.resume("alice", "c1")
    with pytest.raises(NotFound, match="no cluster c9; clusters: c1, c2"):
        site.service.admin.drain(ADMIN, "c9", None)
    with pytest.raises(NotFound):
        site.service.admin.resume(ADMIN, "c9")
    assert site.store.drained() == {}
    with caplog.at_level(logging.INFO, logger="coorm_bridge.audit"):
        site.service.admin.drain(ADMIN, "c2", None)
        site.service.admin.resume(ADMIN, "c2")
    audit = [r.getMessage() for r in caplog.records if r.name == "coorm_bridge.audit"]
    assert audit == [
        "admin root drained cluster c2: no reason given",
        f"admin root resumed cluster c2 (drained by root since {T0})",
    ]
