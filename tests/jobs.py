"""Helpers of the tests of the front end's jobs on a real daemon over the mock (the jobs'
life in tests/daemon/test_daemon_jobs.py, their containment in test_daemon_contain.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coorm_bridge.core.messages import StartEvent
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.client import BridgeClient
from coorm_bridge.protocol import JobInfo, JobRequest


def started(client: BridgeClient, nodes: dict[str, int], duration: int = 600) -> tuple[str, Any]:
    """A session of the caller's, started on ``nodes``: its id and its start event."""
    sid = client.subscribe(Filter(clusters=("c1", "c2"))).session
    client.request(sid, Request(nodes=nodes, duration=duration))
    deadline, after = time.monotonic() + 30, 0
    while time.monotonic() < deadline:
        for event in client.events(sid, after=after, wait=5):
            after = event.seq
            if isinstance(event, StartEvent):
                return sid, event
    raise AssertionError(f"session {sid} did not start")


def job(work: Path, code: str, python: str = sys.executable, **fields: Any) -> JobRequest:
    """A job on c1 running ``code`` with ``python`` in ``work``, its output files there."""
    work.mkdir(exist_ok=True)
    given = {
        "cluster": "c1",
        "name": "solver",
        "argv": [python, "-c", code],
        "workdir": str(work),
        "walltime": 300,
        "stdout": str(work / "out.txt"),
        "stderr": str(work / "err.txt"),
    }
    return JobRequest.model_validate(given | fields)


def info_of(client: BridgeClient, sid: str, job_id: str) -> JobInfo:
    (info,) = [j for j in client.jobs(sid) if j.job == job_id]
    return info


def wait_job(
    client: BridgeClient, sid: str, job_id: str, until: Callable[[JobInfo], bool], timeout=60
) -> JobInfo:
    deadline = time.monotonic() + timeout  # a failsafe: what is awaited comes by itself
    while not until(info := info_of(client, sid, job_id)):
        assert time.monotonic() < deadline, info
        time.sleep(0.1)
    return info


def gone(pid: int) -> bool:
    """No such process any more (a zombie nobody reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"
