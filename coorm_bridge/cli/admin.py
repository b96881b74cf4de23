"""``coorm-bridge sessions``, ``cancel``, ``drain`` and ``resume``: a site admin's day to day.

The bridge decides who may do what (``bridge.admins``): a user who is not an admin sees only
their own sessions and may cancel only those; draining and resuming are for admins alone. Each
command prints what the bridge answered, every text from it escaped as ``status`` does, and
exits 1 with the bridge's reason when it refuses or cannot be reached.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from coorm_bridge.cli.status import clock, escaped, table
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from coorm_bridge.protocol import AdminSession, DrainInfo

T = TypeVar("T")


def _ask(
    command: str,
    url: str | None,
    token: str | None,
    ca: str | None,
    call: Callable[[BridgeClient], T],
) -> T | None:
    """The bridge's answer, or None once its refusal is printed on stderr."""
    try:
        with BridgeClient(url, token=token, verify=ca) as client:
            return call(client)
    except BridgeError as error:
        print(f"coorm-bridge {command}: {escaped(str(error))}", file=sys.stderr)
        return None


def list_sessions(
    url: str | None, token: str | None, ca: str | None, user: str | None, state: str | None
) -> int:
    """Print every session (an admin's view) with its placeholders; 1 on a refusal."""
    found = _ask("sessions", url, token, ca, lambda c: c.all_sessions(user=user, state=state))
    if found is None:
        return 1
    if not found:
        print("no sessions")
        return 0
    table(
        (
            "SESSION",
            "USER",
            "NAME",
            "STATE",
            "CLUSTERS",
            "HOSTS",
            "PLACEHOLDERS",
            "CREATED",
            "START",
            "END",
        ),
        [_row(s) for s in found],
    )
    return 0


def _row(s: AdminSession) -> tuple[str, ...]:
    hosts = "-" if s.request is None else " ".join(f"{c}:{n}" for c, n in s.request.nodes.items())
    placeholders = ", ".join(f"{p.name}@{p.cluster} {p.status}" for p in s.placeholders) or "-"
    start = s.started_at if s.started_at is not None else s.estimated_start
    shown_start = "never" if start is None and s.request is not None else clock(start)
    return (
        s.session,
        s.owner,
        s.name or "-",
        s.state.value,
        ",".join(s.clusters),
        hosts,
        placeholders,
        clock(s.created),
        shown_start,
        clock(s.end),
    )


def cancel_session(
    url: str | None, token: str | None, ca: str | None, session: str, reason: str
) -> int:
    """End a session by force; its launcher is told ``reason``. 1 on a refusal."""
    answer = _ask("cancel", url, token, ca, lambda c: c.cancel(session, reason))
    if answer is None:
        return 1
    print(f"session {escaped(answer.session)}: {answer.state.value}")
    return 0


def drain_cluster(
    url: str | None, token: str | None, ca: str | None, cluster: str, reason: str | None
) -> int:
    """No new placeholder on ``cluster`` until resumed; 1 on a refusal."""
    answer = _ask("drain", url, token, ca, lambda c: c.drain(cluster, reason))
    return 1 if answer is None else _shown(answer)


def resume_cluster(url: str | None, token: str | None, ca: str | None, cluster: str) -> int:
    """Placeholders may be made on ``cluster`` again; 1 on a refusal."""
    answer = _ask("resume", url, token, ca, lambda c: c.resume(cluster))
    return 1 if answer is None else _shown(answer)


def _shown(info: DrainInfo) -> int:
    if not info.drained:
        print(f"cluster {escaped(info.cluster)}: resumed")
        return 0
    why = "" if info.reason is None else f": {escaped(info.reason)}"
    by = escaped(info.by or "?")
    print(f"cluster {escaped(info.cluster)}: drained since {clock(info.since)} by {by}{why}")
    return 0
