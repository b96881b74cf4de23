"""``coorm-bridge serve`` beside a real Slurm, driven by ``coorm-bridge demo``: the way a site
admin and a user would run it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from coorm_bridge.launchers.client import BridgeClient, BridgeError

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]

CONFIG = """
[bridge]
socket = "bridge.sock"
state_dir = "state"
[policy]
interval = 0.5
fair_start = 3
[placement]
poll_interval = 1
[adapter]
kind = "slurm"
"""


def test_the_demo_co_allocates_on_slurm_through_the_daemon(slurm_partitions):
    folder = Path(tempfile.mkdtemp(prefix="cbs-", dir="/tmp"))
    conf = slurm_partitions.conf
    clusters = "".join(
        f'[[adapter.cluster]]\nname = "{p}"\npartition = "{p}"\nslurm_conf = "{conf}"\n'
        for p in slurm_partitions.clusters
    )
    config = folder / "coorm-bridge.toml"
    config.write_text(CONFIG + clusters)
    script = Path(sys.executable).with_name("coorm-bridge")
    log = (folder / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [str(script), "serve", "--config", str(config)], cwd=folder, stdout=log, stderr=log
    )
    url = f"unix://{folder / 'bridge.sock'}"
    try:
        with BridgeClient(url, timeout=2) as client:
            deadline = time.monotonic() + 60
            while True:
                assert daemon.poll() is None, (folder / "daemon.log").read_text()
                try:
                    health = client.health()
                    break
                except BridgeError:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            assert health.status == "ok"
            assert set(health.clusters) == set(slurm_partitions.clusters)
        demo = subprocess.run(
            [str(script), "demo", "--url", url],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
            cwd=folder,
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "co-allocated: yes" in demo.stdout
        assert demo.stdout.count("placeholders released") == 2
        # The placeholders are gone from Slurm too.
        shown = slurm_partitions.run("scontrol", "-o", "show", "reservation").stdout
        assert "coorm-" not in shown
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        slurm_partitions.reset()
        shutil.rmtree(folder, ignore_errors=True)


def test_serve_says_why_when_slurm_cannot_be_read_at_start(tmp_path):
    config = tmp_path / "coorm-bridge.toml"
    config.write_text(
        '[bridge]\nsocket = "b.sock"\nstate_dir = "state"\n[adapter]\nkind = "slurm"\n'
        'timeout = 3\n[[adapter.cluster]]\nname = "a"\nslurm_conf = "/nonexistent/slurm.conf"\n'
    )
    script = Path(sys.executable).with_name("coorm-bridge")
    result = subprocess.run(
        [str(script), "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert "cannot start: the batch system" in result.stderr
    assert "Traceback" not in result.stderr
