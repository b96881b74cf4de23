"""One real run of ``coorm-sim validate``: a pack through the real daemon and real launchers.

The daemon (:mod:`.validate_daemon`) listens on TCP; the launcher processes
(:mod:`.validate_launchers`) reach it through the counting proxy (:mod:`.validate_wire`), so
every byte they exchange is counted. The workers are started and build their workload first;
once every one says ``ready`` the platform's clock is read, and each is told it and the platform
time of the workload's time 0 (a second of real time later), so that arrivals follow the workload's,
one platform second apart. The run ends when every worker has sent its last ``done``. Workers
and daemon are stopped by their PIDs whatever happens.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from coorm_bridge.sim.resources import HOSTS, paper_platform
from coorm_bridge.sim.scalability import FAIR_START, INTERVAL
from coorm_bridge.sim.validate_daemon import DaemonFailed, RealDaemon
from coorm_bridge.sim.validate_launchers import AppRecord, Go, WorkerResult, WorkerSpec
from coorm_bridge.sim.validate_wire import CountingProxy, Traffic
from coorm_bridge.sim.workload import Workload

#: Real seconds between telling the workers time 0 and time 0 itself.
LEAD_S = 1.0
#: Real seconds between two looks at the processes while the run goes on.
WATCH_S = 0.5


class RunFailed(RuntimeError):
    """A worker or the daemon failed, or the run outlived its deadline."""


@dataclass
class RealResult:
    """What the real run measured."""

    apps: list[AppRecord]
    traffic: Traffic
    daemon_cpu_s: float
    launchers_cpu_s: float
    """The worker processes' CPU time from time 0 to their last ``done``, summed."""
    real_s: float
    """Wall-clock seconds from time 0 to the last ``done``."""
    metrics: dict[str, float] = field(default_factory=dict)
    daemon_errors: list[str] = field(default_factory=list)

    @property
    def selectors_cpu_s(self) -> float:
        return sum(app.selector_cpu_s for app in self.apps)


@dataclass
class Pack:
    """The run's parameters."""

    workload: Workload
    trace: str
    pack: int
    clusters: int
    size: int
    speedup: float
    workers: int


def run_real(pack: Pack, deadline_s: float) -> RealResult:
    """The pack through a real daemon; RunFailed past ``deadline_s`` real seconds from time 0."""
    platform = paper_platform(pack.clusters, HOSTS)
    daemon = RealDaemon(platform, speedup=pack.speedup, interval=INTERVAL, fair_start=FAIR_START)
    with (
        daemon,
        CountingProxy("127.0.0.1", daemon.port) as proxy,
        tempfile.TemporaryDirectory(prefix="coorm-validate-workers-") as folder,
    ):
        workers = _Workers(pack, daemon, proxy.url, Path(folder))
        try:
            workers.start()
            cpu_before = daemon.cpu_seconds()
            began = time.monotonic()
            clock = daemon.clock()
            workers.go(Go(clock=clock, begin=clock.now() + LEAD_S * pack.speedup))
            workers.wait(daemon, began + LEAD_S + deadline_s)
            real_s = time.monotonic() - began - LEAD_S
            daemon_cpu = daemon.cpu_seconds() - cpu_before
            metrics = daemon.metrics()
            results = workers.results()
        finally:
            workers.stop()
        return RealResult(
            apps=sorted((a for r in results for a in r.apps), key=lambda a: a.arrival),
            traffic=proxy.traffic,
            daemon_cpu_s=daemon_cpu,
            launchers_cpu_s=sum(r.cpu_s for r in results),
            real_s=real_s,
            metrics=metrics,
            daemon_errors=daemon.errors(),
        )


class _Workers:
    """The launcher processes, each driving every ``workers``-th application of the pack."""

    def __init__(self, pack: Pack, daemon: RealDaemon, url: str, folder: Path) -> None:
        self.pack = pack
        self.daemon = daemon
        self.url = url
        self.folder = folder
        self.processes: list[subprocess.Popen[str]] = []
        self.outs: list[Path] = []

    def start(self) -> None:
        """Start them all, and wait for each one's ``ready``."""
        count = min(self.pack.workers, self.pack.size)
        for k in range(count):
            out = self.folder / f"worker-{k}.json"
            spec = WorkerSpec(
                url=self.url,
                token=self.daemon.token,
                workload=self.pack.workload,
                trace=self.pack.trace,
                pack=self.pack.pack,
                hosts=HOSTS,
                clusters=self.pack.clusters,
                size=self.pack.size,
                apps=list(range(k, self.pack.size, count)),
                out=out,
            )
            path = self.folder / f"worker-{k}.spec.json"
            path.write_text(spec.model_dump_json())
            with (self.folder / f"worker-{k}.log").open("w") as log:
                self.processes.append(
                    subprocess.Popen(  # noqa: S603 - this interpreter, our own module
                        [sys.executable, "-m", "coorm_bridge.sim.validate_launchers", str(path)],
                        cwd=self.folder,  # not a source tree, which would shadow the package
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=log,
                        text=True,
                    )
                )
            self.outs.append(out)
        for k, process in enumerate(self.processes):
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RunFailed(f"launcher worker {k} did not start: {self._log(k)}")

    def go(self, go: Go) -> None:
        """Tell every worker the platform's clock and the workload's time 0 on it."""
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write(go.model_dump_json() + "\n")
            process.stdin.close()

    def wait(self, daemon: RealDaemon, deadline: float) -> None:
        """Until every worker has exited (RunFailed if one failed, the daemon stopped, or the
        deadline passed)."""
        for k, process in enumerate(self.processes):
            while True:
                try:
                    status = process.wait(WATCH_S)
                    break
                except subprocess.TimeoutExpired:
                    try:
                        daemon.check()
                    except DaemonFailed as failed:
                        raise RunFailed(str(failed)) from None
                    if time.monotonic() > deadline:
                        raise RunFailed(
                            "the run outlived its deadline; launcher worker "
                            f"{k} still runs: {self._log(k)}\ndaemon: {daemon.tail()}"
                        ) from None
            if status != 0:
                raise RunFailed(f"launcher worker {k} failed ({status}): {self._log(k)}")

    def results(self) -> list[WorkerResult]:
        return [WorkerResult.model_validate_json(out.read_text()) for out in self.outs]

    def stop(self) -> None:
        """Kill (by PID) the workers still running, and reap them."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None and not stream.closed:
                    stream.close()

    def _log(self, k: int) -> str:
        lines = (self.folder / f"worker-{k}.log").read_text(errors="replace").splitlines()
        return "\n".join(lines[-20:]) or "(nothing on stderr)"
