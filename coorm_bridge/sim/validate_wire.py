"""What really crossed between the launchers and the daemon: a counting TCP proxy.

``coorm-sim validate`` puts this proxy between the launcher processes and the daemon's TCP port,
so that the bytes counted are those that went over the connections, HTTP headers, chunk framing
and empty long-poll answers included, in both directions. Each direction is also read as HTTP/1.1
(a message's head up to its blank line, then its body by ``Content-Length`` or chunks) only to
count the messages and to split the bytes into headers and bodies: the body bytes are what the
simulator's :mod:`.wire` counts (JSON only), the rest is what it leaves out.

The proxy runs its own asyncio loop in a thread of the process that starts it, so that its CPU
is counted neither as the daemon's nor as the launchers'.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

#: Bytes read at once from a connection.
CHUNK = 65536
#: Longest head accepted before the reader gives up splitting (counting raw bytes goes on).
MAX_HEAD = 1 << 20
#: Statuses whose answers have no body whatever their headers say.
_BODILESS = (204, 304)


@dataclass
class Flow:
    """One direction's counts: bytes forwarded, of which message bodies, and messages."""

    bytes: int = 0
    body_bytes: int = 0
    messages: int = 0

    @property
    def header_bytes(self) -> int:
        """Everything but the bodies: request and status lines, headers, chunk framing."""
        return self.bytes - self.body_bytes


@dataclass
class Traffic:
    """Both directions: ``up`` from the launchers to the daemon, ``down`` back."""

    up: Flow = field(default_factory=Flow)
    down: Flow = field(default_factory=Flow)
    connections: int = 0

    @property
    def bytes(self) -> int:
        return self.up.bytes + self.down.bytes

    @property
    def body_bytes(self) -> int:
        return self.up.body_bytes + self.down.body_bytes

    @property
    def exchanges(self) -> int:
        """Requests sent (each answered once: HTTP/1.1 without pipelining)."""
        return self.up.messages


class HttpSplitter:
    """Reads one direction of an HTTP/1.1 connection as it passes, counting into ``flow``.

    It only needs to find where each message's body begins and ends; a stream it cannot
    read (a malformed head) is counted from there on as bytes only, which no client of the
    bridge sends.
    """

    def __init__(self, flow: Flow, responses: bool) -> None:
        self.flow = flow
        self.responses = responses
        self._buffer = b""
        self._body_left = 0
        self._chunked = False
        self._until_close = False
        self._lost = False

    def feed(self, data: bytes) -> None:
        """Count ``data``, the next bytes of the stream."""
        self.flow.bytes += len(data)
        if self._lost:
            return
        self._buffer += data
        while self._buffer and not self._lost:
            if self._until_close:
                self.flow.body_bytes += len(self._buffer)
                self._buffer = b""
            elif self._body_left:
                taken = min(self._body_left, len(self._buffer))
                self.flow.body_bytes += taken
                self._body_left -= taken
                self._buffer = self._buffer[taken:]
            elif self._chunked:
                if not self._chunk():
                    return
            elif not self._head():
                return

    def _head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            self._lost = len(self._buffer) > MAX_HEAD
            return False
        head, self._buffer = self._buffer[:end], self._buffer[end + 4 :]
        lines = head.decode("latin-1").split("\r\n")
        self.flow.messages += 1
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:])
        }
        if self.responses:
            parts = lines[0].split(" ", 2)
            status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            if status < 200 or status in _BODILESS:
                return True
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = True
        elif headers.get("content-length", "").isdigit():
            self._body_left = int(headers["content-length"])
        elif self.responses:
            self._until_close = True  # HTTP/1.1: a response without a length ends with the close
        return True

    def _chunk(self) -> bool:
        """One chunk's size line, data and CRLF (the last one: its trailers and blank line)."""
        end = self._buffer.find(b"\r\n")
        if end < 0:
            return False
        size_text = self._buffer[:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            self._lost = True
            return False
        if size == 0:
            close = self._buffer.find(b"\r\n\r\n", end)
            if close < 0:
                return False
            self._buffer = self._buffer[close + 4 :]
            self._chunked = False
            return True
        if len(self._buffer) < end + 2 + size + 2:
            return False
        self.flow.body_bytes += size
        self._buffer = self._buffer[end + 2 + size + 2 :]
        return True


class CountingProxy:
    """A TCP proxy from ``127.0.0.1:port`` (chosen free) to ``upstream``, counting
    :class:`Traffic`; a context manager that starts and stops its loop thread."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.traffic = Traffic()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="counting-proxy", daemon=True)
        self._failure: BaseException | None = None

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise RuntimeError(f"the counting proxy did not start: {self._failure}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop listening, cut the connections still open and stop the loop."""
        if self._stopped is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as error:  # told to the starting thread
            self._failure = error
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            tasks.add(task)
            try:
                await self._connection(reader, writer)
            finally:
                tasks.discard(task)

        server = await asyncio.start_server(accepted, "127.0.0.1", 0, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stopped.wait()
            server.close()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.traffic.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        requests = HttpSplitter(self.traffic.up, responses=False)
        answers = HttpSplitter(self.traffic.down, responses=True)
        try:
            await asyncio.gather(
                _pump(reader, up_writer, requests), _pump(up_reader, writer, answers)
            )
        finally:
            for end in (writer, up_writer):
                end.close()
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await end.wait_closed()


async def _pump(
    source: asyncio.StreamReader, sink: asyncio.StreamWriter, splitter: HttpSplitter
) -> None:
    """Forward ``source`` to ``sink`` until either end closes, counting what passes."""
    try:
        while data := await source.read(CHUNK):
            splitter.feed(data)
            sink.write(data)
            await sink.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        if sink.can_write_eof():
            with contextlib.suppress(OSError):
                sink.write_eof()
