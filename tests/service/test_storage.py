"""The store stays bounded (issue 24, "the database grows without bound"): a waiting session's
events while the platform moves its view, ended sessions after ``bridge.retention``, the space
they took given back to the file system, and its size in ``/metrics``.

Over the mock platform on a virtual clock (tests/sites.py), through the loop's own steps (its
hourly job calls ``Loop.purge``) and the real HTTP app (FastAPI's TestClient)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from coorm_bridge.core.batch import JobSpec, NodeState
from coorm_bridge.core.states import AppState
from coorm_bridge.http.app import create_app
from coorm_bridge.service.config import DEFAULT_RETENTION, BridgeSettings, ConfigError, parse_config
from tests.sites import T0

HOUR = 3600
#: Passes that move every waiting session's view (on main each added one event to each).
MOVES = 200


def busy_site(make_site, waiting: int, **options):
    """``waiting`` sessions asking for all of c1, behind a local job that holds half of it for
    a long time: they wait (nothing is held before its time) while c2 changes under them."""
    site = make_site(**options)
    local = JobSpec(name="local", user="carol", argv=("sleep",), hosts=4, walltime=10**6)
    site.adapter.submit("c1", local)
    sids = [site.subscribe() for _ in range(waiting)]
    site.step(T0 + 1)
    for sid in sids:
        site.request(sid, {"c1": 8}, 600)
    site.step(T0 + 2)
    return site, sids


def test_a_waiting_sessions_events_stay_bounded_while_its_view_moves(make_site):
    site, sids = busy_site(make_site, 10)
    seen = dict.fromkeys(sids, 0)
    views: dict[str, list] = {sid: [] for sid in sids}
    for i in range(MOVES):  # a node of c2 goes down, then comes back: every view moves
        state = NodeState.DOWN if i % 2 == 0 else NodeState.UP
        site.adapter.set_node_state("c2", "c2-1", state)
        site.step(T0 + 3 + i)
        if i % 50 == 0:  # a launcher following its events sees each move
            for sid in sids:
                for event in site.store.events(sid, after=seen[sid]):
                    seen[sid] = event.seq
                    views[sid] += [event]
    for sid in sids:
        assert site.state(sid) is AppState.WAITING
        kept = site.store.events(sid)
        assert len(kept) <= 2, [e.type for e in kept]  # was one more at every pass
        assert site.store.last_seq(sid) > MOVES  # numbers go on
        (last,) = [e for e in kept if e.type == "change"]
        c2 = {c.cluster: c.profile for c in last.changes if c.profile is not None}["c2"]
        assert c2.steps[0][1] == 4 - (MOVES % 2 == 1)  # the latest view: c2-1 up again
        assert last.estimated_start == site.store.session(sid).estimated_start
        assert len(views[sid]) >= 4  # each read found the new view, with a number above it


def test_ended_sessions_go_after_the_retention_and_the_file_shrinks(make_site):
    retention = 2 * HOUR
    site, sids = busy_site(make_site, 60, config={"bridge": BridgeSettings(retention=retention)})
    for i in range(40):  # bulk for the sessions to take with them
        site.adapter.set_node_state("c2", "c2-1", NodeState.DOWN if i % 2 else NodeState.UP)
        site.step(T0 + 3 + i)
    with site.store.transaction():
        for sid in sids:
            for _ in range(20):
                site.store.append_event(sid, {"type": "killed", "time": T0, "reason": "x" * 900})
    old, recent = sids[:-1], sids[-1]
    ended = site.adapter.now()
    for sid in old:
        site.bridge.withdraw("alice", sid)
    site.step(T0 + HOUR)
    site.bridge.withdraw("alice", recent)
    app = TestClient(create_app(site.service, tokens={"alice-token-0123456789": "alice"}))
    headers = {"Authorization": "Bearer alice-token-0123456789"}
    assert app.get(f"/v1/sessions/{old[0]}", headers=headers).status_code == 200
    before = site.store.size()

    site.step(ended + retention)
    assert site.loop.purge() == 0  # none ended long enough ago
    site.step(ended + retention + 1)
    assert site.loop.purge() == len(old)
    assert app.get(f"/v1/sessions/{old[0]}", headers=headers).status_code == 404
    assert app.get(f"/v1/sessions/{old[0]}/events", headers=headers).status_code == 404
    assert site.store.session(recent).state is AppState.CANCELLED  # still within its retention
    assert [e.type for e in site.store.events(recent)][-1] == "ended"
    after = site.store.size()
    assert after < before / 3, (before, after)  # given back to the file system, WAL included
    site.step(T0 + HOUR + retention + 1)
    assert site.loop.purge() == 1
    assert site.store.sessions() == []


def test_the_store_size_is_a_metric_of_the_real_app(make_site):
    site, _ = busy_site(make_site, 3)
    app = TestClient(create_app(site.service))
    lines = app.get("/metrics").text.splitlines()
    (line,) = [line for line in lines if line.startswith("coorm_store_bytes ")]
    wal = site.store.path.with_name(site.store.path.name + "-wal")
    on_disk = site.store.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    assert float(line.split()[1]) == on_disk > 0
    assert "# TYPE coorm_store_bytes gauge" in lines


@pytest.mark.parametrize("value", ["10", "31708800", '"1w"', "-1"])
def test_a_retention_out_of_bounds_is_refused_by_name(value):
    with pytest.raises(ConfigError, match=r"bridge\.retention"):
        parse_config(f"[bridge]\nretention = {value}\n", source="bridge.toml")


def test_the_retention_is_a_week_by_default():
    assert parse_config("").bridge.retention == DEFAULT_RETENTION == 7 * 24 * HOUR
    assert parse_config("[bridge]\nretention = 60\n").bridge.retention == 60
