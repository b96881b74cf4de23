"""Clusters one batch-system answer covers are polled together, and a failure stays with the
cluster it belongs to."""

from __future__ import annotations

from coorm_bridge.adapters.batch.adapter import BatchAdapter
from coorm_bridge.adapters.batch.backend import BatchFailure, Binding
from coorm_bridge.adapters.batch.settings import BatchCluster, BatchSettings
from coorm_bridge.core.batch import Node
from coorm_bridge.service.polling import Poller
from tests.adapters.batch.test_adapter import NOW, Memory


class Shared(Memory):
    """One controller for a and b, another for c; reads counted; b's partition unreadable."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs = []
        self.reads: list[tuple[str, ...]] = []
        self.broken: set[str] = set()

    def source(self, binding):
        return "one" if binding.name in ("a", "b") else "two"

    def read_all(self, bindings, now):
        self.reads.append(tuple(b.name for b in bindings))
        return {
            b.name: BatchFailure("other", f"{b.name} unreadable")
            if b.name in self.broken
            else ([Node(name=f"{b.name}0")], [], [])
            for b in bindings
        }


class Clocked(BatchAdapter[Binding]):
    def now(self) -> int:
        return NOW


def poller(backend):
    clusters = tuple(BatchCluster(name=n) for n in "abc")
    adapter = Clocked(BatchSettings(kind="x", clusters=clusters), backend, map(Binding, "abc"))
    return Poller(adapter, ["a", "b", "c"], "coorm-", interval=1.0)


def test_one_read_per_batch_system_answer():
    backend = Shared()
    polls = poller(backend)
    assert polls.groups == [("a", "b"), ("c",)]
    polls.poll("a")
    assert backend.reads == [("a", "b")]
    assert polls.status("b").snapshot is not None
    assert polls.status("c").snapshot is None  # another controller: its own poll


def test_a_cluster_that_cannot_be_read_fails_alone():
    backend = Shared()
    backend.broken = {"b"}
    polls = poller(backend)
    polls.poll("b")
    assert backend.reads == [("a", "b"), ("a",), ("b",)]
    assert not polls.status("a").stale
    assert polls.status("b").stale
    assert "b unreadable" in (polls.status("b").error or "")
    assert polls.delay("a") == 1.0  # the group is polled as often as its healthy cluster needs
