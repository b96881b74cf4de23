"""Which hosts a reservation can name: free over its whole window, from one read of the cluster.

A batch system asked for a host count chooses the hosts itself, and may be stricter than it
needs to be. Slurm 22.05 is: a node-count reservation that starts exactly when a running job's
time limit ends is refused ("Requested nodes are busy"), one second later it is accepted, and so
is the same request naming its hosts. The bridge plans starts exactly at job ends, so under load
it would often hold nothing. :func:`choose_hosts` picks the hosts to name instead, with the
batch system's own rule for named hosts: a running job's hosts are free from its end on.

It works host by host, where :mod:`coorm_bridge.core.steps` and the profiles count hosts: a
count says when enough hosts are free, not which ones stay free over a whole window.
"""

from __future__ import annotations

from collections.abc import Iterable

from coorm_bridge.core.batch import Job, JobState, Node, NodeState, Reservation, ReservationSpec


def choose_hosts(
    spec: ReservationSpec,
    nodes: Iterable[Node],
    jobs: Iterable[Job],
    reservations: Iterable[Reservation],
) -> tuple[str, ...] | None:
    """``spec.size`` hosts free over ``[spec.start, spec.end)``, or None when there are not
    enough.

    The reservation ``spec.name`` itself (an update) is not in the way: its hosts come first,
    and those of jobs running inside it are always kept, as the batch system keeps them. Other
    hosts are taken in the batch system's node order, so that a choice is reproducible.
    """
    nodes = tuple(nodes)
    ours: tuple[str, ...] = ()
    blocked: set[str] = set()
    for reservation in reservations:
        if reservation.name == spec.name:
            ours = reservation.host_names
        elif reservation.start < spec.end and spec.start < reservation.end:
            blocked.update(reservation.host_names)
    inside: list[str] = []
    for job in jobs:
        if job.state is not JobState.RUNNING:
            continue  # pending jobs never block a reservation: they are planned around it
        if job.reservation == spec.name:
            inside.extend(job.host_names)
        elif job.end is None or job.end > spec.start:
            blocked.update(job.host_names)
    up = {node.name for node in nodes if node.state is NodeState.UP}
    order = [*inside, *ours, *(node.name for node in nodes)]
    chosen: list[str] = []
    for name in dict.fromkeys(order):
        if len(chosen) == spec.size:
            break
        if name in inside or (name in up and name not in blocked):
            chosen.append(name)
    if len(chosen) < spec.size:
        return None
    return tuple(chosen)


#: At most this many candidate starts are tried by :func:`earliest_named_start` (each is a pass over
#: the cluster's jobs): the hint is a lower bound for the policy, not a promise.
MAX_CANDIDATES = 256


def earliest_named_start(
    spec: ReservationSpec,
    nodes: Iterable[Node],
    jobs: Iterable[Job],
    reservations: Iterable[Reservation],
) -> int | None:
    """The earliest start, from ``spec.start`` on, at which :func:`choose_hosts` finds hosts for
    the same reservation (same duration), or None. Hosts only free up when a running job reaches
    its bound or another reservation ends, so those are the only starts worth trying.

    A count-based plan (free hosts over time, whatever they are) may see room that no set of
    hosts has over the whole window; this is the batch system's hint for such a refusal.
    """
    nodes, jobs, reservations = tuple(nodes), tuple(jobs), tuple(reservations)
    duration = spec.end - spec.start
    ends = {j.end for j in jobs if j.state is JobState.RUNNING and j.end is not None}
    ends.update(r.end for r in reservations if r.name != spec.name)
    candidates = sorted(t for t in ends | {spec.start} if t >= spec.start)[:MAX_CANDIDATES]
    for start in candidates:
        moved = spec.model_copy(update={"start": start, "end": start + duration})
        if choose_hosts(moved, nodes, jobs, reservations) is not None:
            return start
    return None
