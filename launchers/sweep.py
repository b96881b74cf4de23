"""``coorm-launch`` for a malleable application (``kind = "malleable"``): a sweep on idle hosts.

The slides' PSA (002, "CooRMv2: AMR & PSA"): a bag of independent tasks (``[tasks]``) that
fills what others leave idle, and gives hosts back when they need them.

- It asks for **preemptible** hosts on its cluster: as many as tasks wait (at most
  ``[malleable] max_hosts``), then, when its share of the preemptible view is smaller, that
  share. One request waits at a time, while tasks wait: it is the claim that gets the sweep its
  share, so hosts others give up (a pre-allocation's unused ones, an ended job's) come to it.
- Each host of a started request runs one task after another (a job of one host, outside any
  reservation, its limit the task's time and never past the request's end); a host whose
  request has no room left for a whole task, or nothing left to run, is given back at once.
- A **preemption** names hosts and a deadline: the tasks there are cancelled, put back at the
  head of the queue, and the hosts given back before the deadline. A task preempted or killed
  is not counted as an attempt; one that fails by itself is run again up to ``max_attempts``.
- A task's result is the file it writes (``results/<task>.json``, ``$COORM_TASK_RESULT``);
  a task whose result is there is done and never run again. ``tasks.json`` keeps every task's
  state, attempts and runs (job, host, request and how it ended).

Exit status 0 when every task has its result.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import RequestType
from coorm_bridge.launchers.adaptive import EXIT_FAILED, EXIT_OK, AdaptiveRun, RunOver, time_limit
from coorm_bridge.launchers.application import (
    ApplicationEnded,
    Killed,
    NotHeld,
    Notice,
    Preempted,
    RequestEnded,
    Started,
)
from coorm_bridge.launchers.client import BridgeError
from coorm_bridge.launchers.deploy import Deployer, DeployError
from coorm_bridge.launchers.display import clock
from coorm_bridge.launchers.rundir import write_whole
from coorm_bridge.launchers.tasks import Task


@dataclass
class Slot:
    """A task running on one host of a preemptible request."""

    request: str
    task: Task
    deployer: Deployer
    job: str


@dataclass
class SweepRun(AdaptiveRun):
    """One malleable application's run (see the module docstring)."""

    tasks: list[Task] = field(default_factory=list)
    pending: deque[str] = field(default_factory=deque)
    running: dict[str, Slot] = field(default_factory=dict)
    """By host."""
    record: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    waiting: str | None = None
    """The preemptible request that has not started yet, if any."""

    def body(self) -> int:
        spec = self.app.malleable
        assert spec is not None
        self.results = self.folder / "results"
        self.results.mkdir(exist_ok=True)
        self.by_id = {task.id: task for task in self.tasks}
        for task in self.tasks:
            done = self._result(task.id).exists()
            self.record[task.id] = {"state": "done" if done else "pending", "attempts": 0,
                                    "runs": []}  # fmt: skip
            if not done:
                self.pending.append(task.id)
        self.display.note(f"{len(self.pending)} of {len(self.tasks)} tasks to run")
        next_poll = 0.0
        while self.pending or self.running:
            if time.monotonic() >= next_poll:
                self._poll()
                next_poll = time.monotonic() + self.app.deployment.poll_interval
            self._ask()
            self.show("running", f"tasks: {self._counts()}")
            for notice in self.notices():
                self._notice(notice)
        self._save()
        if self.failed:
            raise RunOver(EXIT_FAILED, f"{len(self.failed)} task(s) failed: {sorted(self.failed)}")
        self.display.note(f"every task has its result in {self.results}")
        return EXIT_OK

    # -- hosts --------------------------------------------------------------------------------

    def _ask(self) -> None:
        """Keep one preemptible request waiting while tasks wait for a host: it is this
        application's claim, which gives it a share of the preemptible view (told only where
        it asks). Its size follows that share when the share is smaller."""
        spec = self.app.malleable
        assert spec is not None
        requests = self.application.requests
        if self.waiting is not None:
            waiting = requests[self.waiting]
            if waiting.state is not AppState.WAITING:
                self.waiting = None
            else:
                room = self._room()
                if 0 < room < waiting.hosts and self._withdraw(waiting.request):
                    self._send(room)
                return
        held = sum(len(r.host_names) for r in self.application.started().values())
        idle = held - len(self.running)
        wanted = min(len(self.pending) - max(0, idle), spec.max_hosts - held)
        if wanted > 0:
            room = self._room()
            self._send(min(wanted, room) if room > 0 else wanted)

    def _withdraw(self, request: str) -> bool:
        """Drop a waiting request; False when it started meanwhile (its start is coming)."""
        try:
            self.bridge(lambda: self.application.withdraw(request), request)
        except BridgeError as error:
            if error.status != 409:
                raise
            return False
        self.waiting = None
        return True

    def _send(self, hosts: int) -> None:
        spec = self.app.malleable
        assert spec is not None
        name = self.application.next_id()
        duration = spec.duration or spec.task_time
        sent = self.bridge(
            lambda: self.application.preemptible(self.cluster, hosts, duration, id=name), name
        )
        self.waiting = sent.request
        self.display.note(f"{sent.request}: {hosts} preemptible hosts asked")

    def _room(self) -> int:
        """Hosts the preemptible view gives this application now beyond those it runs on."""
        now = int(time.time())
        share = self.application.views.free(self.cluster, now, preemptible=True)
        held = sum(
            len(r.host_names)
            for r in self.application.started().values()
            if r.type is RequestType.PREEMPTIBLE
        )
        return share - held

    # -- notices ------------------------------------------------------------------------------

    def _notice(self, notice: Notice) -> None:
        if isinstance(notice, Started):
            hosts = notice.hosts.get(self.cluster, ())
            self.display.note(f"{notice.request} started on {', '.join(hosts)}")
            for host in hosts:
                self._next_task(notice.request, host)
        elif isinstance(notice, Preempted):
            self.display.note(
                f"{notice.request}: preempted, {', '.join(notice.host_names)} to give back by "
                f"{clock(notice.deadline)}"
            )
            self._take_back(notice.request, notice.host_names, "preempted")
            self._give_back(notice.request, notice.host_names)
        elif isinstance(notice, Killed | RequestEnded):
            mine = [h for h, slot in self.running.items() if slot.request == notice.request]
            self._take_back(
                notice.request, mine, "killed" if isinstance(notice, Killed) else "ended"
            )
            if self.waiting == notice.request:
                self.waiting = None
        elif isinstance(notice, NotHeld):
            self.display.warn(f"{notice.request}: not started this time ({notice.reason})")
        elif isinstance(notice, ApplicationEnded):
            raise RunOver(EXIT_FAILED, f"the session ended at the bridge: {notice.reason}")

    def _take_back(self, request: str, hosts: tuple[str, ...] | list[str], why: str) -> None:
        """Cancel the tasks on ``hosts`` and put them first in the queue (not an attempt)."""
        for host in hosts:
            slot = self.running.get(host)
            if slot is None or slot.request != request:
                continue
            self._cancel(slot)
            del self.running[host]
            if self._result(slot.task.id).exists():  # it finished just before
                self._finished(slot.task.id, "done")
                continue
            self._outcome(slot.task.id, why)
            self.record[slot.task.id]["state"] = "pending"
            self.pending.appendleft(slot.task.id)
            self.display.note(f"task {slot.task.id} on {host} {why}: queued again")
        self._save()

    # -- tasks --------------------------------------------------------------------------------

    def _poll(self) -> None:
        for host, slot in list(self.running.items()):
            try:
                status = slot.deployer.status(slot.job)
            except DeployError as error:
                self.display.warn(f"{error} (will ask again)")
                continue
            if not status.finished:
                continue
            del self.running[host]
            task = slot.task.id
            if status.succeeded and self._result(task).exists():
                self._finished(task, "done")
            else:
                self._outcome(task, f"{status.state} ({status.exit_code})")
                spec = self.app.malleable
                assert spec is not None
                attempts = self.record[task]["attempts"] + 1
                self.record[task]["attempts"] = attempts
                if attempts >= spec.max_attempts:
                    self.failed.add(task)
                    self._finished(task, "failed")
                    self.display.warn(f"task {task} failed {attempts} times: given up")
                else:
                    self.record[task]["state"] = "pending"
                    self.pending.appendleft(task)
                    self.display.warn(f"task {task} {status.state} ({status.exit_code}): again")
            self._next_task(slot.request, host)
        self._save()

    def _next_task(self, request: str, host: str) -> None:
        """Run the next task on ``host``, or give the host back when none fits there."""
        info = self.application.requests.get(request)
        spec = self.app.malleable
        assert spec is not None
        if info is None or info.state is not AppState.STARTED or host not in info.host_names:
            return
        assert info.end is not None
        if self.pending:
            deployer = self.deployer(info, (host,))
            limit = min(spec.task_time, time_limit(info.end, deployer))
            if limit >= spec.task_time:
                task = self.by_id[self.pending.popleft()]
                result = self._result(task.id)
                plan = self.plan(info, (host,), f"task-{task.id}", {
                    "COORM_TASK": task.id,
                    "COORM_TASK_PARAMS": json.dumps(dict(task.params)),
                    "COORM_TASK_RESULT": str(result),
                })  # fmt: skip
                try:
                    job = deployer.submit(plan, limit)
                except DeployError as error:
                    self.pending.appendleft(task.id)
                    self.display.warn(f"task {task.id} not submitted on {host}: {error}")
                else:
                    self.running[host] = Slot(request, task, deployer, job)
                    self.record[task.id]["state"] = "running"
                    self.record[task.id]["runs"].append(
                        {"job": job, "host": host, "request": request, "outcome": "running"}
                    )
                    return
        self._give_back(request, (host,))

    def _give_back(self, request: str, hosts: tuple[str, ...]) -> None:
        """Hosts of ``request`` that run nothing go back; the request ends with its last."""
        info = self.application.requests.get(request)
        if info is None or info.state is not AppState.STARTED:
            return
        going = [h for h in hosts if h in info.host_names and h not in self.running]
        if not going:
            return
        if len(going) >= len(info.host_names):
            self.bridge(lambda: self.application.done(request), request)
        else:
            self.bridge(lambda: self.application.shrink(request, going), request)

    def _finished(self, task: str, state: str) -> None:
        self.record[task]["state"] = state
        if state == "done":
            self._outcome(task, "done")
            self.display.note(f"task {task} done")

    def _outcome(self, task: str, outcome: str) -> None:
        """How the task's last run ended (``done``, ``preempted``, ``killed``...)."""
        runs = self.record[task]["runs"]
        if runs and runs[-1]["outcome"] == "running":
            runs[-1]["outcome"] = outcome

    def _cancel(self, slot: Slot) -> None:
        try:
            slot.deployer.cancel(slot.job)
        except DeployError as error:
            self.display.warn(str(error))

    def stop_jobs(self) -> None:
        for slot in self.running.values():
            self._cancel(slot)

    def _result(self, task: str) -> Path:
        return self.results / f"{task}.json"

    def _counts(self) -> str:
        states = [r["state"] for r in self.record.values()]
        return ", ".join(f"{states.count(s)} {s}" for s in ("done", "running", "pending", "failed"))

    def _save(self) -> None:
        write_whole(self.folder / "tasks.json", json.dumps(self.record, indent=2) + "\n")


__all__ = ["SweepRun"]
