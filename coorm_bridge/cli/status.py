"""``coorm-bridge status``: the bridge as a site admin or a user wants to glance at it.

What it prints comes from the bridge (session names, user names, error details) or from a proxy
pretending to be one: every such text is escaped (:func:`escaped`) so that no control character,
escape sequence or bidirectional override reaches the terminal.
"""

from __future__ import annotations

import sys
import time
import unicodedata
from collections.abc import Sequence

from coorm_bridge.core.messages import CAP
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from coorm_bridge.protocol import Health, SessionInfo

#: How many future changes of a cluster's availability the table shows.
SHOWN_STEPS = 4


def show_status(url: str | None, token: str | None, ca: str | None = None) -> int:
    """Print clusters, their availability and the caller's sessions; 1 if the bridge is
    unreachable or refuses, with the reason."""
    try:
        with BridgeClient(url, token=token, verify=ca) as client:
            health = client.health()
            infos = client.clusters()
            caps = {cap.cluster: cap for cap in client.availability()}
            sessions = client.sessions()
            where = client.url
    except BridgeError as error:
        print(f"coorm-bridge status: {escaped(str(error))}", file=sys.stderr)
        return 1
    print(f"coorm-bridge at {escaped(where)}: {health.status}, time {clock(health.time)}")
    for problem in health.problems:  # what only an admin can fix, with the remedy
        clusters = ", ".join(problem.clusters)
        print(f"  {problem.kind} on {escaped(clusters)}: {escaped(problem.message)}")
    if health.drained:  # an admin's coorm-bridge drain: nothing new is placed there
        print(
            f"  drained (no new placeholders until resumed): {escaped(', '.join(health.drained))}"
        )
    rows = [
        (
            info.name,
            str(info.hosts),
            batch_cell(health, info.name),
            _free_now(caps.get(info.name)),
            _later(caps.get(info.name), health.time),
        )
        for info in infos
    ]
    shown = {info.name for info in infos}
    rows += [  # served but never read: not offered to subscriptions until its batch system answers
        (name, "?", batch_cell(health, name), "?", "?")
        for name in sorted(health.clusters)
        if name not in shown
    ]
    for name, cluster in sorted(health.clusters.items()):  # why a cluster is stale
        if cluster.status != "ok" and cluster.error:
            print(f"  {escaped(name)}: {escaped(cluster.error)}")
    print()
    table(("CLUSTER", "HOSTS", "BATCH", "FREE NOW", "FREE LATER (time: hosts)"), rows)
    print()
    if not sessions:
        print("no sessions")
        return 0
    table(
        ("SESSION", "OWNER", "NAME", "STATE", "REQUEST", "START", "END"),
        [session_cells(s, health) for s in sessions],
    )
    return 0


def session_cells(s: SessionInfo, health: Health) -> tuple[str, ...]:
    """A session's line of the table (``status --watch`` shows its first five cells too)."""
    request = (
        "-"
        if s.request is None
        else " ".join(f"{c}:{n}" for c, n in s.request.nodes.items()) + f" {s.request.duration}s"
    )
    start = s.started_at if s.started_at is not None else s.estimated_start
    shown_start = "never" if start is None and s.request is not None else clock(start)
    return (s.session, s.owner, s.name or "-", s.state.value, request, shown_start, clock(s.end))


def batch_cell(health: Health, cluster: str) -> str:
    """What the bridge last heard of a cluster's batch system, and whether it is drained."""
    status = health.clusters[cluster].status if cluster in health.clusters else "?"
    return f"{status}, drained" if cluster in health.drained else status


def _free_now(cap: CAP | None) -> str:
    return "?" if cap is None else str(cap.steps[0][1])


def _later(cap: CAP | None, now: int) -> str:
    if cap is None:
        return "?"
    steps = [f"{clock(t)}: {n}" for t, n in cap.steps[1 : SHOWN_STEPS + 1]]
    more = len(cap.steps) - 1 - SHOWN_STEPS
    return ", ".join(steps) + (f" (+{more} more)" if more > 0 else "") if steps else "-"


def clock(t: int | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    cells = [[escaped(str(x)) for x in line] for line in (header, *rows)]
    widths = [max(len(x) for x in column) for column in zip(*cells, strict=True)]
    for line in cells:
        print("  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip())


def escaped(text: str) -> str:
    """``text`` with every character a terminal would act on, or that hides what follows, as a
    Python escape (``\\x1b``, ``\\u202e``): controls, format and separator characters other
    than the plain space, surrogates, unassigned code points. The rest is left as it is."""
    return "".join(_escape(char) for char in text)


def _escape(char: str) -> str:
    kind = unicodedata.category(char)
    if kind[0] in "LMNPS" or char == " ":
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
