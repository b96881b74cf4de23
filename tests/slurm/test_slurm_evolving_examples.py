"""The evolving examples through ``coorm-launch`` beside a real Slurm, as a user runs them with a
bridge on the site: the AMR code's steps as jobs inside its pre-allocation's reservation, on
exactly the hosts each step asked for; the sweep's tasks as one-host jobs outside reservations,
on the hosts the bridge named idle."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import daemons
from tests.examples.test_evolving_examples import AMR, SWEEP, check_amr, check_sweep, run_folder

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]


@pytest.fixture
def bridge(slurm_partitions, make_daemon, folder):  # type: ignore[no-untyped-def]
    daemon = make_daemon(daemons.slurm_config(slurm_partitions)).start()
    yield folder, daemon.unix
    daemon.stop()
    slurm_partitions.reset()


def launch(app: Path, folder: Path, url: str) -> str:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("coorm-launch")), "--plain", str(app), "--url", url],
        capture_output=True, text=True, timeout=600, check=False, cwd=folder,
        env={**os.environ, "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"},
    )  # fmt: skip
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    return said


@pytest.mark.mpi
def test_the_amr_example_grows_and_shrinks_inside_its_slurm_reservation(mpi, bridge):  # type: ignore[no-untyped-def]
    folder, url = bridge
    launch(AMR, folder, url)
    run = run_folder(folder)
    record = check_amr(run)
    for step in record["steps"]:  # each step's mpirun ran on the step's own nodes
        hostfile = (run / f"{step['request']}.hosts").read_text().split()
        assert [line for line in hostfile if not line.startswith("slots=")] == step["hosts"]


def test_the_sweep_example_runs_its_tasks_on_idle_slurm_nodes(bridge):  # type: ignore[no-untyped-def]
    folder, url = bridge
    launch(SWEEP, folder, url)
    tasks = check_sweep(run_folder(folder))
    hosts = {run["host"] for task in tasks.values() for run in task["runs"]}
    assert hosts <= {f"alpha{n:02d}" for n in range(1, 9)}, hosts
