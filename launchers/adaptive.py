"""What the launcher of an evolving or a malleable application does whatever its kind.

Both kinds (:mod:`.kinds`) hold an :class:`~coorm_bridge.launchers.application.Application`
and run many jobs, each on the hosts of one request: an evolving code's steps inside its
pre-allocation, a sweep's tasks on preemptible hosts. This module gives them the same pieces:

- the events, read by a thread of their own (the client's ``follow`` rides out a lost
  connection or a restarted daemon) and applied to the application in the main thread
  (:meth:`AdaptiveRun.notices`), at most a second apart so that jobs are watched meanwhile;
- a deployer for a job on some hosts of a request: on the mock the bridge takes it into the
  request (``/v2/.../requests/{id}/jobs``), elsewhere the cluster's deployer submits it into the
  request's reservation (a step inside a pre-allocation goes into the pre-allocation's) or, for
  a preemptible request, outside any reservation on exactly those hosts;
- a time limit that ends with the request (or a preemption's deadline);
- the live line: held, used and preemptible hosts.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from coorm_bridge.core.messages import Event
from coorm_bridge.core.model import ClusterInfo, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import RequestType
from coorm_bridge.launchers.app import AppSpec
from coorm_bridge.launchers.application import Application, Notice
from coorm_bridge.launchers.client import BridgeError, BridgeUnreachable
from coorm_bridge.launchers.deploy import Deployer, DeployError, deployer_for
from coorm_bridge.launchers.display import Display, session_page
from coorm_bridge.launchers.evolving import EvolvingClient
from coorm_bridge.launchers.rundir import DEFAULT_ROOT, JobPlan, command_on
from coorm_bridge.launchers.session import Interrupts, Reconnecting, feed
from coorm_bridge.protocol import JobAnswer, JobInfo, JobRequest
from coorm_bridge.protocol_v2 import RequestInfo, RequestJobRequest

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130
T = TypeVar("T")


class RunOver(Exception):
    """The application cannot go on: ``status`` is the exit status, the message why."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


class RequestFrontEnd:
    """The bridge's job calls for one request's hosts, shaped as the mock deployer's."""

    def __init__(self, client: EvolvingClient, request: str, hosts: Sequence[str]) -> None:
        self.client, self.request, self.hosts = client, request, tuple(hosts)

    def submit_job(self, session: str, job: JobRequest) -> JobAnswer:
        body = RequestJobRequest(**job.model_dump(), hosts=self.hosts)
        return self.client.submit_request_job(session, self.request, body)

    def jobs(self, session: str) -> list[JobInfo]:
        return self.client.request_jobs(session, self.request)

    def cancel_job(self, session: str, job: str) -> JobInfo:
        return self.client.cancel_request_job(session, self.request, job)

    def close(self) -> None:
        """The client is the run's, closed at its end."""


def time_limit(end: int, deployer: Deployer, now: float | None = None) -> int:
    """Seconds of limit for a job submitted now that must end by ``end``: what is left once
    its batch system started it, in its whole units (0: none fits)."""
    now = time.time() if now is None else now
    return max(0, math.floor((end - now - deployer.slack) / deployer.unit)) * deployer.unit


@dataclass
class AdaptiveRun(ABC):
    """The pieces both kinds share; a subclass's :meth:`body` is the application's logic."""

    app: AppSpec
    connect: Callable[..., EvolvingClient]
    display: Display
    interrupts: Interrupts = field(default_factory=Interrupts)
    run_root: Path | None = None
    wait: float = 20.0
    max_retry: float = 5.0
    events: queue.Queue[Event | Reconnecting | BaseException] = field(default_factory=queue.Queue)
    folder: Path = Path()
    cluster: str = ""
    info: ClusterInfo | None = None

    def run(self) -> int:
        """The whole run; its exit status."""
        client = self.connect()
        try:
            application = Application.subscribe(client, self.app.subscription_filter, self.app.name)
        except BridgeError:
            client.close()
            raise
        self.application = application
        self._deployers: dict[str, Deployer] = {}
        status = EXIT_FAILED
        try:
            status = self._run(client)
        except RunOver as over:
            self.display.warn(str(over))
            status = over.status
        except (BridgeError, DeployError, OSError) as error:
            self.display.warn(f"{error}: ending the application")
        finally:
            self.stop_jobs()
            self._end()
            for deployer in self._deployers.values():
                deployer.close()
            client.close()
            self.display.close()
        return status

    def _run(self, client: EvolvingClient) -> int:
        session = self.application.session
        self.folder = (self.run_root or self.app.deployment.run_root or DEFAULT_ROOT).absolute()
        self.folder = self.folder / session
        self.folder.mkdir(parents=True, exist_ok=True)
        clusters = self.application.clusters
        self.cluster = self._cluster(clusters)
        self.info = clusters[self.cluster]
        self.display.note(
            f"session {session} at the bridge ({self.app.kind} on {self.cluster}); "
            f"run directory {self.folder}"
        )
        link = session_page(client.url, session)
        if link is not None:
            self.display.page(session, link)
        threading.Thread(target=self._follow, name="coorm-events", daemon=True).start()
        return self.body()

    @abstractmethod
    def body(self) -> int:
        """The application's own logic (each kind's); its exit status."""

    @abstractmethod
    def stop_jobs(self) -> None:
        """Cancel what still runs (the run failed or was interrupted)."""

    # -- the bridge -------------------------------------------------------------------------

    def bridge(self, call: Callable[[], T], request: str | None = None) -> T:
        """``call()``, tried again while the bridge does not answer (a restart), as the v1 loop
        does. A call that reached the bridge before the answer was lost is not made twice:
        sending request ``request`` again is refused as a repeat, and giving back hosts already
        given back as unknown hosts; then what the bridge has of the request is the answer."""
        delay, lost = 1.0, False
        while True:
            try:
                return call()
            except BridgeError as error:
                if lost and request is not None and error.status in (409, 422):
                    self.application.refresh()
                    if request in self.application.requests:
                        return self.application.requests[request]  # type: ignore[return-value]
                retry = isinstance(error, BridgeUnreachable) or error.status >= 500
                if not retry or self.interrupts.requested.is_set():
                    raise
                self.display.warn(
                    f"the bridge does not answer ({error.detail}); again in {delay:g} s"
                )
                lost = True
                time.sleep(delay)
                delay = min(delay * 2, self.max_retry)

    # -- events -------------------------------------------------------------------------------

    def notices(self, timeout: float = 1.0) -> Iterator[Notice]:
        """The notices of the events that came within ``timeout`` s (applied in order);
        raises :class:`RunOver` on a request from the user to stop or the session's end."""
        deadline = time.monotonic() + timeout
        while True:
            if self.interrupts.requested.is_set():
                raise RunOver(EXIT_INTERRUPTED, "interrupted: stopping the jobs")
            try:
                item = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            if isinstance(item, Reconnecting):
                self.display.warn(f"the bridge does not answer; trying again in {item.delay:g} s")
                continue
            if isinstance(item, BaseException):
                raise RunOver(EXIT_FAILED, f"the bridge stopped giving the events: {item}")
            notice = self.bridge(lambda: self.application.apply(item))  # noqa: B023
            if notice is not None:
                yield notice

    def _follow(self) -> None:
        session = self.application.session
        feed(self.events, self.connect, session, wait=self.wait, max_retry=self.max_retry)

    # -- jobs ---------------------------------------------------------------------------------

    def deployer(self, request: RequestInfo, hosts: Sequence[str]) -> Deployer:
        """Who submits a job on ``hosts`` of ``request`` (the mock: one per job)."""
        assert self.info is not None
        submission = self.info.submission
        if submission is not None and submission.kind == "mock":
            from coorm_bridge.launchers.deploy.mock import MockDeployer  # noqa: PLC0415

            front = RequestFrontEnd(self.application.client, request.request, hosts)
            return MockDeployer(self.cluster, front, self.application.session)
        if self.cluster not in self._deployers:
            self._deployers[self.cluster] = deployer_for(self.info, self.connect, "")
        return self._deployers[self.cluster]

    def reservation(self, request: RequestInfo) -> str | None:
        """Where a job of ``request`` goes: its placeholder's reservation, its
        pre-allocation's for a request started inside one, none for a preemptible one."""
        if request.inside is not None:
            return self.application.requests[request.inside].reservation
        return request.reservation

    def plan(
        self, request: RequestInfo, hosts: Sequence[str], name: str, environment: dict[str, str]
    ) -> JobPlan:
        """A job of the component on ``hosts`` of ``request``, its files named ``name``."""
        assert self.info is not None
        component = self.app.components[0]
        kind = self.info.submission.kind if self.info.submission is not None else "none"
        per_host = component.processes_per_host or self.info.cores_per_host
        argv = command_on(
            self.app, component, kind, hosts, per_host=per_host,
            hostfile=self.folder / f"{name}.hosts",
        )  # fmt: skip
        return JobPlan(
            cluster=self.cluster,
            component=component.name,
            hosts=tuple(hosts),
            reservation=self.reservation(request),
            argv=argv,
            environment={
                **component.environment,
                **environment,
                "COORM_COMPONENT": component.name,
                "COORM_CLUSTER": self.cluster,
                "COORM_HOSTFILE": str(self.folder / f"{name}.hosts"),
                "COORM_SESSION": self.application.session,
                "COORM_RUN_DIR": str(self.folder),
            },
            workdir=self.folder,
            stdout=self.folder / f"{name}.out",
            stderr=self.folder / f"{name}.err",
        )

    # -- what the user sees -------------------------------------------------------------------

    def holdings(self) -> str:
        """Held (pre-allocations and requests with a placeholder), used (started requests
        inside or outside them) and preemptible hosts, now."""
        held = used = preemptible = 0
        for request in self.application.requests.values():
            if request.state is not AppState.STARTED:
                continue
            hosts = len(request.host_names)
            if request.type is RequestType.PRE_ALLOCATION:
                held += hosts
            elif request.type is RequestType.PREEMPTIBLE:
                preemptible += hosts
            else:
                used += hosts
                held += 0 if request.inside is not None else hosts
        return f"held {held} · used {used} · preemptible {preemptible}"

    def show(
        self,
        state: str,
        what: str,
        asked: tuple[int, int] | None = None,
        estimated: int | None = None,
    ) -> None:
        """The live line: ``state`` (``running``, ``waiting``...), what it is about, the
        request waited for (hosts, duration) and its estimated start, the holdings."""
        request = (
            None if asked is None else Request(nodes={self.cluster: asked[0]}, duration=asked[1])
        )
        self.display.status(state, request, estimated, f"{what} · {self.holdings()}")

    # -- the end ------------------------------------------------------------------------------

    def _cluster(self, clusters: dict[str, ClusterInfo]) -> str:
        spec: Any = self.app.evolving or self.app.malleable
        component = self.app.components[0]
        wanted = spec.cluster or (component.clusters[0] if component.clusters else None)
        if wanted is None:
            if not clusters:
                raise RunOver(EXIT_FAILED, "the bridge shows no cluster: nothing to run on")
            wanted = sorted(clusters)[0]
        if wanted not in clusters:
            raise RunOver(
                EXIT_FAILED,
                f"cluster {wanted} is not one the bridge shows this application "
                f"({', '.join(sorted(clusters)) or 'none'})",
            )
        return wanted

    def _end(self) -> None:
        try:
            self.bridge(self.application.end)
            self.display.note(f"done sent: session {self.application.session} ends")
        except BridgeError as error:
            if error.status != 409:  # already over
                self.display.warn(f"could not end the session: {error}")


__all__ = ["AdaptiveRun", "RequestFrontEnd", "RunOver", "time_limit"]
