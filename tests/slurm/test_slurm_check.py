"""``coorm-bridge serve --check`` against the real Slurm 22.05 of slurm-local.sh: every partition
reached with the bridge's rights (exit 0), a partition Slurm does not have named by file and key as
``serve`` names it (exit 2), a controller that does not answer (exit 1); and beside a daemon
serving on the same file, the daemon keeps its lock and its sessions and Slurm holds nothing new.
"""

from __future__ import annotations

import re
import time

import pytest

from coorm_bridge.core.model import Filter
from tests import daemons
from tests.daemon.test_serve_check import check

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]

#: Ends a test that would hang; no test waits for it.
FAILSAFE = 120


def test_a_good_file_reaches_every_partition_with_the_rights_exit_0(
    slurm_partitions, make_daemon
) -> None:
    daemon = make_daemon(daemons.slurm_config(slurm_partitions))
    assert daemon.config is not None
    result = check(daemon.config)
    assert result.returncode == 0, result.stdout + result.stderr
    for partition in slurm_partitions.clusters:
        assert f"cluster {partition}: reachable, 8 hosts (8 up)" in result.stdout
    assert result.stdout.count("rights: ok") == len(slurm_partitions.clusters)
    assert result.stdout.endswith("check: all is well\n")
    assert not (daemon.folder / "state").exists()
    shown = slurm_partitions.run("scontrol", "-o", "show", "reservation").stdout
    assert "coorm" not in shown  # the rights' probe left nothing behind


def test_a_partition_slurm_does_not_have_is_named_by_file_and_key_exit_2(
    slurm_partitions, make_daemon
) -> None:
    clusters = daemons.slurm_clusters(slurm_partitions)
    clusters[1] = {**clusters[1], "partition": "Beta"}
    daemon = make_daemon(daemons.config({"kind": "slurm", "cluster": clusters}))
    assert daemon.config is not None
    result = check(daemon.config)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(
        f"coorm-bridge: {daemon.config}: adapter.cluster.1.partition: Slurm has no partition "
        "'Beta' (or it has no node); partition names are case-sensitive: did you mean 'beta'?"
    ), result.stderr


def test_a_controller_that_does_not_answer_exits_1(slurm_partitions, make_daemon, folder) -> None:
    copy = folder / "slurm.conf"
    text = slurm_partitions.conf.read_text()
    port = daemons.free_port()  # nothing listens there
    copy.write_text(re.sub(r"^SlurmctldPort=.*$", f"SlurmctldPort={port}", text, flags=re.M))
    clusters = [{"name": "a", "partition": "alpha", "slurm_conf": str(copy)}]
    daemon = make_daemon(daemons.config({"kind": "slurm", "cluster": clusters}))
    assert daemon.config is not None
    result = check(daemon.config)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "does not answer" in result.stdout


def test_beside_a_daemon_serving_on_slurm_it_changes_nothing(slurm_partitions, make_daemon) -> None:
    daemon = make_daemon(daemons.slurm_config(slurm_partitions))
    assert daemon.config is not None
    try:
        daemon.start()
        assert daemon.process is not None
        with daemon.client() as client:
            first = client.subscribe(Filter()).session
            client.request(first, nodes={slurm_partitions.clusters[0]: 2}, duration=600)
            deadline = time.monotonic() + FAILSAFE  # its placeholder is made, then it starts
            while client.session(first).state != "started":
                assert time.monotonic() < deadline, client.session(first)
                time.sleep(0.1)
            held = slurm_partitions.run("scontrol", "-o", "show", "reservation").stdout

            result = check(daemon.config)

            assert result.returncode == 0, result.stdout + result.stderr
            lock = daemon.folder / "state" / "bridge.lock"
            assert lock.read_text().strip() == str(daemon.process.pid)
            assert slurm_partitions.run("scontrol", "-o", "show", "reservation").stdout == held
            assert client.session(first).state == "started"
            second = client.subscribe(Filter()).session
            answer = client.request(second, nodes={slurm_partitions.clusters[1]: 1}, duration=600)
            assert answer.estimated_start is not None
        assert daemon.process.poll() is None
    finally:
        daemon.stop()
        slurm_partitions.reset()
