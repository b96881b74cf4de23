"""The APScheduler loop: per-cluster polling that backs off while a cluster is silent."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import WallClock, parse_platform
from coorm_bridge.core.model import Filter
from coorm_bridge.service.config import Config, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

PLATFORM = '[[cluster]]\nname = "c1"\nhosts = 4\n[[cluster]]\nname = "c2"\nhosts = 4\n'


def interval(loop, cluster):
    return loop.scheduler.get_job(f"poll-{cluster}").trigger.interval


def test_a_silent_cluster_is_polled_less_and_less_often_then_normally_again(tmp_path):
    clock = WallClock()
    adapter = MockAdapter(parse_platform(PLATFORM), clock)
    now = clock.now()
    adapter.outage("c2", now + 1, now + 4)
    config = Config(placement=PlacementSettings(poll_interval=0.25))
    store = Store(tmp_path / "bridge.sqlite")
    service = assemble(config, adapter, store)
    loop = service.loop
    loop.start()
    try:
        seen = {interval(loop, "c2")}
        deadline = time.monotonic() + 30  # a failsafe: the outage is from +1 s to +4 s
        while max(seen) < timedelta(seconds=1) and time.monotonic() < deadline:
            seen.add(interval(loop, "c2"))
            assert interval(loop, "c1") == timedelta(seconds=0.25)
            time.sleep(0.05)
        assert max(seen) >= timedelta(seconds=1)  # doubled at least twice
        deadline = time.monotonic() + 10
        while interval(loop, "c2") != timedelta(seconds=0.25):
            assert time.monotonic() < deadline, "polling did not come back to normal"
            time.sleep(0.05)
        assert service.bridge.health().status == "ok"
    finally:
        loop.stop()
        store.close()


def test_stopping_while_polls_are_running_does_not_hang(tmp_path):
    """A poll that finishes during shutdown used to wait for the scheduler's lock, which the
    shutdown held while waiting for that very poll."""

    polling = threading.Event()

    class Slow(MockAdapter):
        def snapshot(self, clusters=None):
            polling.set()
            time.sleep(0.3)
            return super().snapshot(clusters)

    adapter = Slow(parse_platform(PLATFORM), WallClock())
    config = Config(placement=PlacementSettings(poll_interval=0.05))
    store = Store(tmp_path / "bridge.sqlite")
    for _ in range(3):
        loop = assemble(config, adapter, store).loop
        polling.clear()
        loop.start()
        polling.wait(30)  # a poll is in flight (0.3 s each, every 0.05 s); 30: a failsafe
        stopper = threading.Thread(target=loop.stop)
        stopper.start()
        stopper.join(15)
        assert not stopper.is_alive(), "Loop.stop() hung"
    store.close()


def test_a_stop_waits_for_the_placement_in_progress_not_for_every_queued_one(tmp_path):
    """Ten sessions to place on a batch system that answers one reservation call at a time, as
    slowly as it likes: a stop comes once the first call is in, and no other call is made."""
    calling, answer = threading.Event(), threading.Event()
    calls: list[str] = []

    class Slow(MockAdapter):
        def create_reservation(self, cluster, spec):
            calls.append(spec.name)
            calling.set()
            answer.wait(60)  # a failsafe: the test answers once the stop has begun
            return super().create_reservation(cluster, spec)

    adapter = Slow(parse_platform(PLATFORM), WallClock())
    store = Store(tmp_path / "bridge.sqlite")
    service = assemble(Config(), adapter, store)
    loop, bridge = service.loop, service.bridge
    loop.start()
    try:
        for _ in range(10):
            sid = bridge.subscribe("alice", Filter(), "queued").session
            bridge.put_request("alice", sid, {"c1": 1}, 600)
        assert calling.wait(60)
        stopper = threading.Thread(target=loop.stop)
        stopper.start()
        while not loop.enactor.stopping:  # the stop has reached the enactor
            time.sleep(0.01)
        answer.set()
        stopper.join(60)
        assert not stopper.is_alive(), "Loop.stop() waited for more than the call in progress"
        assert len(calls) == 1
    finally:
        answer.set()
        loop.stop()
        store.close()
