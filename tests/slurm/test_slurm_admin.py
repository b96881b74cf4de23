"""What a site admin sees when Slurm is set up wrong, on the real Slurm 22.05 of slurm-local.sh:
Slurm's own words passed through, and where they are not enough, the bridge's."""

from __future__ import annotations

import re
import socket
import time

import pytest

from coorm_bridge.adapters.batch.runner import LocalRunner
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.plugin import make_slurm_adapter
from coorm_bridge.adapters.slurm.settings import RestSettings, SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import AdapterError, Unavailable

pytestmark = pytest.mark.slurm


def test_a_command_that_times_out_passes_on_what_slurm_said(munge_daemon):
    # A slurm.conf that is not there (as over SSH, where it is not looked for beforehand):
    # sinfo says so at once, then retries for a minute.
    settings = SlurmSettings(
        timeout=2, clusters=(SlurmCluster(name="a", slurm_conf="/nonexistent/slurm.conf"),)
    )
    adapter = SlurmAdapter(settings, SlurmCliBackend(LocalRunner(), timeout=settings.timeout))
    started = time.monotonic()
    with pytest.raises(Unavailable) as caught:
        adapter.clusters()
    assert time.monotonic() - started < 10
    assert str(caught.value).startswith("a: sinfo did not answer within 2 s; it said: ")
    assert "cannot stat file /nonexistent/slurm.conf: No such file or directory" in str(
        caught.value
    )


@pytest.mark.parametrize("backend", ["cli", "rest"])
@pytest.mark.parametrize(
    ("partition", "hint"),
    [("delta", ""), ("Alpha", "; partition names are case-sensitive: did you mean 'alpha'?")],
)
def test_a_partition_that_is_not_there_is_named_with_those_that_are(
    slurm_partitions, backend, partition, hint
):
    # Slurm 22.05 ignores -p with --json: before, this was "no node in delta".
    rest = RestSettings(url=f"unix://{slurm_partitions.rest_socket()}")
    settings = SlurmSettings(
        backend=backend,
        rest=rest if backend == "rest" else None,
        clusters=(
            SlurmCluster(name="mine", partition=partition, slurm_conf=slurm_partitions.conf),
        ),
    )
    adapter = make_slurm_adapter(settings)
    try:
        with pytest.raises(AdapterError) as caught:
            adapter.clusters()
    finally:
        adapter.close()
    assert str(caught.value) == (
        f"mine: Slurm has no partition {partition!r} (or it has no node){hint}; partitions with "
        "nodes: alpha, beta, gamma"
    )


def test_a_controller_that_does_not_answer_is_not_taken_for_a_missing_partition(
    slurm_partitions, tmp_path
):
    # Slurm 22.05's sinfo --json, its controller away, exits 0 with an error and no node.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp_path / "slurm.conf"
    text = slurm_partitions.conf.read_text()
    conf.write_text(re.sub(r"^SlurmctldPort=.*$", f"SlurmctldPort={port}", text, flags=re.M))
    settings = SlurmSettings(clusters=(SlurmCluster(name="a", partition="alpha", slurm_conf=conf),))
    adapter = SlurmAdapter(settings, SlurmCliBackend(LocalRunner(), timeout=settings.timeout))
    with pytest.raises(Unavailable) as caught:
        adapter.clusters()
    assert str(caught.value) == (
        "a: the controller does not answer: sinfo --json: Slurm reported: Unspecified error"
    )
