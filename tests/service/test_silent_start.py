"""A batch system that does not answer at start, or stops answering in the middle of a poll.

The daemon starts all the same (each cluster with its properties as last read, one never read
left out until it answers), reports the clusters degraded with the batch system's words, and
recovers once it answers; a poll still running when the next is due is counted, and marks its
cluster stale once it has run for two intervals. The same on the real Slurm:
tests/slurm/test_slurm_down.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.core.batch import PlatformSnapshot, Unavailable
from coorm_bridge.core.model import ClusterInfo, Filter
from coorm_bridge.service.catalogue import REMEMBERED
from coorm_bridge.service.polling import Poller
from tests import sites

WORDS = "the controller does not answer: Unable to contact slurm controller (connect failure)"


class Silent(MockAdapter):
    """The mock platform, silent while ``silent`` is set (as a stopped controller is), and
    naming its clusters without asking it, as the batch adapters do."""

    silent = False

    def configured(self) -> list[str]:
        return [spec.name for spec in self.site.spec.clusters]

    def clusters(self) -> list[ClusterInfo]:
        if self.silent:
            raise Unavailable(f"c1: {WORDS}", cluster="c1")
        return super().clusters()

    def snapshot(self, clusters: list[str] | None = None) -> PlatformSnapshot:
        if self.silent:
            raise Unavailable(f"{(clusters or ['c1'])[0]}: {WORDS}")
        return super().snapshot(clusters)


def silent_site(folder: Path) -> sites.Site:
    Silent.silent = False
    return sites.Site(folder, adapter=Silent)


@pytest.fixture
def restore() -> Any:
    yield
    Silent.silent = False


def test_a_first_start_without_an_answer_serves_no_cluster_until_one_answers(tmp_path, restore):
    Silent.silent = True
    site = sites.Site(tmp_path, adapter=Silent)  # before: Unavailable, and no daemon
    service = site.service
    assert service.catalogue.infos == []  # never read: nothing to offer yet
    service.loop.start()
    try:
        health = service.bridge.health()
        assert health.status == "degraded"
        assert set(health.clusters) == {"c1", "c2"}  # polled and shown all the same
        for cluster in health.clusters.values():
            assert cluster.status == "stale"
            assert cluster.error is not None
            assert WORDS in cluster.error
        Silent.silent = False
        for cluster in ("c1", "c2"):
            service.loop.poll(cluster)
        assert [info.name for info in service.catalogue.infos] == ["c1", "c2"]
        assert service.bridge.health().status == "ok"
        subscribed = service.bridge.subscribe("alice", Filter(), None)  # seen from now on
        assert [c.name for c in subscribed.clusters] == ["c1", "c2"]
        assert service.store.meta(REMEMBERED) is not None  # for the next start
    finally:
        service.close()


def test_a_restart_without_an_answer_keeps_the_clusters_as_last_read(tmp_path, restore):
    site = silent_site(tmp_path)
    before = site.service.catalogue.infos
    row = site.service.bridge.subscribe("alice", Filter(), None)
    site.service.close()
    Silent.silent = True
    site.store = sites.Store(tmp_path / "bridge.sqlite")
    site.assemble()
    service = site.service
    assert service.catalogue.infos == before  # as remembered
    assert set(service.catalogue.unread) == {"c1", "c2"}
    health = service.bridge.health()
    assert health.status == "degraded"
    assert "its properties are not read yet" in (health.clusters["c1"].error or "")
    info = service.bridge.info("alice", row.session)  # the session waits, its clusters stale
    assert set(info.stale) == {"c1", "c2"}
    Silent.silent = False
    service.loop.poll("c1")
    service.loop.poll("c2")
    assert service.catalogue.unread == {}
    assert service.bridge.health().status == "ok"
    service.close()


class Stalled(MockAdapter):
    """The mock platform whose snapshots wait while ``gate`` is clear (a stopped controller)."""

    gate = threading.Event()
    entered = threading.Event()

    def snapshot(self, clusters: list[str] | None = None) -> PlatformSnapshot:
        self.entered.set()
        self.gate.wait()
        return super().snapshot(clusters)


def test_a_poll_that_overruns_is_counted_and_marks_its_cluster_stale_after_two_intervals(
    tmp_path,
):
    Stalled.gate.set()
    site = sites.Site(tmp_path, adapter=Stalled)
    now = [0.0]
    poller = Poller(site.adapter, ["c1", "c2"], "coorm-", 5.0, clock=lambda: now[0])
    for cluster in ("c1", "c2"):
        poller.poll(cluster)
    Stalled.gate.clear()
    Stalled.entered.clear()
    stalled = threading.Thread(target=poller.poll, args=("c1",))
    stalled.start()
    try:
        assert Stalled.entered.wait(30)
        now[0] = 9.0  # under two intervals: still fresh
        assert poller.overran("c1")  # the next one due: counted, not made
        assert not poller.statuses()["c1"].stale
        now[0] = 10.0
        assert poller.overran("c1")
        statuses = poller.statuses()
        assert statuses["c1"].stale
        assert statuses["c1"].overruns == 2
        assert statuses["c1"].error == "its poll has not answered for 10 s"
        assert not statuses["c2"].stale
        assert statuses["c2"].overruns == 0
        assert poller.stale() == ("c1",)
        assert not poller.overran("c2")
    finally:
        Stalled.gate.set()
        stalled.join()
    statuses = poller.statuses()
    assert not statuses["c1"].stale
    assert statuses["c1"].error is None
    assert statuses["c1"].overruns == 2
    assert not poller.overran("c1")
    site.service.close()
