"""Evolving applications (API v2) through the bridge on the mock platform, step by step: a
pre-allocation held as a placeholder, spontaneous updates inside it, an announced update that
takes its related request's hosts over, preemptible work started on idle hosts and taken back
with a deadline, and v1 sessions beside them unchanged."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.core.batch import ReservationHandle, ReservationSpec
from coorm_bridge.core.model import Filter
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import TypedRequest
from coorm_bridge.service.errors import Conflict, Invalid, NotFound
from tests.sites import T0, Site


def evolving(site: Site, user: str = "alice") -> str:
    assert site.bridge.evolving is not None
    return site.bridge.evolving.subscribe(user, Filter(), None).session


def send(site: Site, sid: str, user: str = "alice", **fields: Any) -> None:
    assert site.bridge.evolving is not None
    site.bridge.evolving.request(user, sid, TypedRequest.model_validate(fields))


def info(site: Site, sid: str, rid: str, user: str = "alice") -> Any:
    assert site.bridge.evolving is not None
    return site.bridge.evolving.request_info(user, sid, rid)


def about(site: Site, sid: str, rid: str, kind: str) -> list[Any]:
    return [e for e in site.events(sid, kind) if e.request == rid]


def test_a_pre_allocation_is_held_and_requests_inside_it_start_at_once(make_site: Any) -> None:
    site = make_site()
    sid = evolving(site)
    send(site, sid, id="pa", cluster="c1", hosts=6, duration=3600, type="pre-allocation")
    site.step(T0 + 1)
    site.step(T0 + 2)
    pa = info(site, sid, "pa")
    assert pa.state is AppState.STARTED
    assert len(pa.host_names) == 6
    assert pa.reservation in site.ours("c1")
    (start,) = about(site, sid, "pa", "start")
    assert set(start.allocations["c1"].hosts) == set(pa.host_names)

    # A spontaneous update inside it: started in the same call, on its hosts, no pass needed.
    send(site, sid, id="grow", cluster="c1", hosts=4, duration=600)
    grow = info(site, sid, "grow")
    assert grow.state is AppState.STARTED
    assert grow.inside == "pa"
    assert set(grow.host_names) <= set(pa.host_names)
    # Shrinking: two hosts given back, the request goes on with the others.
    assert site.bridge.evolving is not None
    shrunk = site.bridge.evolving.done("alice", sid, "grow", 2)
    assert shrunk.state is AppState.STARTED
    assert shrunk.hosts == 2
    # More than the unused part is not guaranteed: placed like any request, outside.
    send(site, sid, id="big", cluster="c1", hosts=5, duration=600)
    assert info(site, sid, "big").inside is None


def test_a_next_request_takes_its_related_requests_hosts_over_at_done(make_site: Any) -> None:
    site = make_site()
    sid = evolving(site)
    send(site, sid, id="a", cluster="c1", hosts=4, duration=3600)
    site.step(T0 + 1)
    site.step(T0 + 2)
    first = info(site, sid, "a")
    assert first.state is AppState.STARTED
    send(site, sid, id="b", cluster="c1", hosts=3, duration=600, related_to="a", related_how="next")
    site.step(T0 + 3)
    assert info(site, sid, "b").estimated_start == first.started_at + 3600
    # A v1 session that comes later cannot take the hosts the update was announced on.
    other = site.subscribe("bob")
    site.request(other, {"c1": 8}, 600, user="bob")
    site.step(T0 + 4)
    assert site.bridge.evolving is not None
    site.bridge.evolving.done("alice", sid, "a", None)
    site.step(T0 + 5)
    site.step(T0 + 6)
    second = info(site, sid, "b")
    assert second.state is AppState.STARTED
    assert set(second.host_names) < set(first.host_names)  # on the related request's hosts
    assert site.state(other) is AppState.WAITING
    assert info(site, sid, "a").state is AppState.FINISHED  # no ghost: handed over


def test_preemptible_work_runs_on_idle_hosts_and_is_taken_back_on_time(make_site: Any) -> None:
    site = make_site()
    sid = evolving(site)
    send(site, sid, id="p", cluster="c1", hosts=8, duration=7200, type="preemptible")
    site.step(T0 + 1)
    pre = info(site, sid, "p")
    assert pre.state is AppState.STARTED
    assert len(pre.host_names) == 8
    # A v1 session wants the whole cluster: the preemptible request must give it back.
    v1 = site.subscribe("bob")
    site.request(v1, {"c1": 8}, 600, user="bob")
    site.step(T0 + 2)
    (preempt,) = about(site, sid, "p", "preempt")
    assert preempt.hosts == 8
    assert preempt.deadline >= T0 + 2
    assert info(site, sid, "p").preempt_by == preempt.deadline
    # Not given back: at the deadline it is killed, and the v1 session starts.
    site.step(preempt.deadline)
    site.step(preempt.deadline + 1)
    assert info(site, sid, "p").state is AppState.FINISHED
    assert about(site, sid, "p", "killed")
    site.step(preempt.deadline + 2)
    assert site.state(v1) is AppState.STARTED
    # v1 events carry no v2 field.
    assert all(e.request is None for e in site.events(v1))


@pytest.mark.parametrize("grace", [0, 10, 45])
def test_a_preemption_gives_the_work_the_sites_grace_to_give_its_hosts_back(
    make_site: Any, grace: int
) -> None:
    """``[policy] preempt_grace``: the request that needs the hosts is placed that long after
    the pass that decides it, and the work is told so; given back within it, nothing is
    killed, and the request starts then, not earlier."""
    site = make_site(policy={"preempt_grace": grace})
    sid = evolving(site)
    send(site, sid, id="p", cluster="c1", hosts=8, duration=7200, type="preemptible")
    site.step(T0 + 1)
    v1 = site.subscribe("bob")
    site.request(v1, {"c1": 8}, 600, user="bob")
    site.step(T0 + 2)
    (preempt,) = about(site, sid, "p", "preempt")
    assert preempt.deadline == T0 + 2 + grace
    for t in range(T0 + 3, preempt.deadline):  # the notice does not move, nor start early
        site.step(t)
        assert site.state(v1) is not AppState.STARTED
        assert info(site, sid, "p").preempt_by == preempt.deadline
    assert site.bridge.evolving is not None
    site.bridge.evolving.done("alice", sid, "p", None)
    site.step(preempt.deadline)
    site.step(preempt.deadline + 1)
    assert not about(site, sid, "p", "killed")
    assert site.state(v1) is AppState.STARTED


def test_bad_requests_are_refused_and_change_nothing(make_site: Any) -> None:
    site = make_site()
    sid = evolving(site)
    with pytest.raises(Invalid):
        send(site, sid, id="x", cluster="nowhere", hosts=1, duration=60)
    with pytest.raises(Invalid):
        send(
            site,
            sid,
            id="x",
            cluster="c1",
            hosts=1,
            duration=60,
            related_to="y",
            related_how="next",
        )
    send(site, sid, id="a", cluster="c1", hosts=1, duration=60)
    with pytest.raises(Conflict):
        send(site, sid, id="a", cluster="c1", hosts=1, duration=60)
    with pytest.raises(Invalid):
        send(
            site,
            sid,
            id="n",
            cluster="c2",
            hosts=1,
            duration=60,
            related_to="a",
            related_how="next",
        )
    with pytest.raises(NotFound):
        info(site, sid, "a", user="bob")
    assert [r.request for r in site.bridge.evolving.info("alice", sid).requests] == ["a"]
    v1 = site.subscribe()
    with pytest.raises(Conflict):
        send(site, v1, id="z", cluster="c1", hosts=1, duration=60)


def test_preemptible_hosts_are_shared_equally_and_a_job_left_past_its_deadline_is_cancelled(
    make_site: Any,
) -> None:
    from coorm_bridge.core.batch import JobSpec, JobState  # noqa: PLC0415

    site = make_site()
    first, second = evolving(site), evolving(site, "bob")
    send(site, first, id="p", cluster="c1", hosts=8, duration=7200, type="preemptible")
    site.step(T0 + 1)
    assert len(info(site, first, "p").host_names) == 8
    # alice's job runs there, outside any reservation: load to Slurm, not to the views.
    spec = JobSpec(name="sweep", user="alice", argv=("true",), hosts=8, walltime=7200)
    job = site.adapter.submit("c1", spec)
    site.step(T0 + 2)
    assert site.adapter.job_state("c1", job) is JobState.RUNNING
    assert not about(site, first, "p", "preempt")
    # bob asks for preemptible hosts too: each gets half, so alice must give 4 back.
    send(site, second, user="bob", id="q", cluster="c1", hosts=4, duration=600, type="preemptible")
    site.step(T0 + 3)
    (preempt,) = about(site, first, "p", "preempt")
    assert preempt.hosts == 4
    site.step(preempt.deadline + 1)
    site.step(preempt.deadline + 2)
    assert about(site, first, "p", "killed")
    assert site.adapter.job_state("c1", job) is JobState.CANCELLED
    site.step(preempt.deadline + 3)
    assert info(site, second, "q", user="bob").state is AppState.STARTED


def test_a_preemption_answered_in_time_keeps_the_rest_running(make_site: Any) -> None:
    site = make_site()
    first, second = evolving(site), evolving(site, "bob")
    send(site, first, id="p", cluster="c1", hosts=8, duration=7200, type="preemptible")
    site.step(T0 + 1)
    send(site, second, user="bob", id="q", cluster="c1", hosts=4, duration=600, type="preemptible")
    site.step(T0 + 2)
    (preempt,) = about(site, first, "p", "preempt")
    assert site.bridge.evolving is not None
    kept = site.bridge.evolving.done("alice", first, "p", preempt.hosts)
    assert kept.state is AppState.STARTED
    assert kept.hosts == 4
    assert kept.preempt_by is None
    site.step(preempt.deadline + 1)
    site.step(preempt.deadline + 2)
    assert info(site, first, "p").state is AppState.STARTED
    assert not about(site, first, "p", "killed")
    bobs = info(site, second, "q", user="bob")
    assert bobs.state is AppState.STARTED
    assert not set(bobs.host_names) & set(kept.host_names)


def test_a_sweep_gives_back_the_hosts_it_names_and_keeps_running_on_the_others(
    make_site: Any,
) -> None:
    """A sweep's hosts end their tasks at different times: it gives back those that ran theirs,
    not the last ones, which still run a task."""
    site = make_site()
    sid = evolving(site)
    send(site, sid, id="p", cluster="c1", hosts=4, duration=7200, type="preemptible")
    site.step(T0 + 1)
    held = info(site, sid, "p").host_names
    assert len(held) == 4
    assert site.bridge.evolving is not None
    kept = site.bridge.evolving.done("alice", sid, "p", 2, held[:2])
    assert kept.state is AppState.STARTED
    assert kept.host_names == held[2:]
    with pytest.raises(Invalid, match=f"does not hold {held[0]}"):
        site.bridge.evolving.done("alice", sid, "p", 1, (held[0],))
    assert info(site, sid, "p").host_names == held[2:]  # refused: nothing changed


def test_a_done_request_keeps_its_hosts_as_a_ghost_and_the_end_withdraws_the_rest(
    make_site: Any,
) -> None:
    site = make_site()
    sid = evolving(site)
    send(site, sid, id="a", cluster="c1", hosts=2, duration=3600)
    send(site, sid, id="late", cluster="c1", hosts=8, duration=600)
    site.step(T0 + 1)
    site.step(T0 + 2)
    assert info(site, sid, "a").state is AppState.STARTED
    assert site.bridge.evolving is not None
    site.bridge.evolving.done("alice", sid, "a", None)
    site.step(T0 + 3)
    assert info(site, sid, "a").state is AppState.GHOST  # fair-start, per request
    site.step(T0 + 3 + 30)
    site.step(T0 + 3 + 31)
    assert info(site, sid, "a").state is AppState.FINISHED
    answer = site.bridge.evolving.end("alice", sid)
    assert answer.state is AppState.FINISHED
    assert info(site, sid, "late").state in (AppState.CANCELLED, AppState.FINISH_SENT)
    assert site.events(sid)[-1].type == "ended"
    assert site.events(sid)[-1].request is None


def test_evolving_requests_survive_a_restart(make_site: Any) -> None:
    site = make_site()
    sid = evolving(site)
    send(site, sid, id="pa", cluster="c1", hosts=6, duration=3600, type="pre-allocation")
    site.step(T0 + 1)
    site.step(T0 + 2)
    send(site, sid, id="in", cluster="c1", hosts=2, duration=600)
    held = info(site, sid, "pa").host_names
    site.assemble()  # a new daemon over the same store and platform
    site.step(T0 + 3)
    site.step(T0 + 4)
    assert info(site, sid, "pa").state is AppState.STARTED
    assert info(site, sid, "pa").host_names == held
    assert info(site, sid, "in").state is AppState.STARTED
    views = site.bridge.evolving.info("alice", sid)
    assert views.non_preemptible is not None
    assert views.preemptible is not None


class _SecurityTime(MockAdapter):
    """A batch system that keeps a minute free after each reservation on its hosts (OAR)."""

    def reservation_gap(self, cluster: str) -> int:
        return 61


def test_a_next_request_is_held_past_the_batch_systems_gap_and_starts_at_an_early_done(
    make_site: Any,
) -> None:
    site = make_site(adapter=_SecurityTime)
    sid = evolving(site)
    send(site, sid, id="a", cluster="c1", hosts=4, duration=3600)
    site.step(T0 + 1)
    site.step(T0 + 2)
    first = info(site, sid, "a")
    send(site, sid, id="b", cluster="c1", hosts=2, duration=600, related_to="a", related_how="next")
    site.step(T0 + 3)
    assert info(site, sid, "b").estimated_start == first.started_at + 3600 + 61
    assert site.bridge.evolving is not None
    site.bridge.evolving.done("alice", sid, "a", None)
    site.step(T0 + 4)
    site.step(T0 + 5)
    second = info(site, sid, "b")
    assert second.state is AppState.STARTED
    assert second.started_at is not None
    assert second.started_at <= T0 + 5


class _OarLike(_SecurityTime):
    """...that also places a reservation only from a moment ahead (OAR's next pass), and
    re-submits one to move it (the moves asked are kept: one asked by count lands anywhere)."""

    moves: ClassVar[list[ReservationSpec | str]] = []
    """Updates asked, and the names of the reservations deleted, in order."""

    def reservation_lead(self) -> int:
        return 5

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self.moves.append(spec)
        return super().update_reservation(cluster, spec)

    def delete_reservation(self, cluster: str, name: str) -> None:
        self.moves.append(name)
        super().delete_reservation(cluster, name)


def test_a_next_request_starts_on_its_related_requests_hosts_once_that_one_has_ended(
    make_site: Any,
) -> None:
    # Its placeholder, moved to the done, begins a few seconds later: by then the related
    # request has ended (no ghost), and the update still starts, on its hosts.
    _OarLike.moves.clear()
    site = make_site(adapter=_OarLike, placement={"horizon": 3600})  # b is held ahead
    sid = evolving(site)
    send(site, sid, id="a", cluster="c1", hosts=4, duration=1800)
    for t in range(T0 + 1, T0 + 10):
        site.step(t)
    first = info(site, sid, "a")
    assert first.state is AppState.STARTED
    send(site, sid, id="b", cluster="c1", hosts=2, duration=600, related_to="a", related_how="next")
    site.step(T0 + 10)
    site.adapter.run_until(T0 + 11)
    assert site.bridge.evolving is not None
    site.bridge.evolving.done("alice", sid, "a", None)
    # A daemon's pass may have read its clock a moment before the done came in.
    site.loop.passes.run(T0 + 10)
    site.loop.enactor.run()
    for t in range(T0 + 11, T0 + 20):
        site.step(t)
    assert info(site, sid, "a").state is AppState.FINISHED
    second = info(site, sid, "b")
    assert second.state is AppState.STARTED
    assert second.started_at is not None
    assert second.started_at <= T0 + 11 + 5 + 1  # its placeholder's lead and a pass
    assert set(second.host_names) < set(first.host_names)
    # Moved to the done by naming those hosts, not by count, once a's placeholder was deleted
    # (not shrunk: OAR keeps a begun container's end).
    moves = _OarLike.moves
    (moved,) = [m for m in moves if isinstance(m, ReservationSpec) and m.start < T0 + 1800]
    assert set(moved.host_names) == set(second.host_names)
    assert first.reservation in moves[: moves.index(moved)]


def test_a_silent_evolving_application_is_withdrawn_only_while_nothing_of_it_runs(
    make_site: Any,
) -> None:
    from coorm_bridge.service.config import BridgeSettings  # noqa: PLC0415

    site = make_site(config={"bridge": BridgeSettings(session_timeout=60)})
    running, waiting = evolving(site), evolving(site)
    send(site, running, id="pa", cluster="c1", hosts=4, duration=3600, type="pre-allocation")
    send(site, waiting, id="big", cluster="c1", hosts=8, duration=600)
    for t in range(T0 + 1, T0 + 200, 5):
        site.step(t)
    assert info(site, running, "pa").state is AppState.STARTED
    assert site.state(running) is AppState.SUBMITTED
    assert site.state(waiting) is AppState.CANCELLED
    assert info(site, waiting, "big").state is AppState.CANCELLED
    (withdrawn,) = site.events(waiting, "withdrawn")
    assert "no word from its launcher" in withdrawn.reason


def test_coalloc_requests_start_together_and_end_together(make_site: Any) -> None:
    site = make_site()
    sid = evolving(site)
    # c1 busy until T0 + 600 for 4 of its hosts: the pair waits for its common start.
    first = site.subscribe("bob", ("c1",))
    site.request(first, {"c1": 6}, 600, user="bob")
    site.step(T0 + 1)
    send(site, sid, id="a", cluster="c1", hosts=4, duration=1200)
    send(
        site,
        sid,
        id="b",
        cluster="c2",
        hosts=2,
        duration=1200,
        related_to="a",
        related_how="coalloc",
    )
    site.step(T0 + 2)
    a, b = info(site, sid, "a"), info(site, sid, "b")
    assert a.state is b.state is AppState.WAITING
    assert a.estimated_start == b.estimated_start == T0 + 1 + 600
    site.bridge.done("bob", first)  # c1 frees early: both start at once
    site.step(T0 + 100)
    site.step(T0 + 100 + 30)
    site.step(T0 + 100 + 31)
    a, b = info(site, sid, "a"), info(site, sid, "b")
    assert a.state is b.state is AppState.STARTED
    assert a.started_at == b.started_at
    assert (a.cluster, len(a.host_names), b.cluster, len(b.host_names)) == ("c1", 4, "c2", 2)
    assert (b.related_to, b.related_how) == ("a", "coalloc")
    (start,) = about(site, sid, "a", "start")  # one start, an allocation per cluster
    assert set(start.allocations) == {"c1", "c2"}
    # A next request may follow a member, on its cluster and hosts.
    send(site, sid, id="n", cluster="c2", hosts=1, duration=600, related_to="b", related_how="next")
    assert site.bridge.evolving is not None
    ended = site.bridge.evolving.done("alice", sid, "b", None)
    assert ended.state is AppState.FINISH_SENT
    assert info(site, sid, "a").state is AppState.FINISH_SENT  # the group ends together
    site.step(T0 + 200)
    site.step(T0 + 201)
    following = info(site, sid, "n")
    assert following.state is AppState.STARTED
    assert set(following.host_names) < set(b.host_names)


def test_coalloc_requests_are_of_one_type_duration_and_time(make_site: Any) -> None:
    site = make_site()
    sid = evolving(site)
    send(site, sid, id="a", cluster="c1", hosts=2, duration=600)
    for bad in (
        {"cluster": "c1"},  # the same cluster
        {"duration": 1200},  # another duration
        {"type": "pre-allocation"},  # another type
        {"type": "preemptible"},
    ):
        fields = {"id": "b", "cluster": "c2", "hosts": 1, "duration": 600, **bad}
        with pytest.raises(Invalid):
            send(site, sid, related_to="a", related_how="coalloc", **fields)
    site.step(T0 + 1)
    site.step(T0 + 2)
    assert info(site, sid, "a").state is AppState.STARTED
    with pytest.raises(Conflict):  # too late to start together
        send(
            site,
            sid,
            id="b",
            cluster="c2",
            hosts=1,
            duration=600,
            related_to="a",
            related_how="coalloc",
        )
    assert [r.request for r in site.bridge.evolving.info("alice", sid).requests] == ["a"]


def test_requests_sent_together_are_written_together_or_not_at_all(make_site: Any) -> None:
    site = make_site()
    sid = evolving(site)
    assert site.bridge.evolving is not None
    good = TypedRequest(id="a", cluster="c1", hosts=2, duration=600)
    bad = TypedRequest(
        id="b", cluster="c2", hosts=1, duration=1200, related_to="a", related_how="coalloc"
    )
    with pytest.raises(Invalid, match="last as long"):
        site.bridge.evolving.request("alice", sid, [good, bad])
    assert site.bridge.evolving.info("alice", sid).requests == ()
    fine = bad.model_copy(update={"duration": 600})
    site.bridge.evolving.request("alice", sid, [good, fine])
    assert [r.request for r in site.bridge.evolving.info("alice", sid).requests] == ["a", "b"]


def test_an_application_that_ends_with_a_started_request_lets_its_ghost_go(
    make_site: Any,
) -> None:
    """Found on the real Slurm: the application's ``ended`` is its last event, so the ghost of
    a request it ended with ends untold, and its placeholder is released (before, telling its
    end failed every pass and kept it, and the pass set nothing aside)."""
    site = make_site()
    sid = evolving(site)
    send(site, sid, id="pa", cluster="c1", hosts=4, duration=3600, type="pre-allocation")
    site.step(T0 + 1)
    site.step(T0 + 2)
    held = info(site, sid, "pa").reservation
    assert held in site.ours("c1")
    assert site.bridge.evolving is not None
    assert site.bridge.evolving.end("alice", sid).state is AppState.FINISHED
    site.step(T0 + 3)
    assert info(site, sid, "pa").state is AppState.GHOST  # fair-start, per request
    site.step(T0 + 3 + 30)
    site.step(T0 + 3 + 31)
    site.step(T0 + 3 + 32)
    assert info(site, sid, "pa").state is AppState.FINISHED
    assert held not in site.ours("c1")
    assert site.events(sid)[-1].type == "ended"
    assert site.events(sid)[-1].request is None


def test_a_next_request_whose_related_one_was_withdrawn_is_placed_as_any(make_site: Any) -> None:
    site = make_site()
    sid = evolving(site)
    other = site.subscribe("bob", ("c1",))
    site.request(other, {"c1": 8}, 600, user="bob")
    site.step(T0 + 1)
    send(site, sid, id="a", cluster="c1", hosts=4, duration=600)
    send(site, sid, id="b", cluster="c1", hosts=2, duration=600, related_to="a", related_how="next")
    site.step(T0 + 2)
    assert info(site, sid, "b").estimated_start is None  # behind a, which has not started
    assert site.bridge.evolving is not None
    site.bridge.evolving.withdraw("alice", sid, "a")
    site.step(T0 + 3)
    assert info(site, sid, "b").estimated_start == T0 + 1 + 600
