"""The CooRM messages (paper §III-B, slides): views, changes and the events launchers receive.

A view is one Cluster Availability Profile (CAP) per cluster; a change carries a new CAP, a
cluster's new properties or its new links; a ``start`` event the hosts and reservations of each
cluster. The store keeps events, the HTTP API sends them, launchers read them: this module imports
neither numpy nor anything of the daemon, so a launcher loads it in no time. Converting a CAP to a
:class:`~coorm_bridge.core.profile.Profile` imports profiles when it is asked for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from enum import StrEnum
from itertools import pairwise
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, Self

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from coorm_bridge.core.model import MAX_SEQ, ClusterInfo, Frozen, HostCount, Link, Name, Time
from coorm_bridge.core.states import AppState

MAX_REASON = 1000

if TYPE_CHECKING:
    from coorm_bridge.core.profile import Profile


class CAP(Frozen):
    """A Cluster Availability Profile in its JSON form: ``n_i`` hosts on ``[t_i, t_{i+1})``."""

    cluster: Name
    steps: tuple[tuple[Time, HostCount], ...] = Field(min_length=1)

    @field_validator("steps")
    @classmethod
    def _increasing(cls, steps: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        for (t0, _), (t1, _) in pairwise(steps):
            if t1 <= t0:
                raise ValueError(f"step times must strictly increase, got {t0} then {t1}")
        return steps

    @classmethod
    def of(cls, cluster: str, profile: Profile, origin: int) -> Self:
        return cls(cluster=cluster, steps=tuple(profile.steps(origin)))

    def profile(self) -> Profile:
        from coorm_bridge.core.profile import Profile  # noqa: PLC0415 - launchers skip numpy

        return Profile.from_steps(self.steps)


class View(Frozen):
    """The view of one application: one CAP per cluster it subscribed to."""

    profiles: tuple[CAP, ...]

    @model_validator(mode="after")
    def _one_per_cluster(self) -> Self:
        names = [cap.cluster for cap in self.profiles]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"a view has one profile per cluster; {', '.join(twice)} repeat")
        return self

    @classmethod
    def of(cls, profiles: Mapping[str, Profile], origin: int) -> Self:
        return cls(profiles=tuple(CAP.of(name, p, origin) for name, p in profiles.items()))

    def as_profiles(self) -> dict[str, Profile]:
        return {cap.cluster: cap.profile() for cap in self.profiles}


class ChangeKind(StrEnum):
    INFO = "info"
    INTERCONNECT = "interconnect"
    AVAILABILITY = "availability"


AVAILABILITY: Final = ChangeKind.AVAILABILITY


class Change(Frozen):
    """CHANGE {CID, type, CAP}: the new CAP of an availability change; the cluster's new
    properties (``info``) or its links (``links``) when those changed."""

    cluster: Name
    kind: ChangeKind
    profile: CAP | None = None
    info: ClusterInfo | None = None
    links: tuple[Link, ...] | None = None
    """Every link of ``cluster`` after the change (an empty tuple: it has none left)."""
    since: Time | None = None
    """A delta (sent only to sessions that asked for them, ``?changes=delta``): ``profile``
    holds from ``since`` on, and the profile before ``since`` is the one the launcher holds.
    None: ``profile`` is the whole profile from the event's time on. Left out of the JSON when
    None: a launcher released before deltas (whose model refuses unknown fields) reads it."""

    @model_validator(mode="after")
    def _carries_its_kind(self) -> Self:
        if (self.kind is ChangeKind.AVAILABILITY) != (self.profile is not None):
            raise ValueError("an availability change carries its profile, other changes do not")
        if self.info is not None and self.kind is not ChangeKind.INFO:
            raise ValueError("only an info change carries cluster properties")
        if self.links is not None and self.kind is not ChangeKind.INTERCONNECT:
            raise ValueError("only an interconnect change carries links")
        if self.since is not None and (
            self.profile is None or self.profile.steps[0][0] != self.since
        ):
            raise ValueError("a delta's profile begins at its since")
        return self

    # No return annotation: see EventBase's serializer.
    @model_serializer(mode="wrap")
    def _without_unset_since(  # type: ignore[no-untyped-def]  # noqa: ANN202
        self, handler: SerializerFunctionWrapHandler
    ):
        dumped: dict[str, Any] = handler(self)
        if dumped.get("since", 0) is None:
            del dumped["since"]
        return dumped


#: Steps a delta must save to be sent as one: ``"since":T`` is about one step's bytes.
DELTA_COST: Final = 2


def first_difference(old: Sequence[tuple[int, int]], new: Sequence[tuple[int, int]]) -> int | None:
    """The first time two profiles' steps from the same origin differ (None: equal). Steps in
    their canonical form (no two neighbours of one value, as ``Profile.steps`` gives them)
    differ exactly from the first step where they part."""
    for (t0, v0), (t1, v1) in zip(old, new, strict=False):
        if t0 != t1:
            return min(t0, t1)
        if v0 != v1:
            return t0
    if len(old) == len(new):
        return None
    return (old if len(old) > len(new) else new)[min(len(old), len(new))][0]


def availability_changes(
    sent: Mapping[str, Profile], view: Mapping[str, Profile], now: int, *, deltas: bool = False
) -> list[Change]:
    """One availability change per cluster of ``view`` whose profile from ``now`` on differs
    from the one last ``sent`` (or was never sent): what a ``change`` event carries. With
    ``deltas``, each carries the profile from its first changed step on only, when that is
    shorter by :data:`DELTA_COST` steps (its ``since`` costs about as much as a step)."""
    changes = []
    for cluster, profile in view.items():
        steps = profile.steps(now)
        old = sent.get(cluster)
        since = None if old is None else first_difference(old.steps(now), steps)
        if old is not None and since is None:
            continue
        tail = profile.steps(since) if deltas and since is not None and since > now else None
        if tail is not None and len(tail) + DELTA_COST <= len(steps):
            cap = CAP(cluster=cluster, steps=tuple(tail))
            changes.append(Change(cluster=cluster, kind=AVAILABILITY, profile=cap, since=since))
        else:
            cap = CAP(cluster=cluster, steps=tuple(steps))
            changes.append(Change(cluster=cluster, kind=AVAILABILITY, profile=cap))
    return changes


def applied(held: CAP | None, change: Change) -> CAP:
    """The CAP a launcher holds after an availability ``change``: the change's profile when it
    is whole, else the held one up to ``since`` followed by the change's."""
    assert change.profile is not None
    if change.since is None or held is None:
        return change.profile
    head = tuple(step for step in held.steps if step[0] < change.since)
    return CAP(cluster=change.cluster, steps=head + change.profile.steps)


class Allocation(Frozen):
    """What one cluster gives a started application: its hosts and the holding reservation."""

    hosts: list[Name]
    reservation: Name | None = None


#: Why something happened, in a sentence (a batch system's message can be long: it is cut).
Reason = Annotated[str, Field(max_length=MAX_REASON)]


def reason(text: str) -> str:
    """``text`` cut to what an event may carry."""
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


#: Event fields of API v2, left out of the JSON when unset: a v1 launcher (whose models refuse
#: unknown fields) reads a newer bridge's events unchanged.
_V2_FIELDS: Final = ("request", "preemptible", "estimates")


class EventBase(Frozen):
    seq: Annotated[int, Field(ge=1, le=MAX_SEQ, strict=True)]
    time: Time
    request: Name | None = None
    """In an evolving application's session (API v2): the request this event is about (None:
    the session itself). v1 sessions never carry it."""

    # No return annotation: pydantic would take it for the events' serialisation schema, and
    # the OpenAPI document would describe every event as a bare object.
    @model_serializer(mode="wrap")
    def _without_v2_unset(  # type: ignore[no-untyped-def]  # noqa: ANN202
        self, handler: SerializerFunctionWrapHandler
    ):
        dumped: dict[str, Any] = handler(self)
        for name in _V2_FIELDS:
            if dumped.get(name, 0) is None:
                del dumped[name]
        return dumped


class ChangeEvent(EventBase):
    """changeNotify: the view changed; carries the new estimated start (None = never)."""

    type: Literal["change"] = "change"
    changes: list[Change]
    estimated_start: Time | None = None
    preemptible: list[Change] | None = None
    """API v2: the preemptible view's changes (``changes`` are the non-preemptible view's)."""
    estimates: dict[Name, Time | None] | None = None
    """API v2: the new estimated start of each waiting request whose estimate changed."""


class StartEvent(EventBase):
    """startNotify: the allocation holds from ``time`` until ``end`` on these hosts.

    ``end`` is a hard limit: the hosts may be promised to the next application from then on,
    and a batch system refuses a job into the placeholder whose time limit would pass it (Slurm:
    "Requested node configuration is not available"). :meth:`time_limit` is the one to ask.
    """

    type: Literal["start"] = "start"
    end: Time
    allocations: dict[Name, Allocation]

    def time_limit(self, now: float, unit: int = 60, slack: float = 0) -> int:
        """Seconds of time limit for a job submitted at ``now`` into this allocation, 0 when
        less than one ``unit`` is left.

        A batch system starts a job at its scheduler's next pass, not at the submission, and
        counts its limit from then: a job that would end after ``end`` waits for ever when the
        next placeholder begins there on the same hosts (Slurm: PENDING "BadConstraints"). So
        the limit is what is left from ``now + slack`` (``now`` to the fraction of a second,
        ``slack`` the longest the batch system takes to start it), rounded down to whole
        ``unit`` (Slurm counts minutes and rounds a limit up)."""
        if unit <= 0:
            raise ValueError("unit must be positive")
        if slack < 0:
            raise ValueError("slack cannot be negative")
        return max(0, math.floor((self.end - now - slack) / unit)) * unit


class KilledEvent(EventBase):
    """The allocation was taken back (walltime exceeded, node failure, admin action)."""

    type: Literal["killed"] = "killed"
    reason: Reason


class PlacementFailedEvent(EventBase):
    """The batch systems did not hold the session's placeholders this time; nothing is held for
    it, and the bridge tries again at ``retry_at`` (the session is placed no earlier)."""

    type: Literal["placement_failed"] = "placement_failed"
    reason: Reason
    retry_at: Time


class ErrorEvent(EventBase):
    """The session cannot go on (the batch system will never hold hosts for its owner, or
    handling it failed); an ``ended`` event in state ``failed`` follows."""

    type: Literal["error"] = "error"
    reason: Reason


class WithdrawnEvent(EventBase):
    """The bridge withdrew the session (say its launcher was not heard from for too long); an
    ``ended`` event in state ``cancelled`` follows."""

    type: Literal["withdrawn"] = "withdrawn"
    reason: Reason


class PreemptEvent(EventBase):
    """API v2: a started preemptible request must give ``hosts`` of its hosts back by
    ``deadline`` (``done`` with that many hosts, or all); past it, what runs there is cancelled
    and the request ends (``killed``)."""

    type: Literal["preempt"] = "preempt"
    hosts: Annotated[int, Field(ge=1, strict=True)]
    deadline: Time
    host_names: list[Name] = Field(default_factory=list)
    """Which of its hosts (the others are its to keep): a request that needs them may be
    placed on them from the deadline."""


class EndedEvent(EventBase):
    """The session reached an end state (finished, cancelled or failed); no event follows."""

    type: Literal["ended"] = "ended"
    state: AppState


Event = Annotated[
    ChangeEvent
    | StartEvent
    | KilledEvent
    | PlacementFailedEvent
    | ErrorEvent
    | WithdrawnEvent
    | PreemptEvent
    | EndedEvent,
    Field(discriminator="type"),
]
