"""The rows the store keeps: sessions and placeholders, validated before any write.

Apart from :mod:`coorm_bridge.store.store` (which only moves them in and out of SQLite) because
the daemon's other parts (the HTTP API, placement, reconciliation) build and read them too.
"""

from __future__ import annotations

import base64
import secrets
from enum import StrEnum
from typing import Annotated, Self

from pydantic import Field, model_validator

from coorm_bridge.core.model import Filter, Frozen, Name, Request, Time, UserName
from coorm_bridge.core.states import AppState, check


def new_session_id() -> str:
    """16 characters of lowercase base32 (80 random bits).

    Unlike ``token_urlsafe`` it never starts with '-' or '_', so it is a valid ``Name``, safe in
    URLs, file names and the batch systems' reservation names, whatever their case rules.
    """
    return base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()


class SessionRow(Frozen):
    """One launcher session: its subscription and where it stands in the CooRM state machine."""

    id: Name
    order: Annotated[int, Field(ge=1, strict=True)]
    """Subscription order (the policy's priority): strictly increasing, never reused."""
    owner: UserName
    name: Annotated[str, Field(max_length=256)] | None = None
    filter: Filter
    clusters: tuple[Name, ...]
    """The clusters the filter let through at subscription: what the view covers."""
    state: AppState = AppState.SUBMITTED
    request: Request | None = None
    estimated_start: Time | None = None
    started_at: Time | None = None
    done_at: Time | None = None
    alloc_end: Time | None = None
    created: Time
    updated: Time

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        # A row the policy cannot read would fail every pass after a restart: refuse it at write.
        check(self)
        return self


class PlaceholderStatus(StrEnum):
    REQUESTED = "requested"
    """Asked of the batch system; not confirmed yet (after a crash: check, re-create or drop)."""
    HELD = "held"
    GHOST = "ghost"
    """Held for a finished application during ``fair_start``; may be handed over in place."""
    RELEASING = "releasing"
    """Deletion asked of the batch system; the row goes once it is confirmed."""


class PlaceholderRow(Frozen):
    """One reservation the bridge holds in a batch system for one session on one cluster.

    To hand a ghost's placeholder over, delete the old row and put the new one (same ``name``)
    inside one :meth:`Store.transaction`.
    """

    session_id: Name
    cluster: Name
    name: Name
    start: Time
    end: Time
    hosts: Annotated[int, Field(gt=0, strict=True)]
    host_names: tuple[Name, ...] = ()
    """Empty until the batch system chose the hosts, then exactly ``hosts`` distinct names."""
    status: PlaceholderStatus = PlaceholderStatus.REQUESTED

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.end <= self.start:
            raise ValueError(f"placeholder {self.name} must end ({self.end}) after its start")
        if self.host_names and len(set(self.host_names)) != self.hosts:
            raise ValueError(
                f"placeholder {self.name} holds {self.hosts} hosts: give that many distinct "
                f"host names or none, not {len(self.host_names)}"
            )
        return self
