"""The quiet protocol in the bridge: deltas for the sessions that asked, and changes past the
horizon of a launcher's choice left unsent until one that can matter comes.

A launcher's view is rebuilt here as a launcher rebuilds it (``CurrentView``), from the events the
store gives it: whatever was left unsent, the view it holds after each event sent must be the
bridge's own view of it then.
"""

from __future__ import annotations

from typing import Any

import pytest

from coorm_bridge.core.messages import ChangeEvent
from coorm_bridge.core.model import Filter, Interconnect
from coorm_bridge.launchers.selection import CurrentView
from coorm_bridge.protocol import EventPage
from tests import sites

T0 = sites.T0


class Launcher:
    """What a launcher holds of one session: its view, from the events it read."""

    def __init__(self, site: sites.Site, sid: str, user: str) -> None:
        self.site, self.sid, self.user = site, sid, user
        infos = {info.name: info for info in site.bridge.infos}
        self.view = CurrentView(infos, Interconnect())
        self.after = 0
        self.received: list[ChangeEvent] = []

    def read(self, horizon: int | None = None) -> list[ChangeEvent]:
        """The events come since the last read, then the next long poll, telling ``horizon``
        for the view held then (the daemon hears of it as the poll begins)."""
        found = self.site.bridge.events(self.user, self.sid, self.after)
        changes = [e for e in found if isinstance(e, ChangeEvent)]
        for event in changes:
            self.view.apply(event)
        if found:
            self.after = found[-1].seq
        self.received += changes
        assert self.site.bridge.events(self.user, self.sid, self.after, horizon=horizon) == []
        return changes

    def steps(self) -> dict[str, tuple[tuple[int, int], ...]]:
        now = self.site.adapter.now()
        return {c: tuple(p.steps(now)) for c, p in self.view.profiles().items()}

    def bridges_view(self) -> dict[str, tuple[tuple[int, int], ...]]:
        now = self.site.adapter.now()
        view = self.site.service.passes.view(self.sid)
        assert view is not None
        return {c: tuple(p.steps(now)) for c, p in view.items()}


@pytest.fixture
def site(make_site: Any) -> sites.Site:
    made: sites.Site = make_site(placement={"hold_first": 0})
    made.step(T0)
    return made


def subscribe(site: sites.Site, user: str, *, deltas: bool = False) -> str:
    return site.bridge.subscribe(user, Filter(), None, deltas=deltas).session


def queue(site: sites.Site) -> tuple[list[str], list[str]]:
    """c2 half busy until T0 + 1001, wholly until T0 + 2001, c1 until T0 + 501 (alice's three
    running applications), two more of alice's without a request yet, then bob's two asking
    c1:4 for 100 s, the first with whole profiles, the second with deltas: both placed at
    T0 + 501, waiting."""
    running = [subscribe(site, "alice") for _ in range(3)]
    ahead = [subscribe(site, "alice") for _ in range(2)]
    bobs = [subscribe(site, "bob"), subscribe(site, "bob", deltas=True)]
    site.request(running[0], {"c2": 2}, 2000)
    site.request(running[1], {"c2": 2}, 1000)
    site.request(running[2], {"c1": 8}, 500)
    for sid in bobs:
        site.request(sid, {"c1": 4}, 100, user="bob")
    site.step(T0 + 1)
    for sid in bobs:
        assert site.store.session(sid).estimated_start == T0 + 501
    return ahead, bobs


def test_a_session_that_asked_gets_deltas_and_one_that_did_not_whole_profiles(site):
    ahead, (whole, delta) = queue(site)
    readers = [Launcher(site, sid, "bob") for sid in (whole, delta)]
    for reader in readers:
        reader.read()
    site.request(ahead[0], {"c2": 4}, 100)  # placed at T0 + 2001, after the running one
    site.step(T0 + 2)
    for reader in readers:
        (event,) = reader.read()
        (change,) = event.changes
        assert change.cluster == "c2"
        assert reader.steps() == reader.bridges_view()
    whole_change, delta_change = (r.received[-1].changes[0] for r in readers)
    assert whole_change.since is None
    assert whole_change.profile.steps[0][0] == T0 + 2
    assert delta_change.since == T0 + 2001
    assert delta_change.profile.steps == ((T0 + 2001, 0), (T0 + 2101, 4))
    assert whole_change.profile.steps == ((T0 + 2, 0), (T0 + 1001, 2), *delta_change.profile.steps)
    # A launcher released before deltas refuses unknown fields: a whole change has no "since".
    page = EventPage(events=[readers[0].received[-1]]).model_dump_json()
    assert "since" not in page
    assert '"since"' in EventPage(events=[readers[1].received[-1]]).model_dump_json()


def test_changes_past_the_horizon_wait_until_one_before_it_comes(site):
    ahead, (whole, quiet) = queue(site)
    told, heeding = Launcher(site, whole, "bob"), Launcher(site, quiet, "bob")
    told.read()
    heeding.read()
    horizon = T0 + 601  # its request ends then: what it chose reads nothing later
    heeding.read(horizon=horizon)  # nothing new; its long poll says it
    site.request(ahead[0], {"c2": 4}, 100)  # c2 from T0 + 2001: past the horizon
    site.step(T0 + 2)
    assert len(told.read()) == 1
    assert heeding.read(horizon=horizon) == []
    assert site.service.stats.unheeded == 1
    site.request(ahead[1], {"c1": 8}, 50)  # before both: they start 50 s later
    site.step(T0 + 3)
    (event,) = heeding.read()
    assert {c.cluster for c in event.changes} == {"c1", "c2"}  # the one left unsent too
    assert event.estimated_start == T0 + 551
    assert heeding.steps() == heeding.bridges_view()


def test_a_horizon_told_for_an_older_view_is_not_used(site):
    ahead, (_, quiet) = queue(site)
    heeding = Launcher(site, quiet, "bob")
    heeding.read()
    # The launcher says it after event 0: it had not read the view it was sent.
    assert len(site.bridge.events("bob", quiet, 0, horizon=T0 + 601)) == 1
    site.request(ahead[0], {"c2": 4}, 100)
    site.step(T0 + 2)
    assert len(heeding.read()) == 1
    assert heeding.steps() == heeding.bridges_view()


def test_a_horizon_past_the_start_the_choice_had_no_longer_holds(site):
    ahead, (_, quiet) = queue(site)
    heeding = Launcher(site, quiet, "bob")
    heeding.read()
    heeding.read(horizon=T0 + 601)
    site.step(T0 + 502)  # past T0 + 501, where the choice would have started: it started
    site.request(ahead[0], {"c2": 4}, 100)
    site.step(T0 + 503)
    assert site.service.stats.unheeded == 0


def test_a_placeholder_moves_only_when_its_start_or_hosts_change_and_each_call_is_counted(
    make_site: Any,
):
    site: sites.Site = make_site(placement={"hold_first": 1})
    site.step(T0)
    running, first, behind = (subscribe(site, "alice") for _ in range(3))
    site.request(running, {"c1": 8}, 500)
    site.request(first, {"c1": 4}, 100)  # held at once (hold_first) at T0 + 501
    site.step(T0 + 1)
    calls = site.service.stats.reservation_calls
    assert dict(calls) == {"create": 2}  # the running one's, and the first waiting one's
    held = site.ours("c1")
    site.request(behind, {"c1": 4}, 50)  # behind it: its start and hosts do not change
    for t in range(T0 + 2, T0 + 30):
        site.step(t)
    assert dict(calls) == {"create": 2}
    assert site.ours("c1").keys() == held.keys()
    site.bridge.put_request("alice", first, {"c1": 2}, 100)  # fewer hosts: moved in place
    site.step(T0 + 31)
    assert dict(calls) == {"create": 2, "update": 1}
