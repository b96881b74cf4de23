"""What a site admin sees when Slurm is set up wrong, on the real Slurm 22.05 of slurm-local.sh:
Slurm's own words passed through, and where they are not enough, the bridge's."""

from __future__ import annotations

import time

import pytest

from coorm_bridge.adapters.base import Unavailable
from coorm_bridge.adapters.batch.runner import LocalRunner
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.command_backend import CliBackend
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings

pytestmark = pytest.mark.slurm


def test_a_command_that_times_out_passes_on_what_slurm_said(munge_daemon):
    # A slurm.conf that is not there (as over SSH, where it is not looked for beforehand):
    # sinfo says so at once, then retries for a minute.
    settings = SlurmSettings(
        timeout=2, clusters=(SlurmCluster(name="a", slurm_conf="/nonexistent/slurm.conf"),)
    )
    adapter = SlurmAdapter(settings, CliBackend(LocalRunner(), timeout=settings.timeout))
    started = time.monotonic()
    with pytest.raises(Unavailable) as caught:
        adapter.clusters()
    assert time.monotonic() - started < 10
    assert str(caught.value).startswith("a: sinfo did not answer within 2 s; it said: ")
    assert "cannot stat file /nonexistent/slurm.conf: No such file or directory" in str(
        caught.value
    )
