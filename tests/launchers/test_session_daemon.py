"""The launch loop against a real daemon on the mock platform: ``coorm-launch`` as a user runs
it, in a process of its own, its output read from files (plain lines: not a terminal)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from coorm_bridge.core.model import Request
from coorm_bridge.core.states import AppState

pytestmark = pytest.mark.daemon

#: A selector of the application's own (``module:Class``, next to the file): two hosts on the
#: cluster where they fit earliest, so its choice follows the view.
EARLIEST = """
from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    hosts: int
    duration: int


class Earliest:
    Params = Params

    def __init__(self, params):
        self.params = params

    def select(self, clusters, interconnect, view, now):
        from coorm_bridge.core.model import Request

        starts = {
            name: view[name].earliest_fit(self.params.hosts, self.params.duration, now)
            for name in sorted(view)
        }
        fits = {name: start for name, start in starts.items() if start is not None}
        if not fits:
            return None
        best = min(fits, key=lambda name: (fits[name], name))
        return Request(nodes={best: self.params.hosts}, duration=self.params.duration)

"""
APP = """
duration = 60
[selector]
name = "{selector}"
params = {params}
min_gain = 0  # every better selection is sent (by default, ten minutes better)
[deployment]
poll_interval = 0.5
[[component]]
name = "app"
command = ["true"]
"""


def app_file(folder: Path, selector: str, params: str, name: str = "app") -> Path:
    (folder / "earliest.py").write_text(EARLIEST)
    path = folder / f"{name}.toml"
    path.write_text(APP.format(selector=selector, params=params))
    return path


def hold(client, nodes: dict[str, int], duration: int) -> str:
    """Another application that holds ``nodes``: started before the launcher subscribes."""
    sid = client.subscribe(name="other").session
    client.request(sid, Request(nodes=nodes, duration=duration))
    deadline = time.monotonic() + 30
    while client.session(sid).state is not AppState.STARTED:
        assert time.monotonic() < deadline, client.session(sid)
        time.sleep(0.1)
    return sid


def launcher_session(client) -> str:
    (found,) = [s for s in client.sessions() if s.name != "other"]
    return found.session


def test_the_request_follows_the_view(daemon, launch, folder):
    with daemon.client() as client:
        long = hold(client, {"c1": 8}, 600)
        hold(client, {"c2": 4}, 40)
        launcher = launch(app_file(folder, "earliest:Earliest", "{ hosts = 2 }"))
        launcher.wait_for("request sent: 2 on c2")  # c2 frees first
        client.done(long)  # c1 frees (after the fair-start ghost): earlier than c2
        said = launcher.wait_for("request sent: 2 on c1")
        assert said.index("request sent: 2 on c2") < said.index("request sent: 2 on c1")
        sid = launcher_session(client)
        assert client.session(sid).request == Request(nodes={"c1": 2}, duration=60)
        launcher.wait_for("started until")
        assert launcher.wait(60) == 0, launcher.output()
    output = launcher.output()
    assert output.count("request sent: ") == 2  # sent only when the selection changed
    assert "computed configurations: " in output


def test_ctrl_c_before_the_start_withdraws(daemon, launch, folder):
    with daemon.client() as client:
        hold(client, {"c1": 8}, 600)
        rigid = app_file(folder, "rigid", "{ nodes = { c1 = 4 } }")
        launcher = launch(rigid)
        launcher.wait_for("request sent: 4 on c1")
        sid = launcher_session(client)
        launcher.process.send_signal(signal.SIGINT)
        assert launcher.wait(30) == 130, launcher.output()
        assert client.session(sid).state is AppState.CANCELLED
    output = launcher.output()
    assert f"session {sid} withdrawn" in output
    assert "computed configurations: 1" in output
    assert "Traceback" not in output


def test_a_session_ended_by_someone_else_ends_the_run(daemon, launch, folder):
    with daemon.client() as client:
        hold(client, {"c1": 8}, 600)
        launcher = launch(app_file(folder, "rigid", "{ nodes = { c1 = 4 } }"))
        launcher.wait_for("request sent: 4 on c1")
        client.withdraw(launcher_session(client))  # say an admin's, or another terminal's
        assert launcher.wait(30) == 1
    assert "the session ended at the bridge (cancelled)" in launcher.output()


def test_a_stopped_daemon_answers_the_launcher_which_reconnects_and_resumes(daemon, launch, folder):
    """SIGTERM while the launcher long-polls: answered at once (no event), it finds the daemon
    gone, says it reconnects, and resumes with the restarted one."""
    with daemon.client() as client:
        long = hold(client, {"c1": 8}, 600)
        launcher = launch(app_file(folder, "rigid", "{ nodes = { c1 = 4 } }"))
        launcher.wait_for("request sent: 4 on c1")
        sid = launcher_session(client)
    deadline = time.monotonic() + 60  # a failsafe: the launcher long-polls all the time
    while daemon.long_polls() < 1:
        assert time.monotonic() < deadline, "the launcher does not long-poll"
        time.sleep(0.02)
    assert daemon.stop(signal.SIGTERM) == 0
    daemon.assert_stopped_cleanly()
    launcher.wait_for("reconnecting", timeout=60)
    daemon.start()
    with daemon.client() as client:
        client.done(long)
        launcher.wait_for("started until", timeout=90)
        assert launcher.wait(60) == 0, launcher.output()
        assert [s.session for s in client.sessions() if s.name != "other"] == [sid]
    output = launcher.output()
    assert output.count("request sent: ") == 1
    assert "Traceback" not in output


def test_the_launcher_resumes_after_the_daemon_is_killed_and_restarted(daemon, launch, folder):
    with daemon.client() as client:
        long = hold(client, {"c1": 8}, 600)
        launcher = launch(app_file(folder, "rigid", "{ nodes = { c1 = 4 } }"))
        launcher.wait_for("request sent: 4 on c1")
        sid = launcher_session(client)
    daemon.stop(signal.SIGKILL)
    launcher.wait_for("reconnecting", timeout=60)
    time.sleep(2)
    daemon.start()
    with daemon.client() as client:
        client.done(long)
        launcher.wait_for("started until", timeout=90)
        assert launcher.wait(60) == 0, launcher.output()
        assert [s.session for s in client.sessions() if s.name != "other"] == [sid]
    output = launcher.output()
    assert output.count("request sent: ") == 1  # the request survived: not sent again
    assert "Traceback" not in output
