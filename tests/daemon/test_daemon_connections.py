"""Connections that send too little, or too many of them, against a real daemon (issue 24,
"Connections"): one peer past its cap is refused while another is served; half a request, a
trickled one, a silent connection and a stalled TLS one are closed after their limits; a long
poll and a keep-alive connection between calls are not; running out of descriptors is logged
once per interval, not once per try.

Limits are small here (``[bridge.connections]``), so that each closing comes within seconds;
each test waits for the daemon to act (the connection's end, a line in its log), with failsafe
timeouts only.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests import daemons
from tests.daemons import free_port

pytestmark = pytest.mark.daemon

TOKEN = "alice-token-0123456789"
FAILSAFE = 60
#: Small limits: a request must be in within a second, a connection may be idle two.
LIMITS = {"request_timeout": 1.0, "idle_timeout": 2, "max_per_peer": 4, "log_interval": 3600}
HALF = b"GET /v1/health HTTP/1.1\r\nHost: bridge\r\nX-Pad: "


class Daemon(daemons.Daemon):
    """Socket and TCP (a token for alice), ``[bridge.connections]`` from ``limits``; ``tcp``:
    more ``[bridge.tcp]`` keys (TLS)."""

    def __init__(
        self, folder: Path, limits: dict[str, Any] | None = None, tcp: Any = None, **kw: Any
    ) -> None:
        port = free_port()
        config = daemons.config(
            port=port, tcp=tcp, tokens={TOKEN: "alice"}, connections={**LIMITS, **(limits or {})}
        )
        super().__init__(folder, config, daemons.PLATFORM, port, **kw)

    def connect(self, over: str, source: str = "127.0.0.1") -> socket.socket:
        """A raw connection that sends nothing yet."""
        if over == "unix":
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(FAILSAFE)
            conn.connect(str(self.socket))
        else:
            conn = socket.create_connection(
                ("127.0.0.1", self.port), FAILSAFE, source_address=(source, 0)
            )
        return conn


@pytest.fixture
def make_daemon(make_daemon: Callable[..., Daemon]) -> Callable[..., Daemon]:
    return functools.partial(make_daemon, cls=Daemon)


def until_closed(conn: socket.socket) -> tuple[bytes, float]:
    """Read until the daemon closes ``conn``: what it sent, and the seconds that took."""
    began, answer = time.monotonic(), b""
    try:
        while chunk := conn.recv(65536):
            answer += chunk
    except (ConnectionResetError, ssl.SSLError):
        pass
    return answer, time.monotonic() - began


def is_open(conn: socket.socket) -> bool:
    """Whether the daemon still holds ``conn`` (nothing to read, no end)."""
    conn.setblocking(False)
    try:
        return conn.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        conn.settimeout(FAILSAFE)


def until(test: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + FAILSAFE
    while not test():
        assert time.monotonic() < deadline, f"not within {FAILSAFE} s: {what}"
        time.sleep(0.05)


def served(daemon: Daemon) -> socket.socket:
    """A keep-alive connection over the socket that the daemon has answered once (so it holds
    it). Until the daemon has seen the end of the connection its start was awaited on (this
    uid's too), it may refuse one: another is tried."""
    deadline = time.monotonic() + FAILSAFE
    while True:
        conn = daemon.connect("unix")
        conn.sendall(b"GET /v1/health HTTP/1.1\r\nHost: bridge\r\n\r\n")
        with contextlib.suppress(ConnectionResetError):
            if conn.recv(65536).startswith(b"HTTP/1.1 200 "):
                return conn
        conn.close()
        assert time.monotonic() < deadline, f"no connection held within {FAILSAFE} s"


@pytest.fixture
def held() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def test_a_peer_past_its_cap_is_refused_while_another_is_served(make_daemon, held):
    daemon = make_daemon({"idle_timeout": 600}).start()
    mine = [held.enter_context(daemon.connect("tcp", "127.0.0.2")) for _ in range(4)]
    extra = held.enter_context(daemon.connect("tcp", "127.0.0.2"))
    answer, _ = until_closed(extra)  # closed as it comes, before it sent anything
    assert answer == b""
    assert all(map(is_open, mine))
    with daemon.client(TOKEN) as other:  # another address
        assert other.health().status
    # the socket counts uids: this test's own is another peer than 127.0.0.2
    with daemon.client() as local:
        assert local.health().status
    mine.pop().close()  # a place given back is taken again
    until(lambda: is_open(held.enter_context(daemon.connect("tcp", "127.0.0.2"))), "a place")
    assert "refused a connection from address 127.0.0.2" in daemon.log.read_text()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_a_uid_past_its_cap_on_the_socket_leaves_another_uid_served(make_daemon, folder, held):
    folder.chmod(0o755)  # another user reaches the socket (0666) through it
    # No timer in this test: only the cap may close a connection.
    daemon = make_daemon({"idle_timeout": 600, "request_timeout": 600}).start()
    mine = [held.enter_context(served(daemon)) for _ in range(4)]
    assert until_closed(held.enter_context(daemon.connect("unix")))[0] == b""
    code = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX); s.settimeout(30); "
        "s.connect(sys.argv[1]); s.sendall(b'GET /v1/health HTTP/1.0\\r\\n\\r\\n'); "
        "print(s.recv(100).split()[1].decode())"
    )
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    other = subprocess.run(
        [*nobody, sys.executable, "-c", code, str(daemon.socket)],
        capture_output=True,
        text=True,
        timeout=FAILSAFE,
        check=True,
    )
    assert other.stdout.strip() == "200"
    assert all(map(is_open, mine))
    assert f"refused a connection from uid {os.geteuid()}" in daemon.log.read_text()


@pytest.mark.parametrize("over", ["unix", "tcp"])
def test_half_a_request_is_closed_after_the_request_limit(make_daemon, held, over):
    daemon = make_daemon().start()
    conn = held.enter_context(daemon.connect(over))
    conn.sendall(HALF)
    answer, waited = until_closed(conn)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert waited < LIMITS["idle_timeout"]  # the request's limit closed it, not the idle one


@pytest.mark.parametrize("over", ["unix", "tcp"])
def test_a_trickled_request_is_closed_though_each_byte_comes_in_time(make_daemon, held, over):
    daemon = make_daemon().start()
    conn = held.enter_context(daemon.connect(over))
    began, request = time.monotonic(), HALF + b"x" * 1000 + b"\r\n\r\n"
    for sent in range(len(request)):  # a byte every 0.1 s: far within the idle limit
        try:
            conn.sendall(request[sent : sent + 1])
        except OSError:
            break
        if not is_open(conn):
            break
        time.sleep(0.1)
    assert sent < len(request) - 1, "the whole request went through"
    assert time.monotonic() - began < 3 * LIMITS["request_timeout"] + 1


@pytest.mark.parametrize("over", ["unix", "tcp"])
def test_a_silent_connection_is_closed_after_the_idle_limit(make_daemon, held, over):
    daemon = make_daemon().start()
    answer, waited = until_closed(held.enter_context(daemon.connect(over)))
    assert answer == b""
    assert waited >= LIMITS["idle_timeout"] - 0.1


def self_signed(folder: Path) -> Path:
    """A certificate for 127.0.0.1 by openssl; its key beside it, private."""
    subprocess.run(
        [
            *(
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ),
            *("-nodes", "-keyout", "tls.key", "-out", "tls.crt", "-days", "1", "-subj", "/CN=t"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        cwd=folder,
        capture_output=True,
        check=True,
        timeout=FAILSAFE,
    )
    (folder / "tls.key").chmod(0o600)
    return folder / "tls.crt"


@pytest.mark.skipif(not shutil.which("openssl"), reason="no openssl")
def test_tls_partial_request_and_stalled_handshake_are_closed(make_daemon, folder, held):
    certificate = self_signed(folder)
    daemon = make_daemon(tcp={"certificate": "tls.crt", "key": "tls.key"}).start()
    context = ssl.create_default_context(cafile=certificate)
    conn = held.enter_context(
        context.wrap_socket(daemon.connect("tcp"), server_hostname="127.0.0.1")
    )  # handshake done
    conn.sendall(HALF)
    answer, waited = until_closed(conn)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert waited < LIMITS["idle_timeout"]
    stalled = held.enter_context(daemon.connect("tcp"))  # connected, no handshake
    assert until_closed(stalled)[0] == b""


def test_a_long_poll_and_a_keep_alive_connection_are_not_cut(make_daemon):
    daemon = make_daemon().start()
    wait = 3 * LIMITS["idle_timeout"]  # longer than either limit
    with daemon.client() as client:
        session = client.subscribe(name="poll").session
        began = time.monotonic()
        assert client.events(session, after=10_000, wait=wait) == []  # held, then empty
        assert time.monotonic() - began >= wait - 0.5
        time.sleep(LIMITS["idle_timeout"] / 4)  # a launcher's pause between calls
        assert client.health().status
    lines = daemon.log.read_text()
    assert "408" not in lines
    assert "Traceback" not in lines


def test_out_of_descriptors_is_logged_once_per_interval(make_daemon, held):
    daemon = make_daemon({"max_per_peer": 10_000, "max_total": 10_000}).start()
    assert daemon.process is not None
    in_use = len(os.listdir(f"/proc/{daemon.process.pid}/fd"))
    limit = in_use + 8  # fewer than the connections below: accepts fail for want of one
    subprocess.run(
        ["prlimit", f"--pid={daemon.process.pid}", f"--nofile={limit}:{limit}"],
        check=True,
        timeout=FAILSAFE,
    )
    for _ in range(40):
        held.enter_context(daemon.connect("tcp"))

    def told() -> bool:
        return "cannot accept a connection" in daemon.log.read_text()

    until(told, "the accept error logged")
    time.sleep(1)  # the daemon tries again every 0.25 s meanwhile: those are counted, not logged
    held.close()  # descriptors come back: the daemon serves again
    with daemon.client() as client:
        assert client.health().status
    assert daemon.stop() == 0
    log = daemon.log.read_text()
    assert log.count("cannot accept a connection") == 1 + log.count("more in the last")
    assert log.count("more in the last") == 1  # the others, counted, told at the stop
    assert "out of system resource" not in log  # asyncio's traceback per try: none
