"""The moldable example (examples/moldable/solver.py): an MPI solver whose work divides over its
ranks, one per host granted, alone under Open MPI and as shipped through the bridge.

Needs ``mpirun`` and the system Python's mpi4py (Debian: openmpi-bin, python3-mpi4py): skipped
without them, except in CI (COORM_REQUIRE_MPI=1).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi

FOLDER = Path(__file__).resolve().parents[2] / "examples" / "moldable"
SOLVER = FOLDER / "solver.py"
PYTHON = "/usr/bin/python3"
ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def solve(ranks: int, run: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ROOT, "COORM_RUN_DIR": str(run)}
    argv = ["mpirun", "--oversubscribe", "-np", str(ranks), PYTHON, str(SOLVER), *args]
    return subprocess.run(
        argv, env=env, cwd=run, text=True, capture_output=True, timeout=300, check=False
    )


def shares_cover(report: dict, ranks: int) -> None:
    """Every interval counted once, in contiguous shares that differ by at most one."""
    intervals = report["intervals"]
    shares = sorted(report["shares"], key=lambda s: s["rank"])
    assert [s["rank"] for s in shares] == list(range(ranks))
    starts = [sum(s["count"] for s in shares[:k]) for k in range(ranks)]
    assert [s["first"] for s in shares] == starts
    assert sum(s["count"] for s in shares) == intervals
    assert {s["count"] for s in shares} <= {intervals // ranks, intervals // ranks + 1}
    assert math.isclose(sum(s["sum"] for s in shares), report["result"], rel_tol=1e-12)


def test_the_work_divides_over_the_ranks_and_the_result_is_checked(mpi, tmp_path):
    result = solve(3, tmp_path, "--input", str(FOLDER / "case.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "solver.json").read_text())
    assert report["ok"]
    assert report["ranks"] == 3
    assert report["intervals"] == json.loads((FOLDER / "case.json").read_text())["intervals"]
    shares_cover(report, 3)
    assert abs(report["result"] - math.pi) <= report["bound"] < 1e-12
    assert "ok" in result.stdout


def test_the_check_fails_a_lost_or_doubled_share_or_a_wrong_sum(mpi, tmp_path):
    """The check can fail: what a rank lost, counted twice or got wrong is caught."""
    probe = f"""
import json, math, sys
sys.path.insert(0, {str(FOLDER)!r})
from solver import partial, share, verify
n = 1000
shares = [dict(zip(("first", "count"), share(n, r, 4))) for r in range(4)]
total = sum(partial(s["first"], s["count"], n) for s in shares)
print(json.dumps([
    verify(shares, total, n)[0],
    verify(shares[:3], total, n)[0],
    verify([*shares, shares[1]], total, n)[0],
    verify(shares, total + 1e-6, n)[0],
]))
"""
    said = subprocess.run(
        [PYTHON, "-c", probe], text=True, capture_output=True, timeout=60, check=True
    )
    assert json.loads(said.stdout) == [True, False, False, False]


@pytest.mark.daemon
def test_the_example_runs_as_shipped_through_the_bridge_on_the_embedded_mock(mpi, tmp_path):
    """``coorm-launch --start-daemon examples/moldable/moldable.toml``, verbatim: the selector
    picks a cluster and a host count from the view, the solver runs one rank per granted host
    there, and its checked result is the run's."""
    launch = Path(sys.executable).with_name("coorm-launch")
    app = FOLDER / "moldable.toml"
    result = subprocess.run(
        [str(launch), "--plain", "--start-daemon", str(app)],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )  # fmt: skip
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    (run,) = (tmp_path / "coorm-runs").iterdir()
    (part,) = json.loads((run / "run.json").read_text())["components"]["solver"]["parts"]
    granted = part["hosts"]
    assert 2 <= len(granted) <= 8  # the file's min_hosts and max_hosts
    report = json.loads((run / "solver.json").read_text())
    assert report["ok"]
    assert report["ranks"] == len(granted)  # one rank per host granted
    assert report["hosts"] == granted
    shares_cover(report, len(granted))
    jobs = json.loads((run / "jobs.json").read_text())
    assert {c: (j["state"], j["exit_code"]) for c, j in jobs.items()} == {
        part["cluster"]: ("completed", 0)
    }
