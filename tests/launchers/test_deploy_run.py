"""A start's jobs get time limits that end with the allocation, whenever the batch system
starts them: counted from the submission to the fraction of a second plus the deployer's slack,
and lowered while a job waits past it (a scripted deployer, the clock set by the test)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from coorm_bridge.core.messages import Allocation, StartEvent
from coorm_bridge.core.model import ClusterInfo
from coorm_bridge.launchers import deploy
from coorm_bridge.launchers.app import parse_app
from coorm_bridge.launchers.deploy.base import Deployer, DeployError, JobStatus, State
from coorm_bridge.launchers.deploy.run import Run
from coorm_bridge.launchers.display import PlainDisplay
from coorm_bridge.launchers.rundir import JobPlan, prepare

START = 1_800_000_000
APP = """
duration = 120
[selector]
name = "rigid"
params = { nodes = { alpha = 1 } }
[[component]]
name = "solver"
command = ["true"]
clusters = ["alpha"]
"""


class Scripted(Deployer):
    """Takes every job; its state is what the test sets; records every limit it is given."""

    kind = "scripted"

    def __init__(self, unit: int, slack: float, *, can_refit: bool = True) -> None:
        super().__init__("alpha")
        self.unit, self.slack = unit, slack  # type: ignore[misc]
        self.can_refit = can_refit
        self.state: State = "pending"
        self.submitted: list[int] = []
        self.refits: list[int] = []

    def submit(self, plan: JobPlan, time_limit: int) -> str:
        self.submitted.append(time_limit)
        return "7"

    def status(self, job: str) -> JobStatus:
        return JobStatus(self.state, 0 if self.state == "completed" else None)

    def cancel(self, job: str) -> None:
        self.state = "cancelled"

    def refit(self, job: str, time_limit: int) -> bool:
        if self.can_refit:
            self.refits.append(time_limit)
        return self.can_refit


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock(START)
    monkeypatch.setattr(deploy.run.time, "time", clock)
    return clock


def a_run(tmp_path: Path, deployer: Deployer, end: int) -> tuple[Run, StartEvent, io.StringIO]:
    start = StartEvent(
        seq=4, time=START, end=end, allocations={"alpha": Allocation(hosts=["alpha01"])}
    )
    directory = prepare(
        parse_app(APP, base_dir=tmp_path),
        "s1",
        start,
        {"alpha": ClusterInfo(name="alpha", hosts=8)},
        {"alpha": "slurm"},
        root=tmp_path,
    )
    said = io.StringIO()
    return Run(directory, {"alpha": deployer}, PlainDisplay(said, said)), start, said


def test_a_whole_minutes_allocation_gives_a_limit_one_minute_shorter(tmp_path, clock):
    """The bug of a busy Slurm: the start's second counted whole gave the whole 2 minutes, and a
    job started a second later would end a second after the next placeholder began."""
    slurm = Scripted(unit=60, slack=5)
    run, start, _ = a_run(tmp_path, slurm, end=START + 120)
    clock.now = START + 0.4
    run.submit(start)
    assert slurm.submitted == [60]
    assert run.limits == {"alpha": 60}


def test_the_slack_is_left_out_before_rounding(tmp_path, clock):
    oar = Scripted(unit=1, slack=30)
    run, start, _ = a_run(tmp_path, oar, end=START + 600)
    clock.now = START + 0.5
    run.submit(start)
    assert oar.submitted == [569]  # 600 - 0.5 - 30, rounded down to the second


def test_too_late_to_fit_once_started_submits_nothing(tmp_path, clock):
    slurm = Scripted(unit=60, slack=5)
    run, start, _ = a_run(tmp_path, slurm, end=START + 64)
    with pytest.raises(DeployError, match="too late to submit"):
        run.submit(start)
    assert slurm.submitted == []


def test_a_job_pending_past_its_slack_gets_its_limit_lowered(tmp_path, clock):
    slurm = Scripted(unit=60, slack=5)
    run, start, said = a_run(tmp_path, slurm, end=START + 180)
    clock.now = START + 1
    run.submit(start)
    assert run.limits == {"alpha": 120}  # 179 - 5 s left: two minutes
    clock.now = START + 5  # pending, but a start now still ends by the end: left alone
    run.poll()
    assert slurm.refits == []
    clock.now = START + 61  # a start now would end at +181: lowered to what fits
    run.poll()
    assert slurm.refits == [60]
    assert run.limits == {"alpha": 60}
    assert "time limit lowered to 60 s" in said.getvalue()
    clock.now = START + 62  # lowered already: not asked again
    run.poll()
    assert slurm.refits == [60]
    slurm.state = "running"
    clock.now = START + 170  # running jobs are the batch system's to stop
    run.poll()
    assert slurm.refits == [60]


def test_a_job_that_can_no_longer_fit_is_left_to_the_allocations_end(tmp_path, clock):
    slurm = Scripted(unit=60, slack=5)
    run, start, _ = a_run(tmp_path, slurm, end=START + 180)
    clock.now = START + 1
    run.submit(start)
    clock.now = START + 130  # less than a minute left
    run.poll()
    assert slurm.refits == []


def test_a_batch_system_that_cannot_lower_a_limit_keeps_it(tmp_path, clock):
    mock = Scripted(unit=1, slack=1, can_refit=False)
    run, start, _ = a_run(tmp_path, mock, end=START + 180)
    clock.now = START + 0.5
    run.submit(start)
    assert run.limits == {"alpha": 178}
    clock.now = START + 10
    run.poll()
    assert run.limits == {"alpha": 178}
