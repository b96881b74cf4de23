"""The coupled MPI example (examples/coupled/coupled.py) alone, under Open MPI: two components
of several ranks exchange checked values over TCP every iteration, as coorm-launch runs them.

Needs ``mpirun`` and the system Python's mpi4py (Debian: openmpi-bin, python3-mpi4py): skipped
without them, except in CI (COORM_REQUIRE_MPI=1), where .ci/run installs them.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.daemons import free_port

pytestmark = pytest.mark.mpi

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "coupled" / "coupled.py"
PYTHON = "/usr/bin/python3"


def mpirun(component: str, ranks: int, run: Path, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "COORM_RUN_JSON": str(run / "run.json"),
        "COORM_RUN_DIR": str(run),
        "COORM_COMPONENT": component,
    }
    argv = ["mpirun", "--oversubscribe", "-np", str(ranks), PYTHON, str(EXAMPLE), *args]
    return subprocess.Popen(argv, env=env, cwd=run, text=True, stdout=subprocess.PIPE)


def test_two_components_exchange_checked_values_every_iteration(mpi, tmp_path):
    port = free_port()
    components = {
        "solver": {"processes": 3, "rendezvous": {"host": "127.0.0.1", "port": port}},
        "coupler": {"processes": 2, "rendezvous": {"host": "127.0.0.1", "port": port + 1}},
    }
    (tmp_path / "run.json").write_text(json.dumps({"components": components}))
    runs = [mpirun("solver", 3, tmp_path), mpirun("coupler", 2, tmp_path)]
    outputs = [run.communicate(timeout=120)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    solver = json.loads((tmp_path / "solver.json").read_text())
    coupler = json.loads((tmp_path / "coupler.json").read_text())
    assert solver["ok"]
    assert coupler["ok"]
    assert (solver["ranks"], coupler["ranks"]) == (3, 2)
    assert solver["received"] == coupler["sent"]
    assert coupler["received"] == solver["sent"]
    # iteration i: sum over ranks r of (i * ranks + r + 0.5)
    assert solver["sent"][4] == sum(4 * 3 + r + 0.5 for r in range(3))


def test_a_component_whose_peer_sends_nonsense_fails(mpi, tmp_path):
    """The check can fail: a peer that is not the other component is caught."""
    port = free_port()
    components = {
        "solver": {"processes": 2, "rendezvous": {"host": "127.0.0.1", "port": port}},
        "impostor": {"processes": 2, "rendezvous": {"host": "127.0.0.1", "port": port + 1}},
    }
    (tmp_path / "run.json").write_text(json.dumps({"components": components}))
    solver = mpirun("solver", 2, tmp_path, "--iterations", "3", "--timeout", "30")
    deadline = time.monotonic() + 60
    while True:
        try:
            peer = socket.create_connection(("127.0.0.1", port), timeout=30)
            break
        except OSError:
            assert time.monotonic() < deadline, "the solver never listened"
            time.sleep(0.2)
    with peer:
        for iteration in range(3):  # the right iteration, a wrong sum
            peer.sendall(struct.pack("!qd", iteration, 1.0))
            peer.recv(16)
    solver.communicate(timeout=60)
    assert solver.returncode != 0
    assert json.loads((tmp_path / "solver.json").read_text())["mismatches"]


def test_the_example_runs_through_the_bridge_on_the_embedded_mock_platform(mpi, tmp_path):
    """The README's first coupled run, verbatim: ``coorm-launch --start-daemon`` on the example
    file, a private daemon on the default mock platform started and stopped for it."""
    bin_dir = Path(sys.executable).parent
    app = EXAMPLE.with_name("coupled.toml")
    result = subprocess.run(
        [str(bin_dir / "coorm-launch"), "--start-daemon", str(app)],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    assert "started a private daemon" in said
    (run,) = (tmp_path / "coorm-runs").iterdir()
    solver = json.loads((run / "solver.json").read_text())
    coupler = json.loads((run / "coupler.json").read_text())
    assert (solver["ranks"], coupler["ranks"]) == (4, 2)
    assert solver["ok"]
    assert coupler["ok"]
    assert coupler["received"] == solver["sent"]
    apart = abs(solver["started"] - coupler["started"])
    print(f"the two components began {apart:.2f} s apart")  # before MPI_Init (the example's BEGAN)
    assert apart <= 1.0
