"""Adapters are plug-ins: a package installed beside coorm-bridge adds a batch system.

The tiny package below is written, installed with pip into a folder of its own and served by
the real daemon, with no change to coorm-bridge: only its entry point makes it known.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from tests import daemons

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "coorm-tiny"
version = "0.1"

[project.entry-points."coorm_bridge.adapters"]
tiny = "coorm_tiny:PLUGIN"

[tool.setuptools]
py-modules = ["coorm_tiny"]
"""

#: One cluster of idle hosts that holds reservations and runs nothing else: the whole interface,
#: in a few lines, built on the interface's types alone.
MODULE = """\
import itertools
import threading
from typing import Literal

from coorm_bridge.adapters.base import (
    Adapter, AdapterError, ClusterSnapshot, JobState, Node, PlatformSnapshot, Refused,
    Reservation, ReservationHandle,
)
from coorm_bridge.adapters.registry import AdapterPlugin, AdapterSettings
from coorm_bridge.core.model import ClusterInfo, Interconnect


class TinySettings(AdapterSettings):
    kind: Literal["tiny"] = "tiny"
    cluster: str = "tiny1"
    hosts: int = 4


class TinyAdapter(Adapter):
    def __init__(self, settings, state_dir):
        self.settings = settings
        self.hosts = tuple(f"{settings.cluster}-{i}" for i in range(settings.hosts))
        self.reservations = {}
        self.jobs = {}
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        (state_dir / "tiny-was-here").write_text(settings.cluster)

    def _check(self, cluster):
        if cluster != self.settings.cluster:
            raise AdapterError(f"unknown cluster {cluster!r}")

    def clusters(self):
        return [ClusterInfo(name=self.settings.cluster, hosts=len(self.hosts))]

    def interconnect(self):
        return Interconnect()

    def snapshot(self, clusters=None):
        now = self.now()
        with self.lock:
            shot = ClusterSnapshot(
                cluster=self.settings.cluster,
                time=now,
                nodes=tuple(Node(name=h) for h in self.hosts),
                reservations=tuple(
                    Reservation(name=h.name, start=h.start, end=h.end,
                                hosts=len(h.host_names), host_names=h.host_names)
                    for h in self.reservations.values()
                ),
            )
        return PlatformSnapshot(time=now, clusters={shot.cluster: shot})

    def _hold(self, cluster, spec):
        busy = {
            host
            for h in self.reservations.values()
            if h.name != spec.name and h.start < spec.end and spec.start < h.end
            for host in h.host_names
        }
        free = [host for host in self.hosts if host not in busy]
        if len(free) < spec.size:
            raise Refused("Requested nodes are busy", cluster=cluster)
        handle = ReservationHandle(cluster=cluster, name=spec.name, start=spec.start,
                                   end=spec.end, host_names=tuple(free[: spec.size]))
        self.reservations[spec.name] = handle
        return handle

    def create_reservation(self, cluster, spec):
        self._check(cluster)
        with self.lock:
            return self._hold(cluster, spec)

    def update_reservation(self, cluster, spec):
        self._check(cluster)
        with self.lock:
            if spec.name not in self.reservations:
                raise Refused(f"no reservation {spec.name}", cluster=cluster)
            return self._hold(cluster, spec)

    def delete_reservation(self, cluster, name):
        self._check(cluster)
        with self.lock:
            self.reservations.pop(name, None)

    def submit(self, cluster, job):
        self._check(cluster)
        with self.lock:
            job_id = str(next(self.ids))
            self.jobs[job_id] = JobState.RUNNING
            return job_id

    def cancel(self, cluster, job_id):
        self._check(cluster)
        with self.lock:
            if job_id in self.jobs:
                self.jobs[job_id] = JobState.CANCELLED

    def job_state(self, cluster, job_id):
        self._check(cluster)
        with self.lock:
            return self.jobs.get(job_id, JobState.UNKNOWN)


PLUGIN = AdapterPlugin(
    kind="tiny",
    settings=TinySettings,
    create=lambda settings, context: TinyAdapter(settings, context.state_dir),
)
"""

CONFIG = daemons.config(
    {"kind": "tiny", "cluster": "tiny1", "hosts": 3}, policy={"interval": 0.2, "fair_start": 1}
)


def install_tiny(folder: Path) -> Path:
    source, target = folder / "coorm-tiny", folder / "site"
    source.mkdir()
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "coorm_tiny.py").write_text(MODULE)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
         "--no-build-isolation", "--target", str(target), str(source)],
        check=True, capture_output=True, timeout=300, cwd=folder,
    )  # fmt: skip
    return target


@pytest.mark.slow
@pytest.mark.daemon
def test_an_installed_third_party_adapter_is_served_by_the_daemon(folder):
    site = install_tiny(folder)
    (folder / "site.toml").write_text(CONFIG)
    env = {**os.environ, "PYTHONPATH": str(site)}
    log = folder / "daemon.log"
    command = [
        str(Path(sys.executable).with_name("coorm-bridge")),
        "serve",
        "--config",
        "site.toml",
    ]
    with log.open("ab") as out:
        process = subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=out)
    try:
        with BridgeClient(f"unix://{folder / 'bridge.sock'}", timeout=10) as client:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, log.read_text()
                try:
                    client.health()
                    break
                except BridgeError:
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.1)
            assert [(c.name, c.hosts) for c in client.clusters()] == [("tiny1", 3)]
            sid = client.subscribe(Filter(clusters=("tiny1",))).session
            daemons.wait_for(client, sid, "change")
            view = client.session(sid).view
            assert view is not None
            assert [cap.cluster for cap in view.profiles] == ["tiny1"]
            assert view.profiles[0].steps[0][1] == 3  # all its hosts free
            client.request(sid, Request(nodes={"tiny1": 2}, duration=60))
            start = daemons.wait_for(client, sid, "start")
            assert start.allocations["tiny1"].hosts == ["tiny1-0", "tiny1-1"]
            assert re.fullmatch(
                rf"coorm-[a-z2-7]{{6}}-{sid}-tiny1", start.allocations["tiny1"].reservation
            )
        # The plug-in got the daemon's state folder, resolved from the configuration's.
        assert (folder / "state" / "tiny-was-here").read_text() == "tiny1"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0, log.read_text()
