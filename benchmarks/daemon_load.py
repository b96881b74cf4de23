"""Daemon under load: event delivery to launchers while thousands of them hold long polls open.

A real daemon (``coorm-bridge serve``, TCP on loopback, a static mock platform) and N launchers
(h11 over asyncio streams: ``--local`` in the driver's process, the others in processes of
``--per-process`` each, each process from a loopback address of its own), each on its own
keep-alive connection holding ``GET .../events?after=K&wait=30`` open. At random (Poisson)
moments a driver withdraws a random idle launcher's session (the DELETE
commits the ``ended`` event, then answers); it subscribes again (untimed), so N long polls stay
open and passes run meanwhile. ``p99_ms``/``p50_ms``/``max_ms``: from the DELETE's answer until
the long poll handed the event over (0 if first); ``e2e_p99_ms``: from sending the DELETE (which
waits for a pass in progress). Last, the oldest session asks for a whole cluster, alpha, so that
one pass changes the views of ``burst_views`` launchers (``--burst-views``: those watching alpha
and beta; the others watch gamma, and their views do not change): ``burst_ms`` from the first of
them told to the last, ``start_ms`` from the PUT to its ``start``. Then SIGTERM while every
launcher holds its long poll: ``stop_s`` until the daemon exited, ``stop_answered`` how many of
those polls it answered (the others got an error).
Before that, a queue: ``--queue`` launchers ask for a quarter of ``beta`` each, one after the
other (four run, the others wait), then each waiting one asks again for half as much, for as
long: every such change moves the estimates of those behind it, and the placeholders the bridge
holds for them (the first waiting one wherever it starts, the others within the horizon).
``idle_cpu_pct``: the daemon's CPU (percent of a core) over 10 s with every launcher waiting
and nothing changing, their long polls coming back every 30 s. ``reservation_calls_per_app``:
the bridge's reservation creates, updates and deletes (``/metrics``) over the whole run, per
queued application. ``processes``: the launchers' and
the driver's; ``kb_per_waiting_launcher``: the daemon's resident memory with every launcher
waiting, less before the first came, per launcher; ``daemon_cpu_s`` and ``clients_cpu_s``: the
CPU time of the daemon (until SIGTERM) and of every launcher process (they share the machine).
Then ``errors`` (any: exit status 1), ``seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import h11

PLATFORM = (
    '[[cluster]]\nname = "alpha"\nhosts = 256\n[[cluster]]\nname = "beta"\nhosts = 128\n'
    '[[cluster]]\nname = "gamma"\nhosts = 128\n'
)
#: What a launcher watches: the burst's request on alpha and the queue's on beta change the
#: views of ``WATCHING_ALPHA`` launchers only, those of ``ELSEWHERE`` not at all.
WATCHING_ALPHA, ELSEWHERE = ("alpha", "beta"), ("gamma",)
CONFIG = """policy = {{ interval = 1.0 }}
adapter = {{ kind = "mock", platform = "platform.toml" }}
[bridge]
socket = "{dir}/bridge.sock"
state_dir = "{dir}/state"
tcp = {{ host = "127.0.0.1", port = {port} }}
tokens = {{ "{token}" = "bench" }}
# Thousands of launchers, from a few loopback addresses (one per process, as from a few hosts).
connections = {{ max_total = {total}, max_per_peer = {per_peer} }}
[limits]
held_share = 1.0  # every launcher is user "bench": its last request takes a whole cluster
"""


#: Seconds the daemon's CPU is measured with every launcher waiting and nothing changing.
IDLE_S = 10


class Http:
    """One launcher's keep-alive connection from the loopback address ``source`` (each process
    of launchers has its own): h11 over asyncio streams, a tenth of httpx's CPU per call, so
    that the launchers, which share the machine, take as little of it as they can from the
    daemon, which is what is measured."""

    def __init__(self, port: int, token: str, source: str = "127.0.0.1") -> None:
        self.port, self.source = port, source
        self.headers = [("host", "127.0.0.1"), ("authorization", f"Bearer {token}")]
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.conn = h11.Connection(h11.CLIENT)

    async def call(self, method: str, path: str, body: object = None, expect: int = 200) -> Any:
        status, content = await self.request(method, f"/v1{path}", body)
        if status != expect:
            raise RuntimeError(f"{method} {path}: HTTP {status} {content[:200]!r}")
        return json.loads(content) if content else None

    async def request(self, method: str, target: str, body: object = None) -> tuple[int, bytes]:
        if self.streams is None or self.conn.our_state is h11.MUST_CLOSE:
            await self.close()
            self.streams = await asyncio.open_connection(
                "127.0.0.1", self.port, local_addr=(self.source, 0)
            )
            self.conn = h11.Connection(h11.CLIENT)
        reader, writer = self.streams
        data = b"" if body is None else json.dumps(body).encode()
        headers = [*self.headers, ("content-length", str(len(data)))]
        if data:
            headers.append(("content-type", "application/json"))
        out = self.conn.send(h11.Request(method=method, target=target, headers=headers))
        out += self.conn.send(h11.Data(data=data)) if data else b""
        writer.write(out + self.conn.send(h11.EndOfMessage()))
        status, chunks = 0, []
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                received = await reader.read(65536)
                if not received:
                    raise ConnectionError("the daemon closed the connection")
                self.conn.receive_data(received)
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("the daemon closed the connection")
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
        return status, b"".join(chunks)

    async def stream(self, target: str) -> Any:
        """``GET target`` as an event stream: yields (number, type) of each event as it comes,
        until the daemon ends the stream (then the connection is closed)."""
        await self.close()  # a connection of its own, as a launcher's event thread has
        self.streams = await asyncio.open_connection(
            "127.0.0.1", self.port, local_addr=(self.source, 0)
        )
        self.conn = h11.Connection(h11.CLIENT)
        reader, writer = self.streams
        headers = [*self.headers, ("accept", "text/event-stream")]
        writer.write(self.conn.send(h11.Request(method="GET", target=target, headers=headers)))
        writer.write(self.conn.send(h11.EndOfMessage()))
        text = ""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                received = await reader.read(65536)
                if not received:
                    raise ConnectionError("the daemon closed the connection")
                self.conn.receive_data(received)
            elif isinstance(event, h11.Response):
                if event.status_code != 200:
                    raise RuntimeError(f"GET {target}: HTTP {event.status_code}")
            elif isinstance(event, h11.Data):
                text += bytes(event.data).decode()
                blocks = text.split("\n\n")
                text = blocks.pop()  # what is not whole yet
                for block in blocks:
                    if block.startswith("id: "):
                        head, _, data = block.partition("\ndata: ")
                        yield int(head[4:]), json.loads(data)["type"]
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                await self.close()
                return

    async def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


class Launcher:
    """Subscribes, then long-polls its session's events until it ends; then subscribes again.
    Once ``stopping`` is set, a daemon that does not answer ends it."""

    def __init__(
        self,
        http: Http,
        stopping: asyncio.Event,
        clusters: tuple[str, ...] = WATCHING_ALPHA,
        *,
        stream: bool = True,
    ) -> None:
        self.http, self.session, self.after, self.picked = http, "", 0, False
        self.stream = stream
        self.clusters = clusters
        self.stopping = stopping
        self.answered_at_stop = False
        self.told: dict[int, float] = {}  # event number -> when it came
        self.kinds: dict[str, int] = {}  # event type -> its last number
        self.ended: dict[str, float] = {}  # session -> when its ended event came
        self.polling_since: float | None = None  # while an idle long poll is out

    async def run(self) -> None:
        while True:
            body = {"name": "bench", "filter": {"clusters": list(self.clusters)}}
            answer = await self.http.call("POST", "/sessions", body, expect=201)
            self.session, self.after, self.picked = answer["session"], 0, False
            self.told, self.kinds = {}, {}
            if self.stream:
                if await self.follow():
                    return
                self.ended[self.session] = self.told[self.kinds["ended"]]
                continue
            while "ended" not in self.kinds:
                self.polling_since = time.perf_counter() if self.after else None  # has a view
                path = f"/sessions/{self.session}/events?after={self.after}&wait=30"
                try:
                    answer = await self.http.call("GET", path)
                except (OSError, h11.ProtocolError):
                    if self.stopping.is_set():  # polled again: the daemon is gone
                        return
                    raise
                now, self.polling_since = time.perf_counter(), None
                if self.stopping.is_set():
                    self.answered_at_stop = True
                for event in answer["events"]:
                    self.after = event["seq"]
                    self.told[self.after], self.kinds[event["type"]] = now, self.after
            self.ended[self.session] = self.told[self.kinds["ended"]]

    async def follow(self) -> bool:
        """The session's stream until its ``ended`` event (False), or until the daemon's stop
        ended it (True)."""
        self.polling_since = None
        try:
            async for seq, kind in self.http.stream(f"/v1/sessions/{self.session}/events"):
                now = time.perf_counter()
                self.after, self.told[seq], self.kinds[kind] = seq, now, seq
                if kind == "ended":
                    await self.http.close()
                    return False
                self.polling_since = now  # it has its view and waits
        except (OSError, h11.ProtocolError):
            if self.stopping.is_set():
                return True
            raise
        if self.stopping.is_set():  # the stop ended the stream: it found the daemon gone
            self.answered_at_stop = True
            return True
        raise ConnectionError("the daemon ended a stream before its stop")


async def crowd(  # noqa: PLR0917 - a process's share of the run
    port: int, token: str, count: int, alpha: int, source: str, pipe: Connection, stream: bool
) -> None:
    """``count`` launchers in this process (the first ``alpha`` watching alpha), told what to do
    by the driver over ``pipe``: ``waiting`` (how many hold a long poll with their view),
    ``mark`` (remember each one's last event), ``told`` (when each of those watching alpha got
    an event after the mark; None: not yet), ``stopping``
    (a daemon that stops ends them), ``end`` (how many of their polls the stop answered, and
    this process's CPU seconds). Times are ``time.perf_counter``: the system's monotonic
    clock, the same in every process."""
    stopping = asyncio.Event()
    launchers = [
        Launcher(
            Http(port, token, source),
            stopping,
            WATCHING_ALPHA if k < alpha else ELSEWHERE,
            stream=stream,
        )
        for k in range(count)
    ]
    tasks = [asyncio.create_task(x.run()) for x in launchers]
    marks: list[int] = []
    while True:
        command = await asyncio.to_thread(pipe.recv)
        if command == "waiting":  # or failed: counted among the errors at the end
            pipe.send(
                sum(1 for x, t in zip(launchers, tasks, strict=True) if x.polling_since or t.done())
            )
        elif command == "mark":
            marks = [x.after for x in launchers]
            pipe.send(None)
        elif command == "told":
            pipe.send([
                min((t for seq, t in x.told.items() if seq > mark), default=None)
                for x, mark in zip(launchers[:alpha], marks, strict=False)
            ])  # fmt: skip
        elif command == "stopping":
            stopping.set()
            pipe.send(None)
        else:  # "end"
            await asyncio.wait(tasks, timeout=60)
            for task in tasks:
                task.cancel()
            ends = await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.gather(*(x.http.close() for x in launchers))
            used = resource.getrusage(resource.RUSAGE_SELF)
            failed = [repr(e) for e in ends if isinstance(e, Exception)]
            pipe.send(
                (sum(x.answered_at_stop for x in launchers), used.ru_utime + used.ru_stime, failed)
            )
            return


def crowd_process(  # noqa: PLR0917 - as crowd()
    port: int, token: str, count: int, alpha: int, source: str, pipe: Connection, stream: bool
) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(crowd(port, token, count, alpha, source, pipe, stream))


class Crowd:
    """A process of launchers (:func:`crowd`), from the driver's side."""

    def __init__(  # noqa: PLR0917 - as crowd()
        self, port: int, token: str, count: int, alpha: int, source: str, stream: bool
    ) -> None:
        self.pipe, theirs = multiprocessing.Pipe()
        self.count = count
        self.process = multiprocessing.Process(
            target=crowd_process,
            args=(port, token, count, alpha, source, theirs, stream),
            daemon=True,
        )
        self.process.start()

    async def ask(self, command: str) -> Any:
        self.pipe.send(command)
        return await asyncio.to_thread(self.pipe.recv)


async def until(test: Callable[[], bool], timeout: float, failure: str) -> None:
    deadline = time.perf_counter() + timeout
    while not test():
        if time.perf_counter() > deadline:
            raise RuntimeError(failure)
        await asyncio.sleep(0.005)


def ms(values: list[float], q: float) -> str:
    ordered = sorted(values) or [float("nan")]
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.1f}"


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Bench:
    """The driver: ``local`` launchers in this process (the timed deliveries are theirs), the
    others in processes of ``per_process`` each (:class:`Crowd`)."""

    def __init__(  # noqa: PLR0917 - the run's sizes
        self,
        daemon: subprocess.Popen[bytes],
        port: int,
        token: str,
        n: int,
        local: int,
        per_process: int,
        burst_views: int,
        stream: bool,
    ) -> None:
        self.daemon, self.stopping, self.stream = daemon, asyncio.Event(), stream
        self.crowd = [
            Launcher(Http(port, token), self.stopping, stream=stream) for _ in range(min(n, local))
        ]
        rest = n - len(self.crowd)
        self.shares = [min(per_process, rest - k) for k in range(0, rest, per_process)]
        # The head's request changes the views of the others watching alpha: the driver's
        # launchers first, then the first ones of each process in turn.
        alpha = max(0, burst_views + 1 - len(self.crowd))
        self.alpha = []
        for share in self.shares:
            self.alpha.append(min(share, alpha))
            alpha -= self.alpha[-1]
        self.burst_views = len(self.crowd) - 1 + sum(self.alpha)
        self.crowds: list[Crowd] = []
        self.token = token
        self.rss_base = self.rss_waiting = 0
        self.daemon_cpu = self.idle_cpu = float("nan")
        self.port = port
        self.tasks: list[asyncio.Task[None]] = []
        self.pool: asyncio.Queue[Http] = asyncio.Queue()  # the driver's keep-alive connections
        for _ in range(8):
            self.pool.put_nowait(Http(port, token))
        self.delivery, self.e2e, self.errors = list[float](), list[float](), list[str]()
        self.spread = self.start = self.stop_s = float("nan")
        self.calls = "nan"

    def ready(self) -> bool:
        return all(x.polling_since for x in self.crowd) or any(t.done() for t in self.tasks)

    async def settle(self) -> None:  # until all have their view and wait, and no pass is due
        await until(self.ready, 600, "the launchers did not all get their view in 600 s")
        deadline = time.perf_counter() + 600
        for crowd in self.crowds:
            while await crowd.ask("waiting") < crowd.count:
                if time.perf_counter() > deadline:
                    raise RuntimeError("a process's launchers did not all get their view")
                await asyncio.sleep(0.2)
        await asyncio.sleep(1.5)

    async def withdraw(self, launcher: Launcher) -> None:
        http, session = await self.pool.get(), launcher.session
        begin = time.perf_counter()
        await http.call("DELETE", f"/sessions/{session}")
        answered = time.perf_counter()
        self.pool.put_nowait(http)
        await until(lambda: session in launcher.ended, 10, "an ended event came not in 10 s")
        self.delivery.append(max(0.0, launcher.ended[session] - answered))
        self.e2e.append(launcher.ended[session] - begin)

    async def rounds(self, rng: random.Random, rounds: int, rate: float) -> None:
        jobs = []
        for _ in range(rounds):
            await asyncio.sleep(rng.expovariate(rate))
            now = time.perf_counter()  # idle for 0.1 s: its long poll is held by the daemon
            idle = [x for x in self.crowd if not x.picked and now - (x.polling_since or now) > 0.1]
            for launcher in rng.sample(idle, min(1, len(idle))):
                launcher.picked = True
                jobs.append(asyncio.create_task(self.withdraw(launcher)))
        await asyncio.gather(*jobs)

    async def burst(self) -> None:
        http = await self.pool.get()
        head = self.crowd[0]  # the oldest session: its request changes every view behind it
        first = head.session
        others = [(x, x.after + 1) for x in self.crowd if x is not head]
        for crowd in self.crowds:
            await crowd.ask("mark")
        begin = time.perf_counter()
        await http.call(
            "PUT", f"/sessions/{first}/request", {"nodes": {"alpha": 256}, "duration": 600}
        )
        self.pool.put_nowait(http)
        await until(lambda: all(x.after >= seq for x, seq in others), 60, "views not all told")
        told = [x.told[seq] for x, seq in others]
        for crowd in self.crowds:
            deadline = time.perf_counter() + 60
            while None in (theirs := await crowd.ask("told")):
                if time.perf_counter() > deadline:
                    raise RuntimeError("a process's launchers were not all told in 60 s")
                await asyncio.sleep(0.05)
            told += theirs
        self.spread = max(told) - min(told)
        await until(lambda: "start" in head.kinds, 15, "free hosts asked for, no start in 15 s")
        self.start = head.told[head.kinds["start"]] - begin

    async def queue(self, count: int) -> None:
        """Requests that queue on beta, then each waiting one changing its request."""
        http = await self.pool.get()
        sessions = await http.call("GET", "/sessions")
        idle = [
            s["session"] for s in sessions if s["state"] == "submitted" and "beta" in s["clusters"]
        ][:count]
        for session in idle:
            body = {"nodes": {"beta": 32}, "duration": 600}
            await http.call("PUT", f"/sessions/{session}/request", body)
        for session in idle[4:]:
            body = {"nodes": {"beta": 16}, "duration": 600}
            await http.call("PUT", f"/sessions/{session}/request", body)
        await asyncio.sleep(1.5)  # the last pass's placements carried out
        _, metrics = await http.request("GET", "/metrics")
        self.pool.put_nowait(http)
        calls = {}
        for line in metrics.decode().splitlines():
            if line.startswith("coorm_reservation_calls_total{"):
                call = line.split('call="')[1].split('"')[0]
                calls[call] = float(line.rsplit(" ", 1)[1])
        self.calls = ",".join(
            f"{call}:{calls.get(call, 0) / max(1, len(idle)):.1f}"
            for call in ("create", "update", "delete")
        )

    async def stop(self) -> None:
        """SIGTERM while every launcher holds its long poll; until the daemon exited."""
        await self.settle()
        if self.daemon.poll() is not None:
            raise RuntimeError(f"the daemon exited ({self.daemon.returncode})")
        self.stopping.set()
        for crowd in self.crowds:
            await crowd.ask("stopping")
        self.daemon_cpu = cpu_s(self.daemon.pid)
        begin = time.perf_counter()
        self.daemon.send_signal(signal.SIGTERM)
        status = await asyncio.to_thread(self.daemon.wait, 60)
        self.stop_s = time.perf_counter() - begin
        if status != 0:
            self.errors.append(f"the daemon exited with status {status} at SIGTERM")
        await asyncio.wait(self.tasks, timeout=60)  # each polls again and finds it gone

    async def close(self) -> None:
        self.answered = sum(x.answered_at_stop for x in self.crowd)
        self.clients_cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        for crowd in self.crowds:
            with contextlib.suppress(OSError, EOFError):
                crowd.pipe.send("stopping")  # after a failure: let them end as the daemon stops
                await asyncio.to_thread(crowd.pipe.recv)
        stop_daemon(self.daemon)
        for crowd in self.crowds:
            try:
                answered, used, failed = await crowd.ask("end")
            except (OSError, EOFError) as error:
                self.errors.append(f"a process of launchers failed: {error!r}")
                continue
            self.answered += answered
            self.clients_cpu += used
            self.errors += [f"a launcher failed: {e}" for e in failed]
            crowd.process.join(30)
        for task in self.tasks:
            task.cancel()
        ends = await asyncio.gather(*self.tasks, return_exceptions=True)
        self.errors += [f"a launcher failed: {e!r}" for e in ends if isinstance(e, Exception)]
        pool = [self.pool.get_nowait() for _ in range(self.pool.qsize())]
        await asyncio.gather(*(http.close() for http in [x.http for x in self.crowd] + pool))

    async def run(self, args: argparse.Namespace) -> str:
        try:
            for _ in range(300):  # until the daemon answers
                with contextlib.suppress(OSError, h11.ProtocolError):
                    await Http(self.port, "").call("GET", "/health")
                    break
                await asyncio.sleep(0.1)
            self.rss_base = rss_kb(self.daemon.pid)
            head = self.crowd[0]  # subscribed first, never withdrawn: the burst's request
            self.tasks = [asyncio.create_task(head.run())]
            await until(lambda: head.polling_since is not None, 60, "no view for the first")
            head.picked = True  # (after its subscription, which clears it)
            self.tasks += [asyncio.create_task(launcher.run()) for launcher in self.crowd[1:]]
            self.crowds = [
                Crowd(self.port, self.token, share, alpha, f"127.0.0.{10 + i}", self.stream)
                for i, (share, alpha) in enumerate(zip(self.shares, self.alpha, strict=True))
            ]
            await self.settle()
            self.rss_waiting = rss_kb(self.daemon.pid)
            used = cpu_s(self.daemon.pid)
            await asyncio.sleep(IDLE_S)  # every launcher waits, nothing changes
            self.idle_cpu = (cpu_s(self.daemon.pid) - used) / IDLE_S
            await self.rounds(random.Random(args.seed), args.rounds, args.rate)
            await self.settle()
            await self.burst()
            await self.queue(args.queue)
            await self.stop()
        except (
            RuntimeError,
            OSError,
            ValueError,
            h11.ProtocolError,
            subprocess.SubprocessError,
        ) as error:
            self.errors.append(str(error))
        finally:
            await self.close()
        d, e2e = self.delivery, self.e2e
        return (
            f"daemon_load mode={args.mode} launchers={args.launchers} "
            f"p99_ms={ms(d, 0.99)} p50_ms={ms(d, 0.5)} "
            f"max_ms={ms(d, 1)} e2e_p99_ms={ms(e2e, 0.99)} rounds={len(d)} "
            f"errors={len(self.errors)} burst_views={self.burst_views} "
            f"burst_ms={1000 * self.spread:.0f} "
            f"start_ms={1000 * self.start:.0f} stop_s={self.stop_s:.2f} "
            f"stop_answered={self.answered} "
            f"reservation_calls_per_app={self.calls} "
            f"processes={1 + len(self.crowds)} "
            f"kb_per_waiting_launcher={(self.rss_waiting - self.rss_base) / args.launchers:.1f} "
            f"idle_cpu_pct={100 * self.idle_cpu:.0f} "
            f"daemon_cpu_s={self.daemon_cpu:.1f} clients_cpu_s={self.clients_cpu:.1f}"
        )


def start_daemon(folder: Path, port: int, token: str) -> subprocess.Popen[bytes]:
    (folder / "platform.toml").write_text(PLATFORM)
    config = folder / "bridge.toml"
    config.write_text(
        # A launcher's stream has a connection of its own, as coorm-launch's event thread has:
        # while it subscribes again, it holds two.
        CONFIG.format(dir=folder, port=port, token=token, total=19_000, per_peer=8_000)
    )
    config.chmod(0o600)
    code = "import sys; from coorm_bridge.cli.main import main; sys.exit(main())"
    with (folder / "daemon.log").open("wb") as log:  # cwd: not shadowed by the repo's folders
        command = [sys.executable, "-c", code, "serve", "-c", str(config)]
        return subprocess.Popen(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603


def stop_daemon(daemon: subprocess.Popen[bytes]) -> None:
    """After a failure: the bench stops it itself, measured."""
    daemon.send_signal(signal.SIGTERM)  # these do nothing once it exited
    with contextlib.suppress(subprocess.TimeoutExpired):
        daemon.wait(20)
    daemon.kill()
    daemon.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launchers", type=int, default=1000, help="long polls held open")
    parser.add_argument("--rounds", type=int, default=500, help="timed event deliveries")
    parser.add_argument("--rate", type=float, default=25.0, help="withdrawals per second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--queue", type=int, default=40, help="launchers that queue requests")
    parser.add_argument(
        "--local", type=int, default=500, help="launchers in the driver's process (timed ones)"
    )
    parser.add_argument(
        "--per-process", type=int, default=2500, help="launchers per process beside the driver"
    )
    parser.add_argument(
        "--burst-views", type=int, default=1000, help="views the burst's request changes"
    )
    parser.add_argument(
        "--mode",
        choices=("stream", "poll"),
        default="stream",
        help="how launchers wait: an event stream (coorm-launch now), or long polls (before)",
    )
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):  # 1,000 connections exceed the usual 1,024
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port, token = probe.getsockname()[1], secrets.token_urlsafe(24)
    begin = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="cb-", dir="/tmp"))  # AF_UNIX paths are short
    daemon = start_daemon(folder, port, token)
    bench = Bench(
        daemon,
        port,
        token,
        args.launchers,
        args.local,
        args.per_process,
        args.burst_views,
        args.mode == "stream",
    )
    errors = bench.errors
    try:
        line = asyncio.run(bench.run(args))
    finally:
        stop_daemon(daemon)
        if errors:  # the daemon's side of the story
            kept = Path(tempfile.gettempdir()) / f"daemon_load-{os.getpid()}.log"
            shutil.copy(folder / "daemon.log", kept)
            errors.append(f"the daemon's log is kept in {kept}")
        shutil.rmtree(folder, ignore_errors=True)
    sys.stderr.writelines(f"error: {e} (x{errors.count(e)})\n" for e in sorted(set(errors)))
    print(f"{line} seconds={time.monotonic() - begin:.1f}", flush=True)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
