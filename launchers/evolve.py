"""``coorm-launch`` for an evolving code (``kind = "evolving"``): steps inside a pre-allocation.

The slides' AMR loop (002, "CooRMv2: AMR & PSA"), driven for the code:

1. A pre-allocation of ``[evolving] pre_allocation`` hosts for ``duration`` seconds is sent and
   waited for: the hosts the code may ever need, held for it (a placeholder).
2. Each step is a non-preemptible request of the hosts the step needs, started at once inside
   the pre-allocation (a spontaneous update), and one job on exactly its hosts: the component
   under its MPI launcher, with ``COORM_STEP``, ``COORM_STATE_DIR`` (kept across steps: the
   checkpoint) and ``COORM_REPORT`` (where it writes what it now needs) in its environment.
3. When the step's job ends, its request is done (its hosts go back to the pre-allocation) and
   the growth rule (``[growth]``) turns the report into the next step's hosts, kept within the
   pre-allocation. A report ``{"done": true}`` ends the run; so does a failed step.

``steps.json`` in the run directory keeps the pre-allocation's hosts and end, and each step: its
hosts, job, exit status and report.
Exit status 0 when every step succeeded and the code said it was done.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.adaptive import EXIT_FAILED, EXIT_OK, AdaptiveRun, RunOver, time_limit
from coorm_bridge.launchers.application import (
    ApplicationEnded,
    Failed,
    Killed,
    NotHeld,
    RequestEnded,
)
from coorm_bridge.launchers.deploy import Deployer, DeployError, JobStatus
from coorm_bridge.launchers.display import clock
from coorm_bridge.launchers.growth import GrowthRule, ReportError
from coorm_bridge.launchers.rundir import write_whole
from coorm_bridge.protocol_v2 import RequestInfo

PRE_ALLOCATION = "pa"
#: Seconds a step's request ends before its pre-allocation does (clocks and calls take time).
INSIDE_MARGIN = 30


@dataclass
class EvolvingRun(AdaptiveRun):
    """One evolving application's run (see the module docstring)."""

    rule: GrowthRule | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    held: dict[str, Any] = field(default_factory=dict)
    """The pre-allocation, as ``steps.json`` keeps it: its hosts and end."""
    _job: tuple[Deployer, str] | None = None

    def body(self) -> int:
        spec = self.app.evolving
        assert spec is not None
        assert self.rule is not None
        sent = self.bridge(
            lambda: self.application.pre_allocate(
                self.cluster, spec.pre_allocation, spec.duration, id=PRE_ALLOCATION
            ),
            PRE_ALLOCATION,
        )
        when = "never" if sent.estimated_start is None else clock(sent.estimated_start)
        self.display.note(
            f"pre-allocation sent: {spec.pre_allocation} hosts on {self.cluster} for "
            f"{spec.duration} s; estimated start {when}"
        )
        held = self._started(PRE_ALLOCATION, spec.pre_allocation, spec.duration)
        assert held.end is not None
        self.display.note(
            f"pre-allocation started until {clock(held.end)} on {', '.join(held.host_names)}"
        )
        self.held = {"request": PRE_ALLOCATION, "hosts": list(held.host_names), "end": held.end}
        (self.folder / "state").mkdir(exist_ok=True)
        hosts, step = min(spec.first_hosts, spec.pre_allocation), 1
        while True:
            report = self._step(step, hosts, held.end)
            if report.get("done") is True:
                self.display.note(f"step {step} said the code is done: {report}")
                return EXIT_OK
            try:
                wanted = self.rule.next_hosts(report, hosts)
            except ReportError as error:
                raise RunOver(EXIT_FAILED, f"step {step}: {error}") from None
            if wanted > spec.pre_allocation:
                self.display.warn(
                    f"step {step} needs {wanted} hosts, more than the pre-allocation's "
                    f"{spec.pre_allocation}: the next step runs on {spec.pre_allocation}"
                )
                wanted = spec.pre_allocation
            self.display.note(f"step {step} on {_hosts(hosts)}: next step on {wanted} ({report})")
            hosts, step = wanted, step + 1

    def _step(self, step: int, hosts: int, end: int) -> dict[str, Any]:
        """Run one step on ``hosts`` hosts: its request, its job, its report."""
        # The step asks until a little before the pre-allocation's end: one that would end after
        # it (the bridge's clock a second on from ours) does not fit inside, and is placed apart.
        left = end - int(time.time()) - INSIDE_MARGIN
        if left <= 0:
            raise RunOver(EXIT_FAILED, f"the pre-allocation ends at {clock(end)}, before the code")
        name = f"step{step}"
        self.bridge(lambda: self.application.grow(self.cluster, hosts, left, id=name), name)
        request = self._started(name, hosts, left)
        record: dict[str, Any] = {"step": step, "request": name, "hosts": list(request.host_names)}
        self.steps.append(record)
        report_path = self.folder / f"{name}.report.json"
        report_path.unlink(missing_ok=True)
        plan = self.plan(request, request.host_names, name, {
            "COORM_STEP": str(step),
            "COORM_STATE_DIR": str(self.folder / "state"),
            "COORM_REPORT": str(report_path),
        })  # fmt: skip
        deployer = self.deployer(request, request.host_names)
        assert request.end is not None
        limit = time_limit(min(request.end, end), deployer)
        if limit <= 0:
            raise RunOver(EXIT_FAILED, f"{name}: no time left in the pre-allocation")
        job = deployer.submit(plan, limit)
        self._job = (deployer, job)
        record |= {"job": job, "state": "submitted"}
        self._save()
        self.display.note(f"{name}: job {job} on {', '.join(request.host_names)}")
        status = self._watch(name, hosts, deployer, job)
        self._job = None
        self.bridge(lambda: self.application.done(name), name)
        record |= {"state": status.state, "exit_code": status.exit_code}
        if not status.succeeded:
            self._save()
            said = (
                f"exit status {status.exit_code}" if status.exit_code is not None else "no status"
            )
            detail = f": {status.detail}" if status.detail else ""
            raise RunOver(EXIT_FAILED, f"{name}: job {job} {status.state} ({said}){detail}")
        try:
            report = json.loads(report_path.read_text())
        except (OSError, ValueError) as error:
            raise RunOver(
                EXIT_FAILED, f"{name} wrote no report to {report_path}: {error}"
            ) from None
        if not isinstance(report, dict):
            raise RunOver(EXIT_FAILED, f"{name}'s report is not a JSON object: {report!r}")
        record["report"] = report
        self._save()
        return report

    def _watch(self, name: str, hosts: int, deployer: Deployer, job: str) -> JobStatus:
        """The step's job until it ends; the session's events meanwhile."""
        interval = self.app.deployment.poll_interval
        next_poll = 0.0
        while True:
            if time.monotonic() >= next_poll:
                try:
                    status = deployer.status(job)
                except DeployError as error:
                    self.display.warn(f"{error} (will ask again)")
                else:
                    if status.finished:
                        return status
                next_poll = time.monotonic() + interval
            self.show("running", f"{name} on {_hosts(hosts)}")
            for notice in self.notices(min(1.0, interval)):
                self._fatal(notice, (name, PRE_ALLOCATION))

    def _started(self, name: str, hosts: int, duration: int) -> RequestInfo:
        """Request ``name`` once started (now, or when the bridge says so)."""
        while True:
            request = self.application.requests[name]
            if request.state is AppState.STARTED:
                return request
            self.show("waiting", name, (hosts, duration), request.estimated_start)
            for notice in self.notices():
                self._fatal(notice, (name, PRE_ALLOCATION))

    def _fatal(self, notice: object, mine: tuple[str, ...]) -> None:
        """Notices that end the run (or are shown)."""
        if isinstance(notice, NotHeld):
            self.display.warn(
                f"{notice.request}: not held this time ({notice.reason}); the bridge tries "
                f"again at {clock(notice.retry_at)}"
            )
        elif isinstance(notice, Killed | Failed) and notice.request in mine:
            raise RunOver(EXIT_FAILED, f"{notice.request}: {notice.reason}")
        elif isinstance(notice, RequestEnded) and notice.request in mine:
            raise RunOver(EXIT_FAILED, f"{notice.request} ended at the bridge ({notice.state})")
        elif isinstance(notice, ApplicationEnded):
            raise RunOver(EXIT_FAILED, f"the session ended at the bridge: {notice.reason}")

    def stop_jobs(self) -> None:
        if self._job is not None:
            deployer, job = self._job
            try:
                deployer.cancel(job)
            except DeployError as error:
                self.display.warn(str(error))

    def _save(self) -> None:
        document = {"pre_allocation": self.held, "steps": self.steps}
        write_whole(self.folder / "steps.json", json.dumps(document, indent=2) + "\n")


def _hosts(count: int) -> str:
    return f"{count} host" if count == 1 else f"{count} hosts"


__all__ = ["EvolvingRun"]
