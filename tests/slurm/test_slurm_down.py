"""A Slurm controller that is down when the daemon starts, or stops answering while it runs, on a
Slurm of the test's own (``slurm_own``: its slurmctld stopped or frozen by its PID).

Before: ``coorm-bridge serve`` exited 1 after about 10 s with "sinfo --json: Slurm reported:
Unspecified error", and a frozen slurmctld left health ``ok`` while APScheduler logged that it
skipped polls. Timeouts here are failsafes only: each wait ends on what it waits for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests_unixsocket

from coorm_bridge.core.messages import StartEvent
from coorm_bridge.launchers.client import BridgeClient, base_url
from coorm_bridge.protocol import Health
from tests import daemons

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]

FAILSAFE = 180
SAID = "the controller does not answer"


def health_until(client: BridgeClient, wanted: Callable[[Health], bool]) -> Health:
    deadline = time.monotonic() + FAILSAFE
    while time.monotonic() < deadline:
        health = client.health()
        if wanted(health):
            return health
        time.sleep(0.2)
    raise AssertionError(f"health never became what was awaited: {client.health()}")


def overruns(url: str) -> float:
    with requests_unixsocket.Session() as http:
        answer = http.get(f"{base_url(url)}/metrics", timeout=10)
    answer.raise_for_status()
    lines = answer.text.splitlines()
    found = [
        line
        for line in lines
        if line.startswith('coorm_cluster_poll_overruns_total{cluster="alpha"}')
    ]
    return float(found[0].rsplit(" ", 1)[1]) if found else 0.0


def test_a_daemon_starts_with_its_controller_down_and_serves_once_it_answers(
    slurm_own, make_daemon, folder
):
    slurm_own.stop_controller()
    daemon = make_daemon(daemons.slurm_config(slurm_own))
    daemon.start(timeout=FAILSAFE)  # before: exit 1, "sinfo --json: ... Unspecified error"
    try:
        with daemon.client() as client:
            health = client.health()
            assert health.status == "degraded"
            alpha = health.clusters["alpha"]
            assert alpha.status == "stale"
            assert alpha.error is not None
            assert SAID in alpha.error
            assert "Unable to contact slurm controller" in alpha.error  # the command's words
            assert client.clusters() == []  # never read: offered once it answers
            status = subprocess.run(
                [
                    str(Path(sys.executable).with_name("coorm-bridge")),
                    "status",
                    "--url",
                    daemon.unix,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                cwd=folder,
            )
            assert status.returncode == 0, status.stderr
            assert "degraded" in status.stdout
            # Its last error, or (a poll under way past two intervals) that and the error before.
            assert f"alpha: {SAID}" in status.stdout

            slurm_own.start_controller()
            health_until(client, lambda h: h.status == "ok")
            assert [(c.name, c.hosts) for c in client.clusters()] == [("alpha", 2)]
            session = client.subscribe(name="after").session
            client.request(session, nodes={"alpha": 2}, duration=30)
            seq, started = 0, None
            deadline = time.monotonic() + FAILSAFE
            while started is None and time.monotonic() < deadline:
                for event in client.events(session, after=seq, wait=5):
                    seq = event.seq
                    if isinstance(event, StartEvent):
                        started = event
            assert started is not None
            assert len(started.allocations["alpha"].hosts) == 2
            client.done(session)
    finally:
        daemon.stop()


def test_a_frozen_controller_shows_in_health_within_two_polls_and_clears(slurm_own, make_daemon):
    daemon = make_daemon(daemons.slurm_config(slurm_own))  # polls every second
    daemon.start(timeout=FAILSAFE)
    pid = slurm_own.controller_pid()
    try:
        with daemon.client() as client:
            health_until(client, lambda h: h.status == "ok")
            os.kill(pid, signal.SIGSTOP)
            try:
                health = health_until(client, lambda h: h.status == "degraded")
                alpha = health.clusters["alpha"]
                assert alpha.status == "stale"
                # Slurm's own commands time out after 10 s; the overrun says so after two polls.
                assert alpha.error is not None
                assert alpha.error.startswith("its poll has not answered for "), alpha.error
                assert overruns(daemon.unix) >= 1
            finally:
                os.kill(pid, signal.SIGCONT)
            health_until(client, lambda h: h.status == "ok")
        log = daemon.log.read_text()
        assert "maximum number of running instances reached" not in log
    finally:
        daemon.stop()
