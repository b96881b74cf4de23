"""Keeping a waiting session's stored events bounded while its view moves: superseded events
are coalesced as new ones are appended.

A launcher reads its session's events from a number ``after`` on, and keeps from ``change``
events only the latest value of each (cluster, kind): a cluster's profile, its properties, its
links; and the latest estimated start. So the trailing run of a session's ``change`` and
``placement_failed`` events (those after its last event of any other kind) can be replaced, when a
new one comes:

- a new ``change`` takes the place of every ``change`` of the run: it is stored with the next
  number and carries, for each (cluster, kind) changed in the run, its latest value, in the order
  of their last occurrence (links of two clusters overlap: applied in that order they give the
  same interconnect as all of them in turn); a profile sent as a delta (``since``) is composed
  with the ones before it, so that the change carries what they all did;
- a new ``placement_failed`` takes the place of those of the run (only the latest retry counts).

A launcher that read up to any number N and asks for what follows gets the replacing event (its
number is above every number it replaces, so above N): applying it gives the same view and
estimate as reading every event ever written would have. Numbers stay increasing and are never
reused, with gaps where events were replaced; the events' wire format is unchanged, so launchers
of any release read them as before. A session keeps at most one of each in the run: a waiting
session's events stay bounded however long it waits. Other events (``start``, ``killed``,
``error``, ``withdrawn``, ``ended``) are never replaced, nor anything before them.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Final

#: The event types that a newer one of the same type supersedes in a session's trailing run.
COALESCED: Final = ("change", "placement_failed")


def merged_changes(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The latest change of each (cluster, kind) of ``runs`` (the ``changes`` of successive
    events, oldest first), in the order of their last occurrence."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for changes in runs:
        for change in changes:
            key = (change["cluster"], change["kind"])
            older = latest.pop(key, None)  # re-inserted last: dicts keep insertion order
            latest[key] = change if older is None else _composed(older, change)
    return list(latest.values())


def _composed(older: dict[str, Any], newer: dict[str, Any]) -> dict[str, Any]:
    """One change that does what ``older`` then ``newer`` do. A delta (``since``) keeps the
    older profile's steps before its ``since``: the result is a delta from the older one's
    ``since``, or whole when the older one was."""
    since = newer.get("since")
    if since is None or older.get("profile") is None:
        return newer
    head = [step for step in older["profile"]["steps"] if step[0] < since]
    if not head:
        return newer
    steps = head + list(newer["profile"]["steps"])
    merged = {**newer, "profile": {**newer["profile"], "steps": steps}}
    if older.get("since") is None:
        del merged["since"]
    else:
        merged["since"] = older["since"]
    return merged


def trailing(conn: sqlite3.Connection, session_id: str) -> list[sqlite3.Row]:
    """The session's trailing run of coalesced events (seq, type, body), oldest first."""
    return conn.execute(
        "SELECT seq, type, body FROM events WHERE session_id = ?1 AND seq > COALESCE(("
        "SELECT MAX(seq) FROM events WHERE session_id = ?1 AND type NOT IN (?2, ?3)), 0) "
        "ORDER BY seq",
        (session_id, *COALESCED),
    ).fetchall()


def coalesce(
    conn: sqlite3.Connection,
    session_id: str,
    event: dict[str, Any],
    run: list[sqlite3.Row],
    read: int = 0,
) -> dict[str, Any]:
    """Delete the events of ``run`` (the session's trailing run) that ``event`` (a new one, its
    JSON fields) supersedes; returns ``event`` as it is to be stored: a ``change`` carrying the
    merged changes. Runs inside the caller's transaction.

    ``read``: the session's launcher read its events up to this number. Those it read are
    merged into the last of them, and only those it did not read into ``event``: a launcher
    that keeps up gets what changed since it last read, not the whole view again (a reader from
    the start still gets both, hence the whole view)."""
    kind = event["type"]
    if kind not in COALESCED:
        return event
    bodies = [(row["seq"], json.loads(row["body"])) for row in run if row["type"] == kind]
    # API v2: a request's placement_failed replaces only that request's.
    superseded = [
        (seq, body) for seq, body in bodies if body.get("request") == event.get("request")
    ]
    delivered = [(seq, body) for seq, body in superseded if seq <= read]
    replaced = [(seq, body) for seq, body in superseded if seq > read]
    if len(delivered) > 1:
        _merge_delivered(conn, session_id, delivered)
    if not replaced:
        return event
    conn.executemany(
        "DELETE FROM events WHERE session_id = ? AND seq = ?",
        [(session_id, seq) for seq, _ in replaced],
    )
    if kind != "change":
        return event
    return _merged(replaced, event)


def _merge_delivered(
    conn: sqlite3.Connection, session_id: str, delivered: list[tuple[int, dict[str, Any]]]
) -> None:
    """The events a launcher already read, as one: the last of them, carrying them all."""
    *older, (seq, last) = delivered
    conn.executemany(
        "DELETE FROM events WHERE session_id = ? AND seq = ?",
        [(session_id, old) for old, _ in older],
    )
    body = last if last["type"] != "change" else _merged(older, last)
    conn.execute(
        "UPDATE events SET body = ? WHERE session_id = ? AND seq = ?",
        (json.dumps(body, separators=(",", ":")), session_id, seq),
    )


def _merged(replaced: list[tuple[int, dict[str, Any]]], event: dict[str, Any]) -> dict[str, Any]:
    """``event`` (a ``change``) carrying the changes of ``replaced`` before its own."""
    merged = {
        **event,
        "changes": merged_changes([*(b["changes"] for _, b in replaced), event["changes"]]),
    }
    if any("preemptible" in b or "estimates" in b for _, b in [*replaced, (0, event)]):
        # API v2: both views' latest changes, and every request's latest estimate.
        olders = [b.get("preemptible") or [] for _, b in replaced]
        merged["preemptible"] = merged_changes([*olders, event.get("preemptible") or []])
        estimates: dict[str, Any] = {}
        for _, body in [*replaced, (0, event)]:
            estimates |= body.get("estimates") or {}
        merged["estimates"] = estimates or None
    return merged


def coalesce_all(conn: sqlite3.Connection) -> int:
    """Coalesce every session's trailing run as if each of its events had been appended with
    coalescing (for a store written before it was done); returns how many events went."""
    sessions = [row[0] for row in conn.execute("SELECT id FROM sessions")]
    removed = 0
    for session_id in sessions:
        run = trailing(conn, session_id)
        for kind in COALESCED:
            mine = [row for row in run if row["type"] == kind]
            if len(mine) < 2:
                continue
            *older, newest = mine
            body = json.loads(newest["body"])
            kept = coalesce(conn, session_id, body, older)
            if kept is not body:
                conn.execute(
                    "UPDATE events SET body = ? WHERE session_id = ? AND seq = ?",
                    (json.dumps(kept, separators=(",", ":")), session_id, newest["seq"]),
                )
            removed += len(older)
    return removed
