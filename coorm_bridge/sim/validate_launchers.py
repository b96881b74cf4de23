"""The launchers of ``coorm-sim validate``: one process drives many applications over HTTP.

Each application is driven by ``coorm-launch``'s own loop (:class:`~coorm_bridge.launchers.
session.Launch`: subscribe, the event thread's long polls, :class:`~coorm_bridge.launchers.
selection.CurrentView` kept from change events, the selector run through :class:`~coorm_bridge.
launchers.selection.Selection` with its memo and ``worth_sending``, requests, ``done``), with two
differences only: nothing is deployed (the application's run time, :meth:`SimApp.run_time`,
elapses on the platform's clock before ``done``), and the selectors' ``now`` is the platform's
accelerated time rather than the host's.

200 interpreters would not fit a small machine's memory, so one worker process runs a share of
the pack, one thread per application (plus its event thread), each started at its arrival. It
is started as ``python -m coorm_bridge.sim.validate_launchers SPEC.json``, says ``ready`` on
stdout once its workload is built, reads the platform's clock and the workload's time 0 on it
from stdin (:class:`Go`), and writes what it saw to the spec's ``out`` file as JSON
(:class:`WorkerResult`).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field

from coorm_bridge.core.messages import EventBase, StartEvent
from coorm_bridge.core.model import ClusterInfo, Interconnect, Request
from coorm_bridge.launchers.app import AppSpec, Component, SelectorSpec
from coorm_bridge.launchers.client import BridgeClient
from coorm_bridge.launchers.selection import CurrentView, Selection
from coorm_bridge.launchers.selectors.base import Selector
from coorm_bridge.launchers.session import EXIT_OK, Launch
from coorm_bridge.sim.workload import Kind, SimApp, Workload, workload

if TYPE_CHECKING:
    from coorm_bridge.core.profile import Profile


class PlatformClock(BaseModel):
    """The daemon's platform time as read from here: ``platform`` at wall-clock ``wall`` (Unix
    seconds, shared by every process of the host), running ``speedup`` times as fast."""

    speedup: Annotated[float, Field(gt=0)]
    platform: float
    wall: float

    def now(self) -> float:
        return self.platform + (time.time() - self.wall) * self.speedup

    def sleep_until(self, moment: float) -> None:
        """Return once the platform's time has reached ``moment``."""
        while (left := moment - self.now()) > 0:
            time.sleep(left / self.speedup)


class WorkerSpec(BaseModel):
    """What one worker drives: the pack (rebuilt here: it is deterministic) and its share."""

    url: str
    token: str
    workload: Workload
    trace: str
    pack: int
    hosts: int
    clusters: int
    size: int
    apps: list[int]
    """Indices in the pack of the applications this worker drives."""
    out: Path
    wait: float = 20.0
    """Seconds a long poll may wait (real time), as ``coorm-launch``'s."""


class Go(BaseModel):
    """What a ready worker is told: the platform's clock, and the workload's time 0 on it."""

    clock: PlatformClock
    begin: float


class AppRecord(BaseModel):
    """What one application's launcher saw, in platform seconds from the workload's time 0."""

    id: str
    arrival: float
    subscribed: float | None = None
    start: float | None = None
    end: float | None = None
    """When it sent ``done``."""
    promised: float | None = None
    """The estimated start it was told last before its start."""
    status: int | None = None
    requests: int = 0
    computed: int = 0
    selector_cpu_s: float = 0.0
    """CPU time its selector took (thread time, the runs the memo did not answer)."""
    event_lags: list[float] = Field(default_factory=list)
    """Per event: platform seconds from the pass that made it to its launcher holding it."""
    warnings: list[str] = Field(default_factory=list)


class WorkerResult(BaseModel):
    apps: list[AppRecord]
    cpu_s: float
    """This process's CPU time from the workload's time 0 to its last ``done``."""


class Quiet:
    """The launcher's display, silent: warnings are kept in the application's record."""

    def __init__(self, record: AppRecord) -> None:
        self.record = record

    def status(
        self, state: str, request: Request | None, estimated: int | None, detail: str = ""
    ) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def warn(self, text: str) -> None:
        self.record.warnings.append(text)

    def tick(self) -> None:
        pass

    def page(self, session: str, link: str) -> None:
        pass

    def close(self) -> None:
        pass


class TimedSelector:
    """The application's selector, its CPU time added to the record (memo hits cost none)."""

    def __init__(self, selector: Selector, record: AppRecord) -> None:
        self.selector = selector
        self.record = record
        self.time_invariant = bool(getattr(selector, "time_invariant", False))

    def select(
        self,
        clusters: Mapping[str, ClusterInfo],
        interconnect: Interconnect,
        view: Mapping[str, Profile],
        now: int,
    ) -> Request | None:
        began = time.thread_time()
        try:
            return self.selector.select(clusters, interconnect, view, now)
        finally:
            self.record.selector_cpu_s += time.thread_time() - began


class CountingClient(BridgeClient):
    """The launchers' client, counting the requests sent for the record."""

    record: AppRecord | None = None

    def request(
        self,
        session: str,
        request: Request | None = None,
        *,
        nodes: Mapping[str, int] | None = None,
        duration: int | None = None,
    ) -> Any:
        if self.record is not None:
            self.record.requests += 1
        return super().request(session, request, nodes=nodes, duration=duration)


class SimLaunch(Launch):
    """``coorm-launch``'s loop for a simulated application: its "deployment" is waiting for its
    run time on the platform's clock, then ``done``."""

    def __init__(
        self, sim: SimApp, platform: PlatformClock, record: AppRecord, **rest: Any
    ) -> None:
        super().__init__(clock=platform.now, **rest)
        self.sim = sim
        self.platform = platform
        self.record = record

    def _deploy(self, bridge: Any, view: CurrentView, start: StartEvent) -> int:
        assert self.request is not None
        self.record.start = float(start.time)
        self.record.promised = None if self.estimated is None else float(self.estimated)
        self.platform.sleep_until(start.time + self.sim.run_time(self.request.duration))
        self.record.end = self.platform.now()
        self._done(bridge)
        return EXIT_OK


def app_spec(sim: SimApp, clusters: int) -> AppSpec:
    """An application file for ``sim``: its selector's name and the default ``[selector]``
    settings (``min_gain`` among them), one component that may span every cluster (a CEM
    application's request may)."""
    selector = "cem" if sim.kind is Kind.CEM else "moldable"
    component = Component(name="solver", command=("true",), max_clusters=clusters)
    return AppSpec(name=sim.id, selector=SelectorSpec(name=selector), component=(component,))


class LagQueue(queue.Queue[Any]):
    """The launcher's event queue, noting each event's lag as the event thread puts it."""

    def __init__(self, platform: PlatformClock, record: AppRecord) -> None:
        super().__init__()
        self.platform = platform
        self.record = record

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if isinstance(item, EventBase):
            self.record.event_lags.append(self.platform.now() - item.time)
        super().put(item, block, timeout)


def drive(spec: WorkerSpec, go: Go, sim: SimApp, record: AppRecord) -> None:
    """One application from its arrival to its ``done``."""
    platform, begin = go.clock, go.begin

    def connect(**options: Any) -> CountingClient:
        client = CountingClient(spec.url, token=spec.token, **options)
        client.record = record
        return client

    app = app_spec(sim, spec.clusters)
    launch = SimLaunch(
        sim,
        platform,
        record,
        app=app,
        selection=Selection(TimedSelector(sim.selector, record), app),
        connect=connect,
        display=Quiet(record),
        wait=spec.wait,
        events=LagQueue(platform, record),
    )
    record.subscribed = platform.now() - begin
    try:
        record.status = launch.run()
    except Exception as error:  # told in the result, the other applications go on
        record.warnings.append(f"{type(error).__name__}: {error}")
    finally:
        record.computed = launch.selection.computed
        for name in ("start", "end", "promised"):
            value = getattr(record, name)
            if value is not None:
                setattr(record, name, value - begin)


def run(spec: WorkerSpec, go: Go) -> WorkerResult:
    """Every application of the share, each started at its arrival; their records."""
    pack = workload(spec.workload, spec.trace, spec.pack, spec.hosts, spec.size)
    mine = [pack[i] for i in spec.apps]
    records = [AppRecord(id=sim.id, arrival=float(sim.arrival)) for sim in mine]
    began = time.process_time()
    threads = []
    for sim, record in zip(mine, records, strict=True):
        go.clock.sleep_until(go.begin + sim.arrival)
        thread = threading.Thread(
            target=drive, args=(spec, go, sim, record), name=sim.id, daemon=True
        )
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return WorkerResult(apps=records, cpu_s=time.process_time() - began)


def main(argv: list[str]) -> int:
    spec = WorkerSpec.model_validate_json(Path(argv[0]).read_text())
    workload(spec.workload, spec.trace, spec.pack, spec.hosts, spec.size)  # built before ready
    print("ready", flush=True)
    result = run(spec, Go.model_validate_json(sys.stdin.readline()))
    spec.out.write_text(result.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
