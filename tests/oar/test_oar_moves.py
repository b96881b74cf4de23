"""Moving a placeholder the way OAR allows (re-submission), over an in-memory OAR that holds
reservations per host, refuses overlaps with its suggestion, and ends a deleted job only at its
next pass (the next read)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from coorm_bridge.adapters.batch.backend import BatchFailure
from coorm_bridge.adapters.oar import commands, moves, parse
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.adapters.oar.moves import Mover
from coorm_bridge.core.batch import Reservation, ReservationSpec
from tests.oar.samples import ALPHA

NOW = 1_800_000_000
HOUR = 3600


Found = tuple[parse.OarJob, Reservation]


@dataclass
class Held:
    record: parse.OarJob
    made: Reservation
    deleted: bool = False  # still shown by the next read, then gone


class FakeOar:
    """The mover's Writes as OAR answers them, for one cluster of ``hosts`` hosts."""

    def __init__(self, hosts: int = 4, submit_as: str = "owner") -> None:
        self.hosts = [f"alpha-{i}" for i in range(1, hosts + 1)]
        self.submit_as = submit_as
        self.jobs: dict[int, Held] = {}
        self.next_id = 30
        self.calls: list[tuple[Any, ...]] = []
        self.on_delete: Callable[[], None] | None = None

    # -- what the test sets up and looks at --

    def hold(self, name: str, start: int, end: int, hosts: Sequence[str], owner: str) -> str:
        job_id = self.next_id
        self.next_id += 1
        record = parse.OarJob(
            id=str(job_id), name=name, owner=owner, state="Waiting",
            types=("container", "noop"), reservation="Scheduled", start=start,
            walltime=end - start, addresses=tuple(hosts),
        )  # fmt: skip
        made = Reservation(name=name, start=start, end=end, hosts=len(hosts),
                           host_names=tuple(sorted(hosts)), users=(owner,))  # fmt: skip
        self.jobs[job_id] = Held(record, made)
        return str(job_id)

    def live(self, name: str) -> list[Reservation]:
        return [h.made for _, h in sorted(self.jobs.items()) if h.made.name == name]

    def writes(self) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] != "held"]

    # -- Writes --

    def held(self, binding: OarBinding, name: str, now: int) -> list[Found]:
        self.calls.append(("held", name))
        found = [(h.record, h.made) for _, h in sorted(self.jobs.items()) if h.made.name == name]
        for job_id in [i for i, h in self.jobs.items() if h.deleted]:
            del self.jobs[job_id]  # OAR's next pass ends what was deleted
        return found

    def owner(self, users: Sequence[str]) -> str:
        return users[0] if self.submit_as == "owner" else self.submit_as

    def submit_reservation(self, binding: OarBinding, spec: ReservationSpec) -> str:
        owner = self.owner(spec.users)
        self.calls.append(("submit", spec.start, spec.end, spec.host_names or spec.hosts, owner))
        in_the_way = [
            h.made
            for h in self.jobs.values()
            if h.made.start < spec.end and spec.start < h.made.end
        ]  # deleted jobs hold their hosts until OAR ends them
        busy = {host for r in in_the_way for host in r.host_names}
        if spec.host_names:
            hosts = list(spec.host_names) if not busy & set(spec.host_names) else []
        else:
            free = [h for h in self.hosts if h not in busy]
            hosts = free[: spec.size] if len(free) >= spec.size else []
        if not hosts:
            could = max(r.end for r in in_the_way)
            raise BatchFailure(
                "overlap",
                "Reservation not valid --> KO (This reservation could run at "
                f"{commands.format_date(could)})",
                retry_after=could,
            )
        return self.hold(spec.name, spec.start, spec.end, hosts, owner)

    def delete_job(self, job: parse.OarJob) -> None:
        self.calls.append(("delete", job.id))
        self.jobs[int(job.id)].deleted = True
        if self.on_delete is not None:
            self.on_delete()

    def extend(self, job: parse.OarJob, seconds: int) -> None:
        self.calls.append(("extend", job.id, seconds))


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The mover's pauses while OAR ends a deleted job, recorded instead of slept."""
    pauses: list[float] = []
    monkeypatch.setattr(moves.time, "sleep", pauses.append)
    return pauses


def spec(start: int, end: int, hosts: int = 0, names: tuple[str, ...] = (),
         users: tuple[str, ...] = ("alice",)) -> ReservationSpec:  # fmt: skip
    return ReservationSpec(name="coorm-1", start=start, end=end, hosts=hosts, host_names=names,
                           users=users)  # fmt: skip


def mover(oar: FakeOar) -> Mover:
    return Mover(oar, clock=lambda: NOW)


ALL = ("alpha-1", "alpha-2", "alpha-3", "alpha-4")


# --- not begun: re-submission ------------------------------------------------------------------


def test_a_new_one_first_when_oar_can_hold_both() -> None:
    oar = FakeOar()
    old = oar.hold("coorm-1", NOW + HOUR, NOW + 2 * HOUR, ("alpha-1", "alpha-2"), "alice")
    move = mover(oar)
    move.update(ALPHA, spec(NOW + HOUR + 600, NOW + 3 * HOUR, hosts=2), begun=False)
    assert oar.writes() == [
        ("submit", NOW + HOUR + 600, NOW + 3 * HOUR, 2, "alice"),
        ("delete", old),
    ]
    assert move.last_gap is None  # never without a reservation
    oar.held(ALPHA, "coorm-1", NOW)  # OAR's next pass
    (new,) = oar.live("coorm-1")
    assert (new.start, new.end, new.host_names) == (NOW + HOUR + 600, NOW + 3 * HOUR,
                                                    ("alpha-3", "alpha-4"))  # fmt: skip


def test_the_old_one_first_when_the_new_one_needs_its_hosts(no_waiting: list[float]) -> None:
    oar = FakeOar()
    old = oar.hold("coorm-1", NOW + HOUR, NOW + 2 * HOUR, ALL, "alice")
    move = mover(oar)
    move.update(ALPHA, spec(NOW + HOUR + 600, NOW + 3 * HOUR, hosts=4), begun=False)
    asked = ("submit", NOW + HOUR + 600, NOW + 3 * HOUR, 4, "alice")
    assert oar.writes() == [asked, ("delete", old), asked]
    # it waited for OAR to end the old one: deleted, it still held the hosts for one read
    assert no_waiting
    assert move.last_gap is not None
    assert move.last_gap >= 0
    (new,) = oar.live("coorm-1")
    assert (new.start, new.host_names) == (NOW + HOUR + 600, ALL)


def test_a_refused_move_holds_the_old_one_again_and_says_why() -> None:
    oar = FakeOar()
    oar.hold("other", NOW + 2 * HOUR, NOW + 4 * HOUR, ALL, "carol")
    oar.hold("coorm-1", NOW + HOUR, NOW + 2 * HOUR, ALL, "alice")
    move = mover(oar)
    with pytest.raises(BatchFailure, match="could run at") as refused:
        move.update(ALPHA, spec(NOW + HOUR + 600, NOW + 3 * HOUR, hosts=4), begun=False)
    assert refused.value.kind == "overlap"
    assert refused.value.retry_after == NOW + 4 * HOUR
    assert move.last_gap is not None
    # held again as it was: same times, hosts and owner
    assert oar.writes()[-1] == ("submit", NOW + HOUR, NOW + 2 * HOUR, ALL, "alice")
    (again,) = oar.live("coorm-1")
    assert (again.start, again.end, again.host_names, again.users) == (
        NOW + HOUR, NOW + 2 * HOUR, ALL, ("alice",),
    )  # fmt: skip


def test_a_move_that_loses_both_is_another_failure() -> None:
    oar = FakeOar()
    oar.hold("other", NOW + 2 * HOUR, NOW + 4 * HOUR, ALL, "carol")
    oar.hold("coorm-1", NOW + HOUR, NOW + 2 * HOUR, ALL, "alice")

    def someone_takes_the_hosts() -> None:
        oar.hold("sneaky", NOW + HOUR, NOW + 2 * HOUR, ALL, "dave")

    oar.on_delete = someone_takes_the_hosts
    with pytest.raises(BatchFailure, match="moved away and not held again") as lost:
        mover(oar).update(ALPHA, spec(NOW + HOUR + 600, NOW + 3 * HOUR, hosts=4), begun=False)
    assert lost.value.kind == "other"
    assert oar.live("coorm-1") == []


def test_a_failure_other_than_an_overlap_keeps_the_old_one() -> None:
    class Broken(FakeOar):
        def submit_reservation(self, binding: OarBinding, spec: ReservationSpec) -> str:
            raise BatchFailure("no_rights", "[ADMISSION RULE] Error: ...")

    oar = Broken()
    oar.hold("coorm-1", NOW + HOUR, NOW + 2 * HOUR, ALL, "alice")
    with pytest.raises(BatchFailure) as failure:
        mover(oar).update(ALPHA, spec(NOW + 2 * HOUR, NOW + 3 * HOUR, hosts=4), begun=False)
    assert failure.value.kind == "no_rights"
    assert not [c for c in oar.calls if c[0] == "delete"]
    assert len(oar.live("coorm-1")) == 1


def test_another_owner_or_other_hosts_are_a_new_submission() -> None:
    oar = FakeOar()
    old = oar.hold("coorm-1", NOW + HOUR, NOW + 2 * HOUR, ("alpha-1",), "alice")
    mover(oar).update(ALPHA, spec(NOW + HOUR, NOW + 2 * HOUR, hosts=1, users=("bob",)),
                      begun=False)  # fmt: skip
    assert oar.writes() == [("submit", NOW + HOUR, NOW + 2 * HOUR, 1, "bob"), ("delete", old)]
    oar.calls.clear()
    oar.held(ALPHA, "coorm-1", NOW)
    assert len(oar.live("coorm-1")) == 1
    named = spec(NOW + HOUR, NOW + 2 * HOUR, names=("alpha-4",), users=("bob",))
    mover(oar).update(ALPHA, named, begun=False)
    assert oar.writes()[0] == ("submit", NOW + HOUR, NOW + 2 * HOUR, ("alpha-4",), "bob")


def test_what_is_already_held_is_not_touched() -> None:
    oar = FakeOar()
    oar.hold("coorm-1", NOW + HOUR, NOW + 2 * HOUR, ("alpha-1", "alpha-2"), "alice")
    for same in (
        spec(NOW + HOUR, NOW + 2 * HOUR, hosts=2),
        spec(NOW + HOUR, NOW + 2 * HOUR, names=("alpha-2", "alpha-1")),
        spec(NOW + HOUR, NOW + 2 * HOUR, hosts=2, users=("alice", "bob")),
    ):
        mover(oar).update(ALPHA, same, begun=False)
    assert oar.writes() == []


def test_a_deletion_oar_never_carries_out_is_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    class Stuck(FakeOar):
        def delete_job(self, job: parse.OarJob) -> None:
            self.calls.append(("delete", job.id))  # registered, never done

    monkeypatch.setattr(moves, "GONE_WITHIN", 0.0)
    oar = Stuck()
    oar.hold("coorm-1", NOW + HOUR, NOW + 2 * HOUR, ALL, "alice")
    with pytest.raises(BatchFailure, match="did not end") as failure:
        mover(oar).update(ALPHA, spec(NOW + HOUR + 60, NOW + 2 * HOUR, hosts=4), begun=False)
    assert failure.value.kind == "unreachable"


# --- begun: only a longer end --------------------------------------------------------------------


def test_a_begun_reservation_with_a_shorter_end_is_left_as_it_is() -> None:
    oar = FakeOar()
    oar.hold("coorm-1", NOW - 600, NOW + HOUR, ("alpha-1", "alpha-2"), "alice")
    mover(oar).update(ALPHA, spec(NOW - 600, NOW + 600, hosts=2), begun=True)
    assert oar.writes() == []


def test_a_begun_reservation_with_a_longer_end_is_extended() -> None:
    oar = FakeOar()
    job = oar.hold("coorm-1", NOW - 600, NOW + HOUR, ("alpha-1", "alpha-2"), "alice")
    mover(oar).update(ALPHA, spec(NOW - 600, NOW + 2 * HOUR, names=("alpha-1", "alpha-2")),
                      begun=True)  # fmt: skip
    assert oar.writes() == [("extend", job, HOUR)]


def test_a_reservation_is_begun_by_the_clock_too() -> None:
    oar = FakeOar()
    job = oar.hold("coorm-1", NOW, NOW + HOUR, ("alpha-1",), "alice")
    mover(oar).update(ALPHA, spec(NOW, NOW + HOUR + 60, hosts=1), begun=False)
    assert oar.writes() == [("extend", job, 60)]


@pytest.mark.parametrize(
    "changed",
    [
        spec(NOW - 600, NOW + HOUR, hosts=3),
        spec(NOW - 600, NOW + HOUR, names=("alpha-1", "alpha-3")),
        spec(NOW - 600, NOW + HOUR, hosts=2, users=("bob",)),
    ],
)
def test_a_begun_reservation_cannot_change_hosts_or_owner(changed: ReservationSpec) -> None:
    oar = FakeOar()
    oar.hold("coorm-1", NOW - 600, NOW + HOUR, ("alpha-1", "alpha-2"), "alice")
    with pytest.raises(BatchFailure, match="begun reservation") as failure:
        mover(oar).update(ALPHA, changed, begun=True)
    assert failure.value.kind == "other"
    assert oar.writes() == []


# --- leftovers -----------------------------------------------------------------------------------


def test_leftovers_of_an_interrupted_move_are_deleted_and_the_newest_kept() -> None:
    oar = FakeOar()
    older = oar.hold("coorm-1", NOW + HOUR, NOW + 2 * HOUR, ("alpha-1",), "alice")
    newest = oar.hold("coorm-1", NOW + 2 * HOUR, NOW + 3 * HOUR, ("alpha-2",), "alice")
    mover(oar).update(ALPHA, spec(NOW + 2 * HOUR, NOW + 3 * HOUR, hosts=1), begun=False)
    assert oar.writes() == [("delete", older)]
    oar.held(ALPHA, "coorm-1", NOW)
    assert [r.host_names for r in oar.live("coorm-1")] == [("alpha-2",)]
    assert newest in {str(i) for i in oar.jobs}


def test_nothing_to_move() -> None:
    with pytest.raises(BatchFailure) as failure:
        mover(FakeOar()).update(ALPHA, spec(NOW + HOUR, NOW + 2 * HOUR, hosts=1), begun=False)
    assert failure.value.kind == "no_such_reservation"
