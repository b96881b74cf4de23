"""``coorm-bridge status --watch``: a cluster's free hosts slotted into columns and drawn as a bar,
the display built from what the bridge answered (no daemon), the loop against a scripted
bridge, and the command against a real daemon on the mock platform."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from coorm_bridge.cli import watch as watch_module
from coorm_bridge.cli.watch import BLOCKS, Reading, bar, free_at, level, render, scale, slots
from coorm_bridge.core.messages import CAP
from coorm_bridge.core.model import ClusterInfo, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.client import BridgeUnreachable
from coorm_bridge.protocol import ClusterHealth, Health, SessionInfo
from coorm_bridge.protocol_web import Passes
from tests import daemons

NOW = 1_800_000_000


@st.composite
def profiles(draw, hosts: int = 16, span: int = 600):
    """A step function's steps: strictly increasing times around ``[NOW, NOW + span)``."""
    times = draw(
        st.lists(st.integers(NOW - 50, NOW + span + 50), min_size=1, max_size=8, unique=True)
    )
    return tuple((t, draw(st.integers(0, hosts))) for t in sorted(times))


@given(
    steps=profiles(),
    span=st.integers(24, 600),
    columns=st.integers(1, 24),
)
def test_a_column_never_shows_more_than_is_free_during_its_slot(steps, span, columns):
    found = slots(steps, NOW, NOW + span, columns)
    assert len(found) == columns
    bounds = [NOW + span * k // columns for k in range(columns + 1)]
    for value, low, high in zip(found, bounds, bounds[1:], strict=False):
        during = [free_at(steps, t) for t in range(low, high)]
        assert value == min(during)  # never above any second of it, and met at one


@given(hosts=st.integers(1, 5000), columns=st.integers(1, 48))
def test_a_full_cluster_is_full_blocks(hosts, columns):
    steps = ((NOW, hosts),)
    assert bar(slots(steps, NOW, NOW + 3600, columns), hosts) == "█" * columns


@given(hosts=st.integers(1, 5000), data=st.data())
def test_a_columns_height_follows_the_free_share(hosts, data):
    free = data.draw(st.integers(0, hosts))
    more = data.draw(st.integers(free, hosts))
    height = level(free, hosts)
    assert (height == 0) == (free == 0)
    assert (height == len(BLOCKS) - 1) == (free == hosts)
    assert height <= level(more, hosts)  # more free is never drawn lower
    if 0 < free < hosts:  # eighths rounded down, but a sliver for any free host
        assert height == max(1, min(7, 8 * free // hosts))


def test_a_bar_draws_each_slot_and_the_scale_marks_the_hours():
    steps = ((NOW, 8), (NOW + 3600, 2), (NOW + 7200, 0), (NOW + 10800, 6))
    assert bar(slots(steps, NOW, NOW + 6 * 3600, 24), 8) == "████▂▂▂▂    " + "▆" * 12
    assert scale(6 * 3600, 24) == "now +1h +2h +3h +4h +5h"
    assert scale(24 * 3600, 24) == "now   +6h   +12h  +18h"
    assert scale(28 * 86400, 24) == "now   +7d   +14d  +21d"
    assert scale(60, 24) == "now"


@given(seconds=st.integers(24, 28 * 86400), columns=st.integers(8, 48))
def test_the_scales_labels_fit_and_stand_where_their_time_starts(seconds, columns):
    line = scale(seconds, columns)
    assert line.startswith("now")
    assert len(line) <= columns
    for found in re.finditer(r"\+(\d+)([mhd])", line):
        minutes = int(found.group(1)) * {"m": 1, "h": 60, "d": 1440}[found.group(2)]
        assert found.start() == minutes * 60 * columns // seconds


def reading(name: str = "climate", error: str | None = None) -> Reading:
    health = Health(
        status="degraded" if error else "ok",
        time=NOW,
        clusters={
            "c1": ClusterHealth(status="ok", last_snapshot=NOW, failures=0),
            "c2": ClusterHealth(status="stale", last_snapshot=NOW, failures=3, error=error),
        },
        sessions=1,
        drained=("c2",),
    )
    caps = {
        "c1": CAP(cluster="c1", steps=((NOW, 8), (NOW + 3600, 2))),
        "c2": CAP(cluster="c2", steps=((NOW, 0),)),
    }
    session = SessionInfo(
        session="s" * 16, name=name, owner="alice", state="waiting", clusters=("c1",),
        request=Request(nodes={"c1": 2}, duration=60), estimated_start=NOW + 60,
        started_at=None, done_at=None, end=None, view=None, last_seq=1,
    )  # fmt: skip
    infos = [ClusterInfo(name="c1", hosts=8), ClusterInfo(name="c2", hosts=4)]
    return Reading(health, infos, caps, [session])


def shown(renderable, width: int = 100) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]


def test_the_display_shows_the_header_a_line_per_cluster_and_the_sessions():
    lines = shown(render("unix:///b.sock", reading(), 6))
    assert lines[0].startswith("coorm-bridge at unix:///b.sock: ok, time ")
    assert "  drained (no new placeholders until resumed): c2" in lines
    c1 = next(line for line in lines if line.startswith("c1 "))
    assert c1.split()[:4] == ["c1", "8", "ok", "8"]
    assert c1.endswith("████" + "▂" * 20)
    assert next(line for line in lines if line.startswith("c2 ")).split()[:4] == [
        "c2", "4", "stale,", "drained",
    ]  # fmt: skip
    assert any(line.strip() == "now +1h +2h +3h +4h +5h" for line in lines)
    session = next(line for line in lines if line.startswith("s" * 16))
    clock = time.strftime("%H:%M:%S", time.localtime(NOW + 60))
    assert session.split() == ["s" * 16, "alice", "climate", "waiting", "c1:2", "60s", clock, "-"]


@pytest.mark.parametrize(("state", "start"), [("waiting", "never"), ("request_sent", "-")])
def test_a_session_without_an_estimate_starts_never_once_placed(state, start):
    waiting = reading()
    update = {"state": AppState(state), "estimated_start": None}
    session = waiting.sessions[0].model_copy(update=update)
    lines = shown(render("unix:///b.sock", dataclasses.replace(waiting, sessions=[session]), 6))
    assert next(line for line in lines if line.startswith("s" * 16)).split()[-2:] == [start, "-"]


def test_texts_from_the_bridge_are_escaped_and_never_markup():
    hostile = "[bold red]x[/bold red]\x1b[2J\u202e"
    lines = shown(render("unix:///b.sock", reading(name=hostile, error="gone\x07"), 6))
    text = "\n".join(lines)
    assert "[bold red]x[/bold red]\\x1b[2J\\u202e" in text
    assert "  c2: gone\\x07" in lines
    assert "\x1b" not in text
    assert "\x07" not in text


def test_a_bridge_that_does_not_answer_is_shown_above_the_last_reading():
    lines = shown(render("unix:///b.sock", reading(), 6, error="no answer from the bridge"))
    assert "  no answer from the bridge; trying again" in lines
    assert any(line.startswith("c1 ") for line in lines)
    first = shown(render("unix:///b.sock", None, 6, error="no answer"))
    assert first == ["coorm-bridge at unix:///b.sock", "  no answer; trying again"]


class ScriptedClient:
    """The bridge as the loop sees it: each read from ``script`` (a Reading or an error to
    raise); the passes count up; Ctrl-C once the script is done."""

    def __init__(self, script, calls):
        self.url = "unix:///scripted.sock"
        self.script, self.calls = script, calls
        self.now: Reading | None = None
        self.clock = [0.0]

    def health(self):
        self.clock[0] += 0.25  # a read takes a quarter of a second
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        self.now = item
        return item.health

    def clusters(self):
        return self.now.clusters

    def availability(self):
        return list(self.now.caps.values())

    def sessions(self):
        return self.now.sessions

    def passes(self, after=0, wait=0.0):
        self.calls.append(f"passes after {after} wait {wait:g}")
        if not self.script:
            raise KeyboardInterrupt
        return Passes(passes=after + 1, time=NOW)

    def close(self):
        self.calls.append("close")


def test_the_loop_waits_for_passes_retries_a_silent_bridge_and_exits_0_on_ctrl_c(monkeypatch):
    calls: list[str] = []
    script = [BridgeUnreachable("no answer from the bridge"), reading(), reading()]
    client = ScriptedClient(script, calls)
    monkeypatch.setattr(watch_module, "BridgeClient", lambda *args, **options: client)
    out = io.StringIO()

    def sleep(seconds):
        calls.append(f"sleep {seconds:g}")
        client.clock[0] += seconds

    status = watch_module.watch(
        None, None,
        console=Console(file=out, width=100, color_system=None),
        monotonic=lambda: client.clock[0],
        sleep=sleep,
    )  # fmt: skip
    assert status == 0
    # The silent bridge: shown, tried again after RETRY; then a redraw after each pass, at
    # most one a second.
    assert [c for c in calls if c != "sleep 0"] == [
        f"sleep {watch_module.RETRY:g}",
        "passes after 0 wait 25",
        "sleep 0.75",  # the pass came a quarter of a second after the redraw
        "passes after 1 wait 25",
        "close",
    ]
    printed = out.getvalue()  # not a terminal: each redraw printed after the one before
    assert "no answer from the bridge; trying again" in printed
    assert printed.count("coorm-bridge at unix:///scripted.sock: ok") == 2


# -- against a real daemon ----------------------------------------------------------------------


@pytest.mark.daemon
def test_watch_shows_a_new_session_with_its_start_and_exits_0_on_sigint(make_daemon):
    daemon = make_daemon(daemons.config(), daemons.PLATFORM).start()
    watching = subprocess.Popen(
        [sys.executable, "-m", "coorm_bridge.cli.main", "status", "--watch"],
        env={**os.environ, "COORM_BRIDGE_URL": daemon.unix},
        cwd=daemon.folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    failsafe = threading.Timer(120, watching.kill)  # only ends a test whose line never comes
    failsafe.start()
    seen: list[str] = []

    def until(wanted) -> str:
        for line in watching.stdout:
            seen.append(line.rstrip())
            if wanted(line):
                return line
        raise AssertionError("\n".join(["status --watch ended before:", *seen]))

    try:
        until(lambda line: line.startswith(f"coorm-bridge at {daemon.unix}: ok, time "))
        with daemon.client() as client:
            sid = client.subscribe(name="watched").session
            client.request(sid, Request(nodes={"c1": 2, "c2": 1}, duration=600))
        row = until(lambda line: line.startswith(sid) and re.search(r"\d\d:\d\d:\d\d", line))
        assert row.split()[2:4] == ["watched", "waiting"] or "started" in row, row
        c1 = next(line for line in reversed(seen) if line.startswith("c1 "))
        assert re.fullmatch(r"c1 +8 +ok +\d+ +[ ▁▂▃▄▅▆▇█]{0,23}[▁▂▃▄▅▆▇█]", c1), c1
        watching.send_signal(signal.SIGINT)
        rest, _ = watching.communicate()
    finally:
        failsafe.cancel()
        if watching.poll() is None:
            watching.kill()
            watching.wait()
    assert watching.returncode == 0, "\n".join([*seen, rest])
    assert "Traceback" not in rest
