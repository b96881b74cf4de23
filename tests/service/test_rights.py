"""A batch system that will not let the bridge's own account hold reservations (Slurm: not an
operator): the admin is told once, in health and at ERROR; no session ends for it, each waits
and retries with back-off, and everything resumes by itself once the rights are granted.

In-process on a mock platform and a virtual clock; tests/slurm/test_slurm_rights.py does the
same with a real Slurm and a real daemon."""

from __future__ import annotations

import itertools
import logging

from prometheus_client.core import Metric

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.cli import status
from coorm_bridge.core.batch import LacksRights, ReservationHandle, ReservationSpec
from coorm_bridge.core.model import Filter
from coorm_bridge.core.states import AppState
from coorm_bridge.http.metrics import BridgeCollector
from coorm_bridge.protocol import Problem
from coorm_bridge.service.problems import RECHECK_EVERY
from coorm_bridge.service.wiring import Service
from tests import sites

T0 = sites.T0
REMEDY = "Slurm refuses to let bridge create reservations. To fix, make it an operator."
POLL = 5


class Denying(MockAdapter):
    """A mock platform whose clusters in ``denied`` refuse the bridge itself."""

    denied: set[str]

    def _deny(self, cluster: str) -> None:
        if cluster in self.denied:
            raise LacksRights(f"{cluster}: {REMEDY}", cluster=cluster, reason=REMEDY)

    def check_rights(self, cluster: str) -> None:
        self.checks += 1
        self._deny(cluster)

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self._deny(cluster)
        return super().create_reservation(cluster, spec)

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self._deny(cluster)
        return super().update_reservation(cluster, spec)


class Site(sites.Site):
    def __init__(self, tmp_path, denied: set[str]) -> None:
        placement = {"attempts": 3, "poll_interval": POLL, "hold_first": 1}
        super().__init__(tmp_path, adapter=Denying, policy={"fair_start": 5}, placement=placement)
        self.adapter.denied = denied
        self.adapter.checks = 0
        self.loop.check_rights()  # as the loop does before serving


def rights_metric(service: Service) -> dict[str, float]:
    found: list[Metric] = [
        m for m in BridgeCollector(service).collect() if m.name == "coorm_cluster_rights"
    ]
    return {s.labels["cluster"]: s.value for s in found[0].samples}


def errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_lacking_rights_is_told_at_start_once_and_in_health(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    site = Site(tmp_path, denied={"c1"})
    site.step(T0)
    health = site.bridge.health()
    assert health.status == "degraded"
    assert health.problems == (Problem(kind="rights", clusters=("c1",), message=REMEDY, since=T0),)
    assert all(c.status == "ok" for c in health.clusters.values())  # reading works
    assert errors(caplog) == [f"cluster c1: {REMEDY}"]
    assert rights_metric(site.service) == {"c1": 0, "c2": 1}


def test_sessions_wait_are_told_and_resume_once_the_rights_are_granted(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    site = Site(tmp_path, denied={"c1"})
    sid = site.bridge.subscribe("alice", Filter(clusters=("c1", "c2")), None).session
    site.bridge.put_request("alice", sid, {"c1": 2, "c2": 2}, 100)
    t, seen, failed = T0, 0, []
    for t in range(T0 + 1, T0 + 200):  # many attempts, backing off
        site.step(t)
        # As its launcher follows them: a placement_failed supersedes the one before it in the
        # store (tests/store/test_compaction.py), each is read as it comes.
        for event in site.store.events(sid, after=seen):
            seen = event.seq
            failed += [event] if event.type == "placement_failed" else []
    assert site.events(sid, "placement_failed") == failed[-1:]
    assert 3 <= len(failed) <= 10, [e.retry_at for e in failed]
    first = failed[0]
    assert "the bridge lacks the rights to hold reservations on c1" in first.reason
    assert "admin was told" in first.reason
    assert REMEDY in first.reason
    # Backed off from the first failure: poll_interval, then twice that, and so on.
    gaps = [b.retry_at - a.retry_at for a, b in itertools.pairwise(failed)]
    assert gaps[:2] == [2 * POLL, 4 * POLL]
    assert site.store.session(sid).state is AppState.WAITING
    assert not site.events(sid, "error")
    assert not site.events(sid, "ended")
    assert errors(caplog) == [f"cluster c1: {REMEDY}"]  # once, however many attempts

    site.adapter.denied = set()  # the admin grants them
    deadline = t + 16 * POLL + 2
    while not site.events(sid, "start") and t < deadline:
        t += 1
        site.step(t)
    assert site.store.session(sid).state is AppState.STARTED
    assert site.bridge.health().status == "ok"
    assert site.bridge.health().problems == ()
    assert rights_metric(site.service) == {"c1": 1, "c2": 1}
    solved = [r.getMessage() for r in caplog.records if "solved" in r.getMessage()]
    assert solved == ["cluster c1: solved: the bridge may hold reservations there again"]


def test_without_sessions_health_clears_by_asking_again(tmp_path):
    site = Site(tmp_path, denied={"c2"})
    site.step(T0 + 1)
    checks = site.adapter.checks
    site.step(T0 + 2)
    assert site.adapter.checks == checks  # not asked again at every poll
    site.adapter.denied = set()
    site.step(T0 + RECHECK_EVERY - 1)
    assert site.bridge.health().status == "degraded"
    site.step(T0 + RECHECK_EVERY)
    assert site.bridge.health().status == "ok"


class _Client:
    """``coorm-bridge status``'s client, answering with the site's health."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.url = "unix:///run/coorm-bridge/bridge.sock"

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def health(self):
        return self.site.bridge.health()

    def clusters(self):
        return self.site.bridge.infos

    def availability(self):
        return self.site.bridge.availability()

    def sessions(self):
        return []


def test_status_shows_the_problem_and_its_remedy(tmp_path, monkeypatch, capsys):
    site = Site(tmp_path, denied={"c1", "c2"})
    site.step(T0)
    monkeypatch.setattr(status, "BridgeClient", lambda *args, **kwargs: _Client(site))
    assert status.show_status(None, None) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("coorm-bridge at unix:///run/coorm-bridge/bridge.sock: degraded")
    assert lines[1] == f"  rights on c1, c2: {REMEDY}"


def test_a_placeholder_slurm_lost_waits_for_the_rights_instead_of_killing_its_session(tmp_path):
    site = Site(tmp_path, denied=set())
    sid = site.bridge.subscribe("alice", Filter(clusters=("c1", "c2")), None).session
    site.bridge.put_request("alice", sid, {"c1": 2, "c2": 2}, 1000)
    site.step(T0 + 1)
    assert site.store.session(sid).state is AppState.STARTED
    (held,) = [p for p in site.store.placeholders(sid) if p.cluster == "c1"]
    MockAdapter.delete_reservation(site.adapter, "c1", held.name)  # the batch system lost it
    site.adapter.denied = {"c1"}
    assert site.loop.reconcile() == {}
    assert site.store.session(sid).state is AppState.STARTED
    assert not site.events(sid, "killed")
    site.adapter.denied = set()
    assert site.loop.reconcile() == {"recreated": 1}
    assert held.name in {r.name for r in site.adapter.snapshot(["c1"]).clusters["c1"].reservations}
