"""``coorm-bridge status --watch``: the status table kept up to date, redrawn after each of the
bridge's passes (a long poll on ``GET /v1/passes``), at most once a second.

Each cluster's line ends with a bar chart of its free hosts over the next hours: one column per
time slot, as high as the fewest hosts free at any time of that slot (a column never shows more
than is free all along it). The pure parts (:func:`slots`, :func:`bar`, :func:`scale`,
:func:`render`) need no bridge. Every text from the bridge is escaped (:func:`.status.escaped`)
and given to rich as plain text, never as markup.
"""

from __future__ import annotations

import bisect
import itertools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Self

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from coorm_bridge.cli.status import batch_cell, clock, escaped, session_cells
from coorm_bridge.core.messages import CAP
from coorm_bridge.core.model import ClusterInfo
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from coorm_bridge.protocol import Health, SessionInfo

#: The block characters of a column, from no free host to all of them.
BLOCKS = " ▁▂▃▄▅▆▇█"
#: Columns of a cluster's chart, whatever the hours it covers.
COLUMNS = 24
#: Seconds the long poll waits for a pass; at least this long between two reads of a redraw.
WAIT = 25
MIN_REDRAW = 1.0
#: Seconds between two tries of a bridge that does not answer.
RETRY = 3.0
#: The width of each redraw when stdout is not a terminal (a log, a pipe) and $COLUMNS is unset:
#: wide enough that a row is one line.
PLAIN_WIDTH = 160
#: Tick intervals of the time scale, in minutes: the first whose labels do not touch.
TICKS = (5, 10, 15, 30, 60, 120, 180, 240, 360, 720, 1440, 2880, 10080)


@dataclass(frozen=True)
class Reading:
    """What one redraw shows: the bridge's health, clusters, availability and sessions."""

    health: Health
    clusters: Sequence[ClusterInfo]
    caps: dict[str, CAP]
    sessions: Sequence[SessionInfo]


def read(client: BridgeClient) -> Reading:
    health = client.health()
    clusters = client.clusters()
    caps = {cap.cluster: cap for cap in client.availability()}
    return Reading(health, clusters, caps, client.sessions())


def free_at(steps: Sequence[tuple[int, int]], t: int) -> int:
    """Free hosts at ``t`` (the first step's before it starts; the last step lasts forever)."""
    after = bisect.bisect_right(steps, t, key=lambda step: step[0])
    return steps[max(0, after - 1)][1]


def slots(steps: Sequence[tuple[int, int]], start: int, end: int, columns: int) -> list[int]:
    """The fewest free hosts in each of ``columns`` slots splitting ``[start, end)`` evenly (to
    the second): the host count at the slot's start and at every step inside it."""
    if end - start < columns:
        raise ValueError(f"{columns} slots need at least {columns} seconds, got {end - start}")
    bounds = [start + (end - start) * k // columns for k in range(columns + 1)]
    return [
        min([free_at(steps, low)] + [n for t, n in steps if low < t < high])
        for low, high in itertools.pairwise(bounds)
    ]


def level(free: int, hosts: int) -> int:
    """A column's height, 0 to 8 eighths of the cluster: rounded down, but 1 for any free host
    (a sliver is not nothing), 8 only when every host is free."""
    if free <= 0 or hosts <= 0:
        return 0
    if free >= hosts:
        return len(BLOCKS) - 1
    return max(1, min(len(BLOCKS) - 2, (len(BLOCKS) - 1) * free // hosts))


def bar(columns: Sequence[int], hosts: int) -> str:
    return "".join(BLOCKS[level(free, hosts)] for free in columns)


def scale(seconds: int, columns: int) -> str:
    """The time scale under a chart of ``columns`` over ``seconds``: ``now``, then ``+1h``...
    at the column where that time starts, every tick the labels leave room for."""
    line = list("now".ljust(columns)[:columns])
    for minutes in TICKS:
        marks = range(minutes * 60, seconds, minutes * 60)
        labels = [(t * columns // seconds, _label(t // 60)) for t in marks]
        at = [0, *(column for column, _ in labels)]
        widths = [3, *(len(text) for _, text in labels)]
        roomy = all(b - a > w for a, b, w in zip(at, at[1:], widths, strict=False))
        if roomy and all(column + len(text) <= columns for column, text in labels):
            for column, text in labels:
                line[column : column + len(text)] = text
            break
    return "".join(line).rstrip()


def _label(minutes: int) -> str:
    if minutes % 60:
        return f"+{minutes}m"
    if minutes % 1440 == 0 and minutes > 1440:
        return f"+{minutes // 1440}d"
    return f"+{minutes // 60}h"


def short_clock(t: int | None, now: int) -> str:
    """``14:05:09`` today, ``11-27 09:00`` another day, ``-`` for none."""
    if t is None:
        return "-"
    if time.localtime(t)[:3] == time.localtime(now)[:3]:
        return time.strftime("%H:%M:%S", time.localtime(t))
    return time.strftime("%m-%d %H:%M", time.localtime(t))


def render(
    url: str, reading: Reading | None, hours: float, error: str | None = None
) -> RenderableType:
    """The whole display: a header, a line per cluster with its chart, the sessions. With
    ``error`` (the bridge did not answer) it says so above the last reading, if any."""
    header = Text(f"coorm-bridge at {escaped(url)}")
    lines: list[RenderableType] = [header]
    if reading is not None:
        health = reading.health
        ok = health.status == "ok"
        header.append_text(Text.assemble(": ", (health.status, "green" if ok else "yellow")))
        header.append(f", time {clock(health.time)}")
        notes = [f"{p.kind} on {', '.join(p.clusters)}: {p.message}" for p in health.problems]
        if health.drained:
            drained = ", ".join(health.drained)
            notes.append(f"drained (no new placeholders until resumed): {drained}")
        stale = sorted((n, c.error) for n, c in health.clusters.items() if c.status != "ok")
        notes += [f"{name}: {why}" for name, why in stale if why]
        lines += [Text(f"  {escaped(note)}") for note in notes]
    if error is not None:
        lines.append(Text(f"  {escaped(error)}; trying again", "bold red"))
    if reading is not None:
        lines += ["", _clusters(reading, hours), "", _sessions(reading)]
    return Group(*lines)


def _clusters(reading: Reading, hours: float) -> Table:
    health = reading.health
    span = max(COLUMNS, round(hours * 3600))
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("CLUSTER", "HOSTS", "BATCH", "FREE NOW", f"FREE, NEXT {hours:g}h"):
        table.add_column(name, no_wrap=True)
    hosts = {info.name: info.hosts for info in reading.clusters}
    unread = [name for name in sorted(health.clusters) if name not in hosts]
    for name in [*hosts, *unread]:  # unread: served, but its batch system never answered
        cap, count = reading.caps.get(name), hosts.get(name)
        chart = "?"
        if cap is not None and count is not None:
            chart = bar(slots(cap.steps, health.time, health.time + span, COLUMNS), count)
        free = "?" if cap is None else cap.steps[0][1]
        row = (name, count or "?", batch_cell(health, name), free)
        table.add_row(*(Text(escaped(str(x))) for x in row), Text(chart, "cyan"))
    table.add_row("", "", "", "", Text(scale(span, COLUMNS), "dim"))
    return table


def _sessions(reading: Reading) -> RenderableType:
    if not reading.sessions:
        return Text("no sessions")
    now = reading.health.time
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("SESSION", "OWNER", "NAME", "STATE", "REQUEST", "START", "END"):
        table.add_column(name, no_wrap=name in ("SESSION", "STATE", "START", "END"))
    for session in reading.sessions:
        start = session.started_at if session.started_at is not None else session.estimated_start
        never = start is None and session.state is AppState.WAITING  # not before the pass
        row = (
            *session_cells(session, reading.health)[:5],
            "never" if never else short_clock(start, now),
            short_clock(session.end, now),
        )
        table.add_row(*(Text(escaped(x)) for x in row))
    return table


def watch(
    url: str | None,
    token: str | None,
    ca: str | None = None,
    *,
    hours: float = 6.0,
    console: Console | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Redraw the status after each pass until Ctrl-C (exit status 0). On a terminal the
    display is redrawn in place; otherwise each redraw is printed after the one before."""
    screen = Screen(console or _console())
    try:
        client = BridgeClient(url, token=token, verify=ca)
    except ValueError as bad:
        screen.console.print(Text(f"coorm-bridge status: {escaped(str(bad))}"))
        return 2
    reading: Reading | None = None
    last, drawn = 0, -MIN_REDRAW
    try:
        with screen:
            while True:
                error = None
                try:
                    reading = read(client)
                except BridgeError as failed:
                    error = str(failed)
                shown = render(client.url, reading, hours, error)
                sleep(max(0.0, drawn + MIN_REDRAW - monotonic()))
                screen.show(shown)
                drawn = monotonic()
                if error is None:
                    try:
                        last = client.passes(after=last, wait=WAIT).passes
                        continue
                    except BridgeError:
                        pass  # the next read says why, or reads on
                sleep(RETRY)
    except KeyboardInterrupt:
        return 0
    finally:
        client.close()


class Screen:
    """Where each redraw goes: in place on a terminal (rich's Live), else printed in turn."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = Live(console=console, auto_refresh=False) if console.is_terminal else None

    def __enter__(self) -> Self:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exception: object) -> None:
        if self.live is not None:
            self.live.stop()  # the last redraw stays on the terminal

    def show(self, renderable: RenderableType) -> None:
        if self.live is not None:
            self.live.update(renderable, refresh=True)
        else:
            self.console.print(renderable)
            self.console.file.flush()


def _console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PLAIN_WIDTH
    return console
