"""Superseded events are coalesced as they are appended (coorm_bridge/store/compaction.py): a
waiting session's stored events stay bounded however often its view moves, and a launcher that
reads them on any schedule ends with the view, the estimate and the latest placement failure it
would have had reading every event ever written, with the launcher's own code
(``CurrentView.apply``)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from coorm_bridge.core.messages import ChangeEvent, Event, KilledEvent, PlacementFailedEvent
from coorm_bridge.core.model import Filter, Interconnect
from coorm_bridge.launchers.selection import CurrentView
from coorm_bridge.store import Store
from tests.profiles import fewer

CLUSTERS = ("a", "b", "c")
EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


@dataclass
class Launcher:
    """What a launcher keeps from its session's events: its view (``CurrentView``, as
    ``coorm-launch`` keeps it), the estimate of the last change, the last placement failure,
    every other event in order, and the last number it read."""

    view: CurrentView = field(default_factory=lambda: CurrentView({}, Interconnect()))
    estimate: int | None = None
    failed: int | None = None
    others: list[tuple[str, int]] = field(default_factory=list)
    after: int = 0

    def read(self, events: list[Event]) -> None:
        for event in events:
            assert event.seq > self.after  # increasing, never handed out twice
            self.after = event.seq
            if isinstance(event, ChangeEvent):
                self.view.apply(event)
                self.estimate = event.estimated_start
            elif isinstance(event, PlacementFailedEvent):
                self.failed = event.retry_at
            else:
                self.others.append((event.type, event.time))

    def state(self) -> tuple[Any, ...]:
        view = self.view
        links = frozenset(view.interconnect.links)
        return (view.caps, view.clusters, links, self.estimate, self.failed, self.others)


def availability(cluster: str, t: int, hosts: int) -> dict[str, Any]:
    steps = [[t, hosts], [t + 100, hosts + 1]]
    profile = {"cluster": cluster, "steps": steps}
    return {"cluster": cluster, "kind": "availability", "profile": profile}


@st.composite
def changes(draw: st.DrawFn, t: int) -> list[dict[str, Any]]:
    """One change event's changes: profiles, properties and links of some clusters."""
    found = []
    for _ in range(draw(st.integers(0, 4))):
        cluster = draw(st.sampled_from(CLUSTERS))
        kind = draw(st.sampled_from(["availability", "info", "interconnect"]))
        if kind == "availability":
            change = availability(cluster, t, draw(st.integers(0, 3)))
            if draw(st.booleans()):  # a delta: from a later step on (the quiet protocol)
                since = t + draw(st.integers(1, 150))
                change["since"] = since
                change["profile"]["steps"] = [[since, draw(st.integers(0, 3))], [since + 60, 2]]
            found.append(change)
        elif kind == "info":
            info = {"name": cluster, "hosts": draw(st.integers(1, 3))}
            found.append({"cluster": cluster, "kind": "info", "info": info})
        else:
            others = draw(st.sets(st.sampled_from([c for c in CLUSTERS if c != cluster])))
            latency = draw(st.sampled_from([0.001, 0.002]))
            links = [
                {"clusters": sorted((cluster, other)), "latency_s": latency, "bandwidth_bps": 1e9}
                for other in sorted(others)
            ]
            found.append({"cluster": cluster, "kind": "interconnect", "links": links})
    return found


@st.composite
def schedules(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Writes of change, placement_failed and (now and then) other events, interleaved with a
    launcher's reads of at most ``limit`` events after the last one it read."""
    steps: list[tuple[str, Any]] = []
    for t in range(1, draw(st.integers(1, 40)) + 1):
        what = draw(st.sampled_from(["change"] * 6 + ["failed"] * 2 + ["killed", "read"] * 2))
        if what == "change":
            estimate = draw(st.none() | st.integers(1000, 1005))
            event = {"type": "change", "time": t, "changes": draw(changes(t))}
            steps.append(("write", {**event, "estimated_start": estimate}))
        elif what == "failed":
            event = {"type": "placement_failed", "time": t, "reason": "no", "retry_at": t + 9}
            steps.append(("write", event))
        elif what == "killed":  # stands for the events never replaced (start, killed, error)
            steps.append(("write", {"type": "killed", "time": t, "reason": "walltime"}))
        else:
            steps.append(("read", draw(st.integers(1, 3))))
    return steps


@settings(max_examples=fewer(200))
@given(schedule=schedules(), told=st.booleans())
def test_any_read_schedule_ends_with_the_view_of_reading_every_event(schedule, told):
    everything, launcher = Launcher(), Launcher()
    with tempfile.TemporaryDirectory() as folder, Store(Path(folder) / "bridge.sqlite") as store:
        sid = store.create_session("alice", None, Filter(), CLUSTERS, now=0).id
        for step, value in schedule:
            if step == "write":
                # What the launcher read is coalesced apart from what it did not (quiet).
                store.append_event(sid, value, read=launcher.after if told else 0)
                everything.read([EVENTS.validate_python({**value, "seq": everything.after + 1})])
            else:
                launcher.read(store.events(sid, after=launcher.after, limit=value))
        launcher.read(store.events(sid, after=launcher.after))
        late = Launcher()  # one that reads only now, from the start
        late.read(store.events(sid))
        kept = store.events(sid)
    assert launcher.state() == everything.state()
    assert late.state() == everything.state()
    # Bounded: after the last event never replaced, one change and one placement_failed at most
    # (two of each when the bridge knows what was read: those read, and the others).
    last_other = max((i for i, e in enumerate(kept) if e.type == "killed"), default=-1)
    tail = [e.type for e in kept[last_other + 1 :]]
    most = 2 if told else 1
    assert tail.count("change") <= most
    assert tail.count("placement_failed") <= most


def test_a_launcher_that_keeps_up_gets_what_changed_since_it_read(tmp_path):
    with Store(tmp_path / "bridge.sqlite") as store:
        sid = store.create_session("alice", None, Filter(), CLUSTERS, now=0).id
        read = 0
        for t, cluster in enumerate(CLUSTERS, 1):
            event = {"type": "change", "time": t, "changes": [availability(cluster, t, 1)]}
            store.append_event(sid, event, read=read)
            (got,) = store.events(sid, after=read)
            assert [c.cluster for c in got.changes] == [cluster]  # not the others again
            read = got.seq
        late = Launcher()
        late.read(store.events(sid))
        assert sorted(late.view.caps) == list(CLUSTERS)  # a reader from the start: all
        assert len(store.events(sid)) == 2


def test_a_waiting_session_keeps_two_events_however_often_its_view_moves(tmp_path):
    with Store(tmp_path / "bridge.sqlite") as store:
        sid = store.create_session("alice", None, Filter(), CLUSTERS, now=0).id
        for t in range(1, 2001):
            changed = [availability(CLUSTERS[t % 3], t, t % 4)]
            store.append_event(
                sid, {"type": "change", "time": t, "changes": changed, "estimated_start": 5000 + t}
            )
            if t % 100 == 0:
                failed = {"type": "placement_failed", "time": t, "reason": "no", "retry_at": t + 5}
                store.append_event(sid, failed)
        kept = store.events(sid)
        assert [e.type for e in kept] == ["change", "placement_failed"]
        change, failed = kept
        assert isinstance(failed, PlacementFailedEvent)
        assert isinstance(change, ChangeEvent)
        assert (failed.retry_at, change.seq, change.estimated_start) == (2005, 2019, 7000)
        assert store.last_seq(sid) == 2020  # numbers go on, never reused
        assert {c.cluster: c.profile.steps[0] for c in change.changes if c.profile} == {
            "a": (1998, 2),
            "b": (1999, 3),
            "c": (2000, 0),
        }


def test_events_before_the_last_other_event_are_never_replaced(tmp_path):
    with Store(tmp_path / "bridge.sqlite") as store:
        sid = store.create_session("alice", None, Filter(), CLUSTERS, now=0).id
        first = {"type": "change", "time": 1, "changes": [availability("a", 1, 2)]}
        store.append_event(sid, first)
        start = {"type": "start", "time": 2, "end": 9, "allocations": {"a": {"hosts": ["a-0"]}}}
        store.append_event(sid, start)
        for t in (3, 4):
            store.append_event(sid, {"type": "change", "time": t, "changes": []})
        store.append_event(sid, {"type": "killed", "time": 5, "reason": "walltime"})
        assert [(e.seq, e.type) for e in store.events(sid)] == [
            (1, "change"),
            (2, "start"),
            (4, "change"),
            (5, "killed"),
        ]
        assert isinstance(store.events(sid)[-1], KilledEvent)
