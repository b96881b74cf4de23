"""The evolving examples through ``coorm-launch``, as a user runs them: the AMR code in steps
inside its pre-allocation (examples/amr), the sweep on preemptible hosts (examples/sweep), each
alone on a private mock daemon as shipped, and both on one cluster, as the CooRMv2 slides pair
them: the sweep fills idle hosts and gives them back when the AMR code's pre-allocation needs
them.

Every wait is a process's end or a line it prints; none sleeps.
"""

from __future__ import annotations

import itertools
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coorm_bridge.launchers.evolving import EvolvingClient
from tests import daemons

FOLDER = Path(__file__).resolve().parents[2] / "examples"
AMR = FOLDER / "amr" / "amr.toml"
SWEEP = FOLDER / "sweep" / "sweep.toml"
LAUNCH = Path(sys.executable).with_name("coorm-launch")
EIGHT = '[[cluster]]\nname = "alpha"\nhosts = 8\n'

pytestmark = pytest.mark.daemon


def launch(app: Path, cwd: Path, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(LAUNCH), "--plain", *options, str(app)],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finished(process: subprocess.Popen[str]) -> str:
    said, _ = process.communicate(timeout=600)
    assert process.returncode == 0, said
    return said


def run_folder(cwd: Path) -> Path:
    (run,) = (cwd / "coorm-runs").iterdir()
    return run


def check_amr(run: Path) -> dict[str, Any]:
    """The code's own check passed; every step ran on as many hosts as it asked, all of them
    the pre-allocation's, and the steps grew and shrank."""
    result = json.loads((run / "amr.json").read_text())
    assert result["check"] == "ok"
    assert result["checksum"] == result["serial_checksum"]
    record = json.loads((run / "steps.json").read_text())
    held = set(record["pre_allocation"]["hosts"])
    assert len(held) == 4
    steps = record["steps"]
    sizes = [len(step["hosts"]) for step in steps]
    assert sizes == [h["ranks"] for h in result["history"]]
    for step in steps:
        assert set(step["hosts"]) <= held
        assert (step["state"], step["exit_code"]) == ("completed", 0)
    assert any(b > a for a, b in itertools.pairwise(sizes))
    assert any(b < a for a, b in itertools.pairwise(sizes))
    assert max(sizes) == 4
    for step, after in itertools.pairwise(steps):  # each step asks what the last said
        assert len(after["hosts"]) == math.ceil(step["report"]["data_size"])
    return record


def check_sweep(run: Path, seeds: int = 3) -> dict[str, dict[str, Any]]:
    """Every task of the grid has one result, right for its parameters, and exactly one run
    that completed."""
    tasks = json.loads((run / "tasks.json").read_text())
    assert len(tasks) == 4 * seeds
    for task, record in tasks.items():
        assert record["state"] == "done"
        assert [r["outcome"] for r in record["runs"]].count("done") == 1, record
        result = json.loads((run / "results" / f"{task}.json").read_text())
        assert result["task"] == task
        assert abs(result["value"] - 1 / (1 + result["params"]["x"])) < 0.01
    grid = {(r["x"], r["seed"]) for r in (json.loads(p.read_text())["params"] for p in
            (run / "results").glob("*.json"))}  # fmt: skip
    assert grid == {(x, s) for x in (0.25, 0.5, 0.75, 1.0) for s in range(1, seeds + 1)}
    return tasks


def test_the_amr_example_runs_as_shipped_on_the_embedded_mock(mpi, tmp_path):  # type: ignore[no-untyped-def]
    """``coorm-launch --start-daemon examples/amr/amr.toml``: the steps grow and shrink inside
    the pre-allocation, the ranks restart from the checkpoint, the result is checked."""
    said = finished(launch(AMR, tmp_path, "--start-daemon"))
    assert "pre-allocation started" in said
    check_amr(run_folder(tmp_path))


def test_the_sweep_example_runs_as_shipped_on_the_embedded_mock(tmp_path):  # type: ignore[no-untyped-def]
    """``coorm-launch --start-daemon examples/sweep/sweep.toml``: every task once."""
    finished(launch(SWEEP, tmp_path, "--start-daemon"))
    check_sweep(run_folder(tmp_path))


def test_the_amr_code_takes_hosts_back_from_the_sweep_which_runs_its_tasks_again(
    mpi, make_daemon, tmp_path
):  # type: ignore[no-untyped-def]
    """One 8-host cluster: the sweep runs on 6 idle hosts; the AMR code's pre-allocation needs
    4, so the sweep is preempted on 2, its tasks there stopped and queued again; both end with
    their results, every task's once."""
    daemon = make_daemon(
        daemons.config({**daemons.MOCK, "run_jobs": True}, policy={"interval": 0.2}), EIGHT
    ).start()
    url = ("--url", daemon.unix)
    (tmp_path / "amr").mkdir()
    (tmp_path / "sweep").mkdir()
    # The example's sweep, twice as many tasks, each twice as long: the AMR code's launcher
    # starts while the first ones run, and a busy machine (CI) may take 3 s to start it, the
    # example's task time, when the preemption would come as they end and stop none.
    longer = tmp_path / "sweep.toml"
    longer.write_text(
        SWEEP.read_text()
        .replace("seed = [1, 2, 3]", "seed = [1, 2, 3, 4, 5, 6]")
        .replace('"./task.py", "--seconds", "3"', f'"{SWEEP.parent / "task.py"}", "--seconds", "6"')
    )
    sweep = launch(longer, tmp_path / "sweep", *url)
    assert sweep.stdout is not None
    for line in sweep.stdout:  # the AMR code comes once the sweep runs on its hosts
        if " started on " in line:
            break
    amr = launch(AMR, tmp_path / "amr", *url)
    finished(amr)
    said = finished(sweep)
    check_amr(run_folder(tmp_path / "amr"))
    tasks = check_sweep(run_folder(tmp_path / "sweep"), seeds=6)
    outcomes = [run["outcome"] for task in tasks.values() for run in task["runs"]]
    assert "preempted" in outcomes or "killed" in outcomes, said


def test_an_amr_run_rides_out_its_daemon_killed_with_9_and_restarted(mpi, make_daemon, tmp_path):  # type: ignore[no-untyped-def]
    """The daemon is killed with -9 while a step runs, and started again: the step's job goes
    on (its process outlives the daemon), the launcher waits for the bridge, and the run ends
    as it would have, every step checked."""
    daemon = make_daemon(
        daemons.config({**daemons.MOCK, "run_jobs": True}, policy={"interval": 0.2}), EIGHT
    ).start()
    amr = launch(AMR, tmp_path, "--url", daemon.unix)
    assert amr.stdout is not None
    lines = []
    for line in amr.stdout:
        lines.append(line)
        if "step2: job" in line:
            break
    session = lines[0].split("session ")[1].split()[0]
    # Killed once its process runs (a daemon killed while it starts a process cannot know
    # whether it did, and fails the job: by design).
    with EvolvingClient(daemon.unix, timeout=10) as client:
        failsafe = time.monotonic() + 120
        while not [job for job in client.request_jobs(session, "step2") if job.started]:
            assert time.monotonic() < failsafe, "step2's job never ran"
            time.sleep(0.1)
    daemon.kill(signal.SIGKILL)
    daemon.start()
    said = "".join(lines) + finished(amr)
    record = check_amr(run_folder(tmp_path))
    assert len({step["job"] for step in record["steps"]}) == len(record["steps"]), said
