"""The launch loop's answers to each event, with a scripted bridge and deployer (no daemon):
what is waited through, what ends the run and with which exit status, what is cancelled."""

from __future__ import annotations

import io
import os
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from pydantic import TypeAdapter

from coorm_bridge.core.messages import CAP, Allocation, Change, ChangeKind, Event, StartEvent
from coorm_bridge.core.model import ClusterInfo, Interconnect, Request
from coorm_bridge.launchers import session as session_module
from coorm_bridge.launchers import web_address as address
from coorm_bridge.launchers.app import parse_app
from coorm_bridge.launchers.client import BridgeError
from coorm_bridge.launchers.deploy.base import Deployer, JobStatus
from coorm_bridge.launchers.display import PlainDisplay
from coorm_bridge.launchers.selection import Selection
from coorm_bridge.launchers.session import Launch
from coorm_bridge.launchers.web_address import WebAddress
from coorm_bridge.protocol import RequestAnswer, StateAnswer, Subscribed

APP = """
duration = 60
[deployment]
poll_interval = 0.1
[[component]]
name = "solver"
command = ["solver"]
[[component]]
name = "coupler"
command = ["coupler"]
"""
CLUSTERS = (ClusterInfo(name="c1", hosts=4), ClusterInfo(name="c2", hosts=4))
NOW = int(time.time())


class Fixed:
    def select(self, clusters, interconnect, view, now):
        return Request(nodes={"c1": 2, "c2": 1}, duration=60)


def change(seq: int, free: int = 4) -> dict:
    caps = [CAP(cluster=c.name, steps=((NOW, free),)) for c in CLUSTERS]
    return {
        "type": "change",
        "seq": seq,
        "time": NOW,
        "changes": [
            Change(cluster=c.cluster, kind=ChangeKind.AVAILABILITY, profile=c) for c in caps
        ],
        "estimated_start": NOW + 5,
    }


def start(seq: int) -> StartEvent:
    return StartEvent(
        seq=seq,
        time=NOW,
        end=int(time.time()) + 599,  # less than 10 whole minutes left, from now
        allocations={
            "c1": Allocation(hosts=["c1-1", "c1-2"], reservation="r1"),
            "c2": Allocation(hosts=["c2-1"], reservation="r2"),
        },
    )


class FakeBridge:
    """Answers the loop's calls; ``script`` is the events ``follow`` gives, in order."""

    def __init__(self, script: list, calls: list[str]) -> None:
        self.script = script
        self.calls = calls

    def subscribe(self, filter=None, name=None, *, deltas=False):
        self.calls.append("subscribe")
        return Subscribed(session="s1", clusters=CLUSTERS)

    def interconnect(self):
        return Interconnect()

    def clusters(self):
        return list(CLUSTERS)

    def request(self, session, request=None):
        self.calls.append(f"request {dict(request.nodes)}")
        return RequestAnswer(session=session, state="waiting", estimated_start=NOW + 5)

    def session(self, session):
        raise AssertionError("not called")

    def done(self, session):
        self.calls.append("done")
        return StateAnswer(session=session, state="finish_sent")

    def withdraw(self, session):
        self.calls.append("withdraw")
        return StateAnswer(session=session, state="cancelled")

    def follow(
        self, session, after=0, wait=30.0, retry=1.0, max_retry=30.0, *, horizon=None
    ) -> Iterator:
        for item in self.script:
            if isinstance(item, float):
                time.sleep(item)
            elif isinstance(item, BaseException):
                raise item
            elif isinstance(item, dict):
                yield _event(item)
            else:
                yield item
        time.sleep(3600)  # the stream stays open, as a long poll does

    def close(self):
        pass


def _event(data: dict):
    return TypeAdapter(Event).validate_python(data)


class FakeDeployer(Deployer):
    kind = "mock"
    unit = 60  # as Slurm: whole minutes, never past the end

    def __init__(self, cluster: str, outcomes: dict[str, list[JobStatus]], calls: list[str]):
        super().__init__(cluster)
        self.outcomes = outcomes
        self.calls = calls

    def submit(self, plan, time_limit):
        self.calls.append(f"submit {plan.cluster} {time_limit}")
        return f"job-{plan.cluster}"

    def status(self, job):
        statuses = self.outcomes[self.cluster]
        return statuses.pop(0) if len(statuses) > 1 else statuses[0]

    def cancel(self, job):
        self.calls.append(f"cancel {self.cluster}")
        self.outcomes[self.cluster] = [JobStatus("cancelled", 143)]


def run(tmp_path, monkeypatch, script, outcomes=None, interrupt_after=None, selector=None,
        app_text=APP):  # fmt: skip
    calls: list[str] = []
    outcomes = outcomes or {
        "c1": [JobStatus("running"), JobStatus("completed", 0)],
        "c2": [JobStatus("completed", 0)],
    }
    monkeypatch.setattr(
        session_module,
        "deployer_for",
        lambda info, front_end, session: FakeDeployer(info.name, outcomes, calls),
    )
    app = parse_app(app_text)
    out, err = io.StringIO(), io.StringIO()
    launch = Launch(
        app=app,
        selection=Selection(selector or Fixed(), app),
        connect=lambda **options: FakeBridge(script, calls),
        display=PlainDisplay(out, err),
        run_root=tmp_path,
        max_retry=0.1,
    )
    if interrupt_after is not None:
        threading.Timer(interrupt_after, launch.interrupts.requested.set).start()
    status = launch.run()
    return status, calls, out.getvalue() + err.getvalue()


def test_a_run_whose_jobs_all_succeed_sends_done_and_exits_0(tmp_path, monkeypatch):
    status, calls, said = run(tmp_path, monkeypatch, [change(1), start(2)])
    assert status == 0, said
    assert calls[0] == "subscribe"
    assert calls[1] == "request {'c1': 2, 'c2': 1}"
    assert sorted(calls[2:4]) == ["submit c1 540", "submit c2 540"]  # whole minutes left
    assert calls[-1] == "done"
    assert "computed configurations: 1" in said
    assert (tmp_path / "s1" / "run.json").exists()


def test_placement_failed_is_waited_through(tmp_path, monkeypatch):
    failed = {"type": "placement_failed", "seq": 2, "time": NOW, "reason": "busy",
              "retry_at": NOW + 3}  # fmt: skip
    status, calls, said = run(tmp_path, monkeypatch, [change(1), failed, 0.2, start(3)])
    assert status == 0, said
    assert "placement failed: busy" in said
    assert calls[-1] == "done"


@pytest.mark.parametrize(
    ("event", "words"),
    [
        ({"type": "killed", "reason": "a host went down"}, "killed: a host went down"),
        ({"type": "error", "reason": "unknown user"}, "error: unknown user"),
        ({"type": "withdrawn", "reason": "no word"}, "withdrawn: no word"),
        ({"type": "ended", "state": "cancelled"}, "ended at the bridge (cancelled)"),
    ],
)
def test_ending_events_before_the_start_end_the_run_with_status_1(
    tmp_path, monkeypatch, event, words
):
    status, calls, said = run(tmp_path, monkeypatch, [change(1), {**event, "seq": 2, "time": NOW}])
    assert status == 1
    assert words in said
    assert "done" not in calls


def test_killed_while_running_cancels_the_jobs(tmp_path, monkeypatch):
    killed = {"type": "killed", "seq": 3, "time": NOW, "reason": "allocation taken back"}
    forever = {"c1": [JobStatus("running")], "c2": [JobStatus("running")]}
    status, calls, said = run(tmp_path, monkeypatch, [change(1), start(2), 0.5, killed], forever)
    assert status == 1
    assert {"cancel c1", "cancel c2"} <= set(calls)
    assert "killed: allocation taken back" in said
    assert "cannot deploy" not in said
    assert "c1: job job-c1 cancelled" in said  # waited for the cancellations


def test_a_failed_component_cancels_the_others_and_fails_the_run(tmp_path, monkeypatch):
    outcomes = {"c1": [JobStatus("failed", 3)], "c2": [JobStatus("running")]}
    status, calls, said = run(tmp_path, monkeypatch, [change(1), start(2)], outcomes)
    assert status == 1
    assert "cancel c2" in calls
    assert "cancel c1" not in calls
    assert calls[-1] == "done"
    assert "c1: job job-c1 failed (exit status 3)" in said


def test_interrupted_after_the_start_cancels_then_sends_done(tmp_path, monkeypatch):
    forever = {"c1": [JobStatus("running")], "c2": [JobStatus("running")]}
    status, calls, _ = run(tmp_path, monkeypatch, [change(1), start(2)], forever, 1.0)
    assert status == 130
    assert {"cancel c1", "cancel c2"} <= set(calls)
    assert calls[-1] == "done"
    assert "withdraw" not in calls


def test_interrupted_before_the_start_withdraws(tmp_path, monkeypatch):
    status, calls, said = run(tmp_path, monkeypatch, [change(1)], interrupt_after=0.5)
    assert status == 130
    assert calls[-1] == "withdraw"
    assert "withdrawn" in said


def test_a_refusal_of_the_events_ends_the_run(tmp_path, monkeypatch):
    refused = BridgeError(404, "not_found", "no session s1 of yours")
    status, _, said = run(tmp_path, monkeypatch, [change(1), refused])
    assert status == 1
    assert "no session s1 of yours" in said


class OneLess:
    """All but one of c1's free hosts now, one of c2's: a new request for every new view."""

    def select(self, clusters, interconnect, view, now):
        return Request(nodes={"c1": view["c1"].value_at(now) - 1, "c2": 1}, duration=60)


@pytest.mark.parametrize(("min_gain", "requests"), [(0, 2), (30, 1)])
def test_a_new_selection_is_sent_only_when_it_gains_min_gain(
    tmp_path, monkeypatch, min_gain, requests
):
    """c1 goes from 4 free hosts to 3: the selector now asks for 2 instead of 3, which ends no
    earlier (both start now); with ``min_gain`` the launcher keeps its request."""
    app_text = APP.replace("duration = 60", f"duration = 60\n[selector]\nmin_gain = {min_gain}")
    script = [change(1, free=4), change(2, free=3), start(3)]
    status, calls, said = run(tmp_path, monkeypatch, script, selector=OneLess(), app_text=app_text)
    assert status == 0, said
    sent = [call for call in calls if call.startswith("request")]
    assert sent == ["request {'c1': 3, 'c2': 1}", "request {'c1': 2, 'c2': 1}"][:requests]
    assert "computed configurations: 2" in said


@pytest.mark.parametrize("web", ["running", "for another bridge", "gone", "none"])
def test_the_sessions_page_is_linked_once_on_stderr_when_coorm_bridge_web_runs(
    tmp_path, monkeypatch, web
):
    path = tmp_path / "web.json"
    token = "t0k3n" * 4
    if web != "none":
        pid = os.getpid() if web != "gone" else gone_pid()
        bridge = "unix:///other.sock" if web == "for another bridge" else "unix:///b.sock"
        found = WebAddress(url="http://127.0.0.1:8123", token=token, bridge=bridge, pid=pid)
        address.announce(found, path)
    monkeypatch.setattr(address, "address_file", lambda: path)
    monkeypatch.setattr(
        session_module, "deployer_for",
        lambda info, front_end, session: FakeDeployer(info.name, {"c1": [JobStatus(
            "completed", 0)], "c2": [JobStatus("completed", 0)]}, []),
    )  # fmt: skip
    app = parse_app(APP)
    out, err = io.StringIO(), io.StringIO()
    launch = Launch(
        app=app,
        selection=Selection(Fixed(), app),
        connect=lambda **options: FakeBridge([change(1), start(2)], []),
        display=PlainDisplay(out, err),
        run_root=tmp_path,
        bridge_url="unix:///b.sock",
    )
    assert launch.run() == 0
    link = f"http://127.0.0.1:8123/ui/session.html?id=s1#token={token}"
    said = [line.split(" ", 1)[1] for line in err.getvalue().splitlines() if "s1: " in line]
    assert said == ([f"coorm-launch: session s1: {link}"] if web == "running" else [])
    assert token not in out.getvalue()


def gone_pid() -> int:
    """A process id that is no process's any more (a child, reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid
