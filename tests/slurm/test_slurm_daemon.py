"""``coorm-bridge serve`` beside a real Slurm, driven by ``coorm-bridge demo``: the way a site
admin and a user would run it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import daemons

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]


def test_the_demo_co_allocates_on_slurm_through_the_daemon(slurm_partitions, make_daemon, folder):
    daemon = make_daemon(daemons.slurm_config(slurm_partitions))
    url = daemon.unix
    script = Path(sys.executable).with_name("coorm-bridge")
    try:
        daemon.start()
        with daemon.client() as client:
            health = client.health()
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
        daemon.stop()
        slurm_partitions.reset()


def serve(
    tmp_path: Path, adapter: str, *options: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``coorm-bridge serve`` (with ``options``: ``--check``) on a configuration with this
    ``[adapter]`` table, expected to stop at once; its result and how long it took."""
    config = tmp_path / "coorm-bridge.toml"
    config.write_text(f'[bridge]\nsocket = "b.sock"\nstate_dir = "state"\n{adapter}')
    script = Path(sys.executable).with_name("coorm-bridge")
    started = time.monotonic()
    result = subprocess.run(
        [str(script), "serve", "--config", str(config), *options],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert "Traceback" not in result.stderr
    return result, time.monotonic() - started


def test_serve_refuses_a_slurm_conf_that_is_not_there_before_asking_slurm(tmp_path):
    # Before, sinfo waited on it until the command's timeout (30 s) and its words were lost.
    result, took = serve(
        tmp_path,
        '[adapter]\nkind = "slurm"\n[[adapter.cluster]]\nname = "a"\n'
        'slurm_conf = "/nonexistent/slurm.conf"\n',
    )
    assert result.returncode == 2, result.stderr
    assert took < 15
    assert result.stderr == (
        f"coorm-bridge: {tmp_path / 'coorm-bridge.toml'}: adapter.cluster.0.slurm_conf: cannot "
        "read '/nonexistent/slurm.conf': No such file or directory\n"
    )


def test_serve_refuses_a_slurm_conf_slurm_cannot_process_naming_file_and_key(tmp_path):
    # No controller is asked: the file is not one, a mistake of the setting (before: exit 1,
    # "cannot start: the batch system: a: sinfo: ..." over two lines).
    (tmp_path / "slurm.conf").write_text("# nothing: Slurm refuses it at once\n")
    result, took = serve(
        tmp_path,
        '[adapter]\nkind = "slurm"\n[[adapter.cluster]]\nname = "a"\nslurm_conf = "slurm.conf"\n',
    )
    assert result.returncode == 2, result.stderr
    assert took < 30
    assert result.stderr == (
        f"coorm-bridge: {tmp_path / 'coorm-bridge.toml'}: adapter.cluster.0.slurm_conf: Slurm "
        f"cannot use {tmp_path / 'slurm.conf'} as its configuration: sinfo: error: ClusterName "
        "needs to be specified; sinfo: fatal: Unable to process configuration file\n"
    )
