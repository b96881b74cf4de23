"""The calls that change the simulated platform, as records: what :mod:`.journal` keeps.

The simulation is deterministic: the platform file, its start and the changing calls with the
simulated times they came at give the whole history, whenever it is polled. So the state saved
for a restart is those inputs, not the schedulers' internal structures, which would need a format
of their own, kept in step with every change to the scheduler. One model per call, validated when
read back like any other input; ``op`` names the site's method (or control) it stands for.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, JsonValue, TypeAdapter

from coorm_bridge.core.batch import JobSpec, JobState, NodeState, ReservationSpec
from coorm_bridge.core.model import Frozen, Link, Name


class CreateReservation(Frozen):
    op: Literal["create_reservation"] = "create_reservation"
    cluster: Name
    spec: ReservationSpec


class UpdateReservation(Frozen):
    op: Literal["update_reservation"] = "update_reservation"
    cluster: Name
    spec: ReservationSpec


class DeleteReservation(Frozen):
    op: Literal["delete_reservation"] = "delete_reservation"
    cluster: Name
    name: Name


class Submit(Frozen):
    op: Literal["submit"] = "submit"
    cluster: Name
    job: JobSpec


class Cancel(Frozen):
    op: Literal["cancel"] = "cancel"
    cluster: Name
    job_id: str


class EndJob(Frozen):
    """A job's process ended (the bridge's front end ran it): the simulated job ends with it,
    instead of at its simulated run time."""

    op: Literal["end_job"] = "end_job"
    cluster: Name
    job_id: str
    state: Literal[JobState.COMPLETED, JobState.FAILED]


class SetNodeState(Frozen):
    op: Literal["set_node_state"] = "set_node_state"
    cluster: Name
    host: Name
    state: NodeState
    at: int | None = None


class Upgrade(Frozen):
    op: Literal["upgrade"] = "upgrade"
    cluster: Name
    properties: dict[str, JsonValue]


class SetLinks(Frozen):
    op: Literal["set_links"] = "set_links"
    links: tuple[Link, ...]


class Outage(Frozen):
    op: Literal["outage"] = "outage"
    cluster: Name
    start: int
    end: int


class RefuseReservations(Frozen):
    op: Literal["refuse_reservations"] = "refuse_reservations"
    cluster: Name
    count: int
    reason: str


class RefusalUsed(Frozen):
    """A reservation request refused by :meth:`.SiteControls.refuse_reservations`: the refused
    call changed nothing else, but it used up one of the refusals."""

    op: Literal["refusal_used"] = "refusal_used"
    cluster: Name


class ForgetUser(Frozen):
    """The batch system no longer knows a user (as a uid with no passwd entry there)."""

    op: Literal["forget_user"] = "forget_user"
    user: Name


SiteChange = SetNodeState | SetLinks | Outage | RefuseReservations | RefusalUsed | ForgetUser
"""The calls that change the site itself rather than its jobs and reservations."""

Call = Annotated[
    CreateReservation
    | UpdateReservation
    | DeleteReservation
    | Submit
    | Cancel
    | EndJob
    | SetNodeState
    | Upgrade
    | SetLinks
    | Outage
    | RefuseReservations
    | RefusalUsed
    | ForgetUser,
    Field(discriminator="op"),
]

CALL: TypeAdapter[Call] = TypeAdapter(Call)
"""Reads and writes a :data:`Call` as JSON."""
