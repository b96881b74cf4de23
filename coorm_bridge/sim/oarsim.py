"""The paper's baseline (§IV-A, "OAR-SIM"): a moldable-job batch scheduler given every
configuration of each job, that picks the one ending first.

As OAR does, each job is submitted once with its list of (cluster, hosts, walltime)
configurations, and every scheduling pass rebuilds the plan: running jobs first, then the
waiting ones in submission order (conservative backfilling), each placed in the configuration
that completes first on what the jobs before it left. A rigid job lists one configuration per
cluster, a moldable one every host count of every cluster (``n_C x n_H``): those are the
configurations it computes, per job and pass. The choice itself is made with the ``moldable``
selector, which is exact (it finds the configuration the enumeration would) but only evaluates
the profile's levels, so the CPU time measured here is a lower bound of an enumerating
scheduler's. Passes run at most once per ``interval``, on arrivals, ends and planned starts,
like CooRM's, so that the two produce comparable schedules.

Messages: each submission carries its configuration list as JSON; the answer, the start (the
hosts per cluster) and the end are counted like CooRM's.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from time import process_time

from coorm_bridge.batchsim import PlatformSpec
from coorm_bridge.core.model import Request
from coorm_bridge.core.profile import Profile
from coorm_bridge.launchers.selectors.moldable import Moldable
from coorm_bridge.sim.engine import AppLife
from coorm_bridge.sim.resources import infos, interconnect
from coorm_bridge.sim.workload import Kind, SimApp

_END, _ARRIVAL = range(2)


def _json(value: object) -> str:
    """As compact as the daemon's own JSON."""
    return json.dumps(value, separators=(",", ":"))


@dataclass
class BaselineResult:
    outcomes: list[AppLife]
    computed_configurations: int
    cpu_schedule_s: float
    messages: int
    message_bytes: int
    passes: int


class OarSim:
    """One run of the baseline; see the module docstring."""

    def __init__(self, platform: PlatformSpec, apps: list[SimApp], interval: int = 1) -> None:
        if any(app.kind is Kind.CEM for app in apps):
            raise ValueError("the baseline takes rigid and moldable jobs only (W0)")
        self.clusters = infos(platform)
        self.interconnect = interconnect(platform)
        self.names = {spec.name: spec.host_names() for spec in platform.clusters}
        self.apps = {app.id: app for app in apps}
        self.interval = interval
        self.outcomes = {app.id: AppLife(app.id, app.kind.value, app.arrival) for app in apps}
        self.waiting: list[str] = []
        self.listed: dict[str, int] = {}
        """Configurations each job listed: what the scheduler computes for it at every pass."""
        self.running: dict[str, tuple[int, Request]] = {}
        self.events: list[tuple[int, int, str]] = [(a.arrival, _ARRIVAL, a.id) for a in apps]
        heapq.heapify(self.events)
        self.wants: list[int] = []
        self.computed = 0
        self.cpu = 0.0
        self.messages = 0
        self.bytes = 0
        self.passes = 0

    def run(self) -> BaselineResult:
        last: int | None = None
        while self.events or self.wants:
            event_at = self.events[0][0] if self.events else None
            pass_at = None
            if self.wants:
                pass_at = (
                    self.wants[0] if last is None else max(self.wants[0], last + self.interval)
                )
            if event_at is not None and (pass_at is None or event_at <= pass_at):
                now, kind, app_id = heapq.heappop(self.events)
                if kind == _ARRIVAL:
                    self._submit(app_id)
                else:
                    del self.running[app_id]
                    self.outcomes[app_id].end = now
                    self._count(_json({"job": app_id, "state": "terminated"}))
                heapq.heappush(self.wants, now)
            else:
                assert pass_at is not None
                while self.wants and self.wants[0] <= pass_at:
                    heapq.heappop(self.wants)
                last = pass_at
                began = process_time()
                self._pass(pass_at)
                self.cpu += process_time() - began
        return BaselineResult(
            outcomes=list(self.outcomes.values()),
            computed_configurations=self.computed,
            cpu_schedule_s=self.cpu,
            messages=self.messages,
            message_bytes=self.bytes,
            passes=self.passes,
        )

    def configurations(self, app: SimApp) -> list[tuple[str, int, int]]:
        """What the job lists at submission: (cluster, hosts, walltime) for each choice."""
        selector = app.selector
        assert isinstance(selector, Moldable)
        low = selector.params.min_hosts
        listed = []
        for name, info in self.clusters.items():
            high = min(info.hosts, selector.params.max_hosts or info.hosts)
            for hosts in range(low, high + 1):
                duration = selector.duration(info, hosts)
                if duration is not None:
                    listed.append((name, hosts, duration))
        return listed

    def _submit(self, app_id: str) -> None:
        listed = self.configurations(self.apps[app_id])
        self.listed[app_id] = len(listed)
        body = [{"cluster": c, "hosts": h, "walltime": w} for c, h, w in listed]
        self._count(_json({"name": app_id, "moldable": body}), _json({"job": app_id}))
        self.waiting.append(app_id)

    def _pass(self, now: int) -> None:
        self.passes += 1
        state = {name: Profile.constant(info.hosts) for name, info in self.clusters.items()}
        for start, request in self.running.values():
            for cluster, hosts in request.nodes.items():
                state[cluster] = state[cluster].add(-hosts, start, start + request.duration)
        started: list[str] = []
        planned: list[int] = []
        for app_id in self.waiting:
            app = self.apps[app_id]
            self.computed += self.listed[app_id]
            chosen = app.selector.select(self.clusters, self.interconnect, state, now)
            if chosen is None:
                continue
            ((cluster, hosts),) = chosen.nodes.items()
            begins = state[cluster].earliest_fit(hosts, chosen.duration, now)
            if begins is None:
                continue
            state[cluster] = state[cluster].add(-hosts, begins, begins + chosen.duration)
            if begins <= now:
                started.append(app_id)
                self._start(app_id, chosen, now)
            else:
                planned.append(begins)
        gone = set(started)
        self.waiting = [a for a in self.waiting if a not in gone]
        if planned:
            heapq.heappush(self.wants, min(planned))

    def _start(self, app_id: str, request: Request, now: int) -> None:
        app = self.apps[app_id]
        self.running[app_id] = (now, request)
        outcome = self.outcomes[app_id]
        outcome.start, outcome.request, outcome.requests = now, request, 1
        hosts = {c: self.names[c][:n] for c, n in request.nodes.items()}
        self._count(_json({"job": app_id, "state": "running", "hosts": hosts}))
        heapq.heappush(self.events, (now + app.run_time(request.duration), _END, app_id))

    def _count(self, *bodies: str) -> None:
        self.messages += 1
        self.bytes += sum(len(body.encode()) for body in bodies)
