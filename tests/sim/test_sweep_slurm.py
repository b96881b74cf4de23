"""The Slurm runner against a real Slurm 22.05 (tests/slurm/slurm-local.sh): the toy
experiment's runs as a job array, two runs per task, with this Python; one task killed and one
run raising; the next sweep redoes only what is missing and merges the same table as a local
sweep.

The instance is this module's own (one partition "sim" of 2 nodes, no REST, no accounting:
the runner must not need sacct), started and stopped by the Slurm tests' helper; the fixtures of
tests/slurm/conftest.py are not visible from here, and sharing them would keep a second
24-node Slurm up for the whole session.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.slurm.conftest import COMMON_BINARIES, SlurmInstance, _slurm

from .conftest import COORM_SIM, toy_environ

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def sim_slurm():
    knobs = {"CLUSTERS": "sim", "NODES": "2", "DBD": "0", "REST": "0"}
    with _slurm("partitions", knobs, COMMON_BINARIES) as instance:
        yield instance


def coorm_sim(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COORM_SIM), *args], env=env, capture_output=True, text=True, check=False, timeout=600
    )


def no_task_left(slurm: SlurmInstance) -> None:
    """Await the array's end in Slurm: a task's result is in (so the sweep went on) a moment
    before its job leaves squeue; one still queued after the failsafe was left behind."""
    deadline = time.monotonic() + 60
    while queued := slurm.run("squeue", "-h").stdout.strip():
        assert time.monotonic() < deadline, f"tasks left behind: {queued}"
        time.sleep(0.2)


def test_a_job_array_sweep_resumes_after_a_killed_task(sim_slurm, toy, marks, tmp_path):
    executions = toy.executions

    env = toy_environ(sim_slurm.environ())
    out = tmp_path / "out"
    toy = ["toy", "--count", "6", "--marks", str(marks), "--out", str(out)]
    slurm = ["--executor", "slurm", "--partition", "sim", "--time", "5", "--per-task", "2"]
    (marks / "exit-2").touch()  # kills its task: n=3, the task's other run, never runs
    (marks / "fail-4").touch()  # raises: n=5, in the same task, still runs
    started = time.monotonic()
    first = coorm_sim(env, *toy, *slurm)
    said = first.stderr
    assert first.returncode == 1, said
    for n in (2, 3):
        assert f"run failed: toy marks={marks} n={n}: Slurm task " in said
    assert "ended without a result" in said
    assert f"run failed: toy marks={marks} n=4: RuntimeError: toy failure 4" in said
    assert "3 of 6 runs failed" in said
    assert len(list((out / "toy" / "runs").glob("*.json"))) == 3
    assert executions(marks) == {0: 1, 1: 1, 2: 1, 4: 1, 5: 1}
    # the tasks ran this very Python (the test's virtual environment)
    assert {p.read_text() for p in marks.glob("ran-*")} == {sys.executable}
    no_task_left(sim_slurm)

    (marks / "exit-2").unlink()
    (marks / "fail-4").unlink()
    second = coorm_sim(env, *toy, *slurm)
    elapsed = time.monotonic() - started
    assert second.returncode == 0, second.stderr
    assert "runs: 3 done now, 3 stored before" in second.stdout
    assert executions(marks) == {0: 1, 1: 1, 2: 2, 3: 1, 4: 2, 5: 1}
    print(f"\ntwo Slurm sweeps in {elapsed:.1f} s")

    local = coorm_sim(env, *toy[:-1], str(tmp_path / "local"), "--jobs", "1")
    assert local.returncode == 0, local.stderr
    merged = (out / "toy" / "toy.csv").read_text()
    assert merged == (tmp_path / "local" / "toy" / "toy.csv").read_text()
