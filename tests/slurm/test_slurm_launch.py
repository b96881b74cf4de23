"""``coorm-launch`` beside a real Slurm, through a bridge daemon with the Slurm adapter: a
two-component application on partitions alpha and beta, one sbatch per cluster into the
bridge's placeholders, on the hosts granted, started together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import daemons

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]

#: Each task writes when it started and where, then stays a little: both jobs are seen running.
STAMP = 'date +%s.%N > "$COORM_RUN_DIR/$COORM_COMPONENT.$(hostname).$SLURM_PROCID.start"; sleep 3'
APP = f"""
duration = 300
[selector]
name = "rigid"
params = {{ nodes = {{ alpha = 2, beta = 1 }} }}
[deployment]
poll_interval = 0.5
[[component]]
name = "solver"
command = ["sh", "-c", '{STAMP}']
clusters = ["alpha"]
processes_per_host = 1
[[component]]
name = "coupler"
command = ["sh", "-c", '{STAMP}; exit EXIT']
clusters = ["beta"]
processes_per_host = 1
"""


@pytest.fixture
def bridge(slurm_partitions, make_daemon, folder):
    daemon = make_daemon(daemons.slurm_config(slurm_partitions)).start()
    yield folder, daemon.unix
    daemon.stop()
    slurm_partitions.reset()


def launch(folder: Path, url: str, exit_status: int) -> tuple[subprocess.CompletedProcess, Path]:
    app = folder / "app.toml"
    app.write_text(APP.replace("EXIT", str(exit_status)))
    result = subprocess.run(
        [str(Path(sys.executable).with_name("coorm-launch")), str(app), "--url", url],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=folder,
        env={**os.environ, "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"},
    )
    runs = folder / "coorm-runs"
    assert runs.is_dir(), result.stdout + result.stderr
    (run,) = runs.iterdir()
    return result, run


def test_two_components_start_together_in_the_placeholders(bridge, slurm_partitions):
    folder, url = bridge
    result, run = launch(folder, url, 0)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    assert "computed configurations: 1" in said
    document = json.loads((run / "run.json").read_text())
    solver = document["components"]["solver"]["parts"][0]
    coupler = document["components"]["coupler"]["parts"][0]
    assert len(solver["hosts"]) == 2
    assert set(solver["hosts"]) <= set(slurm_partitions.nodes["alpha"])
    assert set(coupler["hosts"]) <= set(slurm_partitions.nodes["beta"])
    assert solver["reservation"].startswith("coorm-")
    # every task ran on a granted host (the test Slurm's nodes all run on localhost: the
    # hostfiles say which)
    assert (run / "alpha.hosts").read_text().split() == solver["hosts"]
    jobs = json.loads((run / "jobs.json").read_text())
    assert {c: (j["state"], j["exit_code"]) for c, j in jobs.items()} == {
        "alpha": ("completed", 0),
        "beta": ("completed", 0),
    }
    stamps = sorted(run.glob("*.start"))
    assert len(stamps) == 3, stamps  # two tasks of the solver (srun), one of the coupler
    first = {
        name: min(float(p.read_text()) for p in stamps if p.name.startswith(f"{name}."))
        for name in ("solver", "coupler")
    }
    assert abs(first["solver"] - first["coupler"]) <= 1.0, first


def test_a_failing_component_fails_the_run(bridge):
    folder, url = bridge
    result, run = launch(folder, url, 3)
    assert result.returncode == 1, result.stdout + result.stderr
    jobs = json.loads((run / "jobs.json").read_text())
    assert (jobs["beta"]["state"], jobs["beta"]["exit_code"]) == ("failed", 3)
    assert "done sent" in result.stdout


@pytest.mark.mpi
def test_the_coupled_mpi_example_runs_on_two_slurm_clusters(mpi, bridge):
    """examples/coupled as a user runs it: mpirun inside each cluster's job, the components
    exchanging checked values over TCP; both jobs start within a second of each other."""
    folder, url = bridge
    app = Path(__file__).resolve().parents[2] / "examples" / "coupled" / "coupled.toml"
    result = subprocess.run(
        [str(Path(sys.executable).with_name("coorm-launch")), str(app), "--url", url],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=folder,
        env={**os.environ, "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"},
    )
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    (run,) = (folder / "coorm-runs").iterdir()
    solver = json.loads((run / "solver.json").read_text())
    coupler = json.loads((run / "coupler.json").read_text())
    assert (solver["ranks"], coupler["ranks"]) == (4, 2)
    assert solver["ok"]
    assert coupler["ok"]
    assert solver["received"] == coupler["sent"]
    started = abs(solver["started"] - coupler["started"])
    print(f"the two components started {started:.2f} s apart")
    assert started <= 1.0
