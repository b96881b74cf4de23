"""The evolving example's code (examples/amr/amr.py) and the sweep's task (examples/sweep/task.py)
alone, driven here as coorm-launch drives them: the AMR code step by step, each step one
``mpirun`` on as many ranks as the previous step's data size asks, until it reports it is done;
the task with its environment, run to the end or terminated as a preemption would.

The AMR tests need ``mpirun`` and the system Python's mpi4py (Debian: openmpi-bin,
python3-mpi4py): skipped without them, except in CI (COORM_REQUIRE_MPI=1).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
AMR = EXAMPLES / "amr" / "amr.py"
TASK = EXAMPLES / "sweep" / "task.py"
PYTHON = "/usr/bin/python3"
OPEN_MPI = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl": "self,tcp",
}
#: amr.py's --cells-per-host when not given: a step's data size is its cells over this.
CELLS_PER_HOST = 2000


def amr_step(folder: Path, step: int, ranks: int, *args: str) -> subprocess.CompletedProcess[str]:
    """Step ``step`` on ``ranks`` ranks, with the environment the launcher gives; its report is
    ``report-<step>.json``."""
    env = {
        **os.environ,
        **OPEN_MPI,
        "COORM_STEP": str(step),
        "COORM_STATE_DIR": str(folder / "state"),
        "COORM_REPORT": str(folder / f"report-{step}.json"),
        "COORM_RUN_DIR": str(folder / "run"),
    }
    argv = ["mpirun", "--oversubscribe", "-np", str(ranks), PYTHON, str(AMR), *args]
    return subprocess.run(
        argv, env=env, cwd=folder, text=True, capture_output=True, timeout=300, check=False
    )


def drive(
    folder: Path, *args: str, between: Callable[[Path], None] | None = None
) -> tuple[list[int], list[dict], subprocess.CompletedProcess[str]]:
    """Run the AMR code as the launcher does, from one rank, each next step on ceil(data_size)
    ranks (the data-size rule with per_host = 1), until a report says done: the ranks of each
    step, the reports, and the last step's process. ``between`` runs after each step but the last
    (given the state folder)."""
    for sub in ("state", "run"):
        (folder / sub).mkdir(parents=True)
    ranks, hosts, reports = 1, [], []
    for step in range(1, 40):
        done = amr_step(folder, step, ranks, *args)
        hosts.append(ranks)
        reports.append(json.loads((folder / f"report-{step}.json").read_text()))
        if reports[-1].get("done"):
            return hosts, reports, done
        assert done.returncode == 0, done.stdout + done.stderr
        if between is not None:
            between(folder / "state")
        ranks = math.ceil(reports[-1]["data_size"])
    pytest.fail(f"the AMR code never reported done: {reports}")


@pytest.mark.mpi
def test_the_amr_code_grows_then_shrinks_and_its_result_checks_and_repeats(mpi, tmp_path):
    hosts, reports, last = drive(tmp_path / "first", "--work", "0.01")
    said = last.stdout + last.stderr
    assert last.returncode == 0, said
    assert reports[-1] == {"done": True, "check": "ok"}
    for report in reports[:-1]:
        assert set(report) == {"data_size", "cells", "iteration"}
        assert report["data_size"] == report["cells"] / CELLS_PER_HOST
    # the demo's curve at the defaults: up from one host to four, and down again before the end
    assert hosts[0] == 1
    assert max(hosts) == 4
    steps = list(itertools.pairwise(hosts))
    assert any(b > a for a, b in steps)
    assert any(b < a for a, b in steps)
    peak = hosts.index(4)  # one rise, then one fall: the slides' AMR curve
    assert hosts[: peak + 1] == sorted(hosts[: peak + 1])
    assert hosts[peak:] == sorted(hosts[peak:], reverse=True)
    assert hosts[-1] <= 2
    results = json.loads((tmp_path / "first" / "run" / "amr.json").read_text())
    assert results["check"] == "ok"
    assert results["checksum"] == results["serial_checksum"]
    history = results["history"]
    assert [h["step"] for h in history] == list(range(1, len(hosts) + 1))
    assert [h["ranks"] for h in history] == hosts
    assert [h["first"] for h in history] == [1] + [h["last"] + 1 for h in history[:-1]]
    assert history[-1]["last"] == results["iterations"] == 60
    assert [h["cells"] for h in history[:-1]] == [r["cells"] for r in reports[:-1]]
    # the same run again, without the sleeping: the same steps, the same result to the bit
    again, _, repeat = drive(tmp_path / "again", "--work", "0")
    assert repeat.returncode == 0, repeat.stdout + repeat.stderr
    second = json.loads((tmp_path / "again" / "run" / "amr.json").read_text())
    assert again == hosts
    assert second["history"] == history
    assert second["checksum"] == results["checksum"]


@pytest.mark.mpi
def test_the_amr_check_fails_a_corrupted_checkpoint(mpi, tmp_path):
    """The serial check can fail: one cell's value changed between two steps is caught."""

    def corrupt(state: Path) -> None:
        saved = json.loads((state / "checkpoint.json").read_text())
        saved["cells"][len(saved["cells"]) // 2][2] += 1e-9
        (state / "checkpoint.json").write_text(json.dumps(saved))

    hosts, reports, last = drive(tmp_path, "--iterations", "12", "--work", "0", between=corrupt)
    assert len(hosts) > 1
    assert last.returncode != 0
    assert reports[-1] == {"done": True, "check": "failed"}
    assert json.loads((tmp_path / "run" / "amr.json").read_text())["check"] == "failed"


@pytest.mark.mpi
def test_the_amr_code_refuses_a_checkpoint_made_with_other_parameters(mpi, tmp_path):
    for sub in ("state", "run"):
        (tmp_path / sub).mkdir()
    first = amr_step(tmp_path, 1, 1, "--iterations", "12", "--work", "0")
    assert first.returncode == 0, first.stdout + first.stderr
    other = amr_step(tmp_path, 2, 2, "--iterations", "13", "--work", "0")
    assert other.returncode != 0
    assert "checkpoint was made with" in other.stderr
    assert not (tmp_path / "report-2.json").exists()


def start_task(folder: Path, task: str, params: dict, seconds: float) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "COORM_TASK": task,
        "COORM_TASK_PARAMS": json.dumps(params),
        "COORM_TASK_RESULT": str(folder / f"{task}.json"),
    }
    argv = [sys.executable, str(TASK), "--seconds", str(seconds)]
    return subprocess.Popen(argv, env=env, cwd=folder, text=True, stdout=subprocess.PIPE)


def test_a_task_writes_its_result_when_it_completes(tmp_path):
    params = {"x": 0.5, "seed": 3}
    values = []
    for task in ("t7", "t8"):
        process = start_task(tmp_path, task, params, 0.3)
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0, out
        assert out.startswith("started\n")
        result = json.loads((tmp_path / f"{task}.json").read_text())
        assert set(result) >= {"task", "params", "value", "exact", "started", "ended", "host"}
        assert (result["task"], result["params"]) == (task, params)
        assert (result["pid"], result["host"]) == (process.pid, socket.gethostname())
        assert result["started"] <= result["ended"]
        assert result["exact"] == 1 / 1.5
        assert 0 < result["error"] < 0.01
        assert abs(result["value"] - result["exact"]) < 6 * result["error"]
        values.append(result["value"])
    assert values[0] == values[1]  # the same parameters, the same estimate
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t7.json", "t8.json"]  # no temp left


def test_a_terminated_task_leaves_no_result(tmp_path):
    """A preemption's SIGTERM mid-run: the task stops at once, non-zero, with no result."""
    process = start_task(tmp_path, "t3", {"x": 2, "seed": 1}, 600)
    assert process.stdout is not None
    assert process.stdout.readline() == "started\n"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 143
    assert list(tmp_path.iterdir()) == []
