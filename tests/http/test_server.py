"""The server on real sockets: peer identity on the Unix socket, none over TCP, the socket file's
life cycle (mode, stale, live, foreign file, removal), concurrency, and stopping on signals."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests_unixsocket
from fastapi import FastAPI, Request

from coorm_bridge.http.server import (
    BackgroundServer,
    PeerCredentials,
    ServerError,
    peer_of,
    raise_open_files_limit,
)


def make_app() -> FastAPI:
    app = FastAPI()

    @app.get("/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        peer = peer_of(request.scope)
        return {"uid": None, "pid": None} if peer is None else {"uid": peer.uid, "pid": peer.pid}

    @app.get("/slow")
    async def slow(request: Request) -> dict[str, Any]:
        await asyncio.sleep(0.5)
        peer = peer_of(request.scope)
        return {"uid": None if peer is None else peer.uid}

    return app


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=30)
        self.unix_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.unix_path))


def get_json(conn: http.client.HTTPConnection, path: str) -> Any:
    conn.request("GET", path)
    response = conn.getresponse()
    assert response.status == 200
    return json.loads(response.read())


def unix_get(path: Path, url: str) -> Any:
    conn = UnixHTTPConnection(path)
    try:
        return get_json(conn, url)
    finally:
        conn.close()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """AF_UNIX paths are limited to about 107 bytes: pytest's tmp_path may be longer."""
    directory = Path(tempfile.mkdtemp(prefix="cb-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def sock_path(short_dir: Path) -> Path:
    return short_dir / "bridge.sock"


def test_peer_over_unix_none_over_tcp(sock_path: Path) -> None:
    seen: list[list[str]] = []
    server = BackgroundServer(
        make_app(), unix_path=sock_path, tcp=("127.0.0.1", 0), on_ready=seen.append
    )
    with server:
        assert seen == [server.addresses]
        unix_address, tcp_address = server.addresses
        assert unix_address == f"unix://{sock_path}"
        assert tcp_address.startswith("http://127.0.0.1:")
        port = int(tcp_address.rsplit(":", 1)[1])
        assert port > 0

        conn = UnixHTTPConnection(sock_path)
        try:  # two requests on one connection: the peer is per connection, not per request
            for _ in range(2):
                assert get_json(conn, "/whoami") == {"uid": os.getuid(), "pid": os.getpid()}
        finally:
            conn.close()

        with requests_unixsocket.Session() as session:  # type: ignore[no-untyped-call]
            url = f"http+unix://{quote(str(sock_path), safe='')}/whoami"
            assert session.get(url, timeout=10).json()["uid"] == os.getuid()

        tcp = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            assert get_json(tcp, "/whoami") == {"uid": None, "pid": None}
        finally:
            tcp.close()
    assert not sock_path.exists()


@pytest.mark.parametrize("mode", [None, 0o660, 0o600])
def test_socket_mode_and_private_directory(short_dir: Path, mode: int | None) -> None:
    path = short_dir / "run" / "bridge.sock"  # the directory does not exist yet
    server = (
        BackgroundServer(make_app(), unix_path=path)
        if mode is None
        else BackgroundServer(make_app(), unix_path=path, socket_mode=mode)
    )
    with server:
        assert stat.S_ISSOCK(path.lstat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == (0o666 if mode is None else mode)
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert unix_get(path, "/whoami")["uid"] == os.getuid()


def test_refuses_a_directory_others_can_write(short_dir: Path) -> None:
    shared = short_dir / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ServerError, match="not private"):
        BackgroundServer(make_app(), unix_path=shared / "bridge.sock").start()
    assert list(shared.iterdir()) == []


def test_second_server_on_a_live_socket_is_refused(sock_path: Path) -> None:
    with BackgroundServer(make_app(), unix_path=sock_path):
        with pytest.raises(ServerError, match="another bridge is already listening on"):
            BackgroundServer(make_app(), unix_path=sock_path).start()
        assert unix_get(sock_path, "/whoami")["uid"] == os.getuid()  # the first one still serves
    assert not sock_path.exists()


def test_stale_socket_is_replaced(sock_path: Path) -> None:
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock_path))
    dead.close()  # leaves the file behind, as a crashed bridge would
    assert stat.S_ISSOCK(sock_path.lstat().st_mode)
    with BackgroundServer(make_app(), unix_path=sock_path):
        assert unix_get(sock_path, "/whoami")["uid"] == os.getuid()
    assert not sock_path.exists()


def test_regular_file_is_refused_and_left_alone(sock_path: Path) -> None:
    sock_path.write_text("precious")
    with pytest.raises(ServerError, match="exists and is not a socket"):
        BackgroundServer(make_app(), unix_path=sock_path).start()
    assert sock_path.read_text() == "precious"


def test_tcp_port_in_use_is_a_clear_error(sock_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = BackgroundServer(make_app(), unix_path=sock_path, tcp=("127.0.0.1", port))
        with pytest.raises(ServerError, match="address already in use"):
            server.start()
    assert not sock_path.exists()  # the Unix socket bound first is cleaned up too


def test_failed_app_startup_is_an_error_and_cleans_up(sock_path: Path) -> None:
    @asynccontextmanager
    async def broken(app: FastAPI) -> AsyncIterator[None]:
        raise RuntimeError("no database")
        yield

    with pytest.raises(ServerError, match="failed to start"):
        BackgroundServer(FastAPI(lifespan=broken), unix_path=sock_path).start()
    assert not sock_path.exists()


def test_stop_removes_the_socket_and_is_idempotent(sock_path: Path) -> None:
    server = BackgroundServer(make_app(), unix_path=sock_path)
    server.start()
    assert sock_path.exists()
    server.stop()
    assert not sock_path.exists()
    server.stop()
    with pytest.raises(RuntimeError):
        server.start()


def test_200_concurrent_requests(sock_path: Path) -> None:
    with BackgroundServer(make_app(), unix_path=sock_path, tcp=("127.0.0.1", 0)) as server:
        port = int(server.addresses[1].rsplit(":", 1)[1])

        def one(i: int) -> Any:
            if i % 2:
                return unix_get(sock_path, "/slow")["uid"]
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                return get_json(conn, "/slow")["uid"]
            finally:
                conn.close()

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=200) as pool:
            uids = list(pool.map(one, range(200)))
        elapsed = time.monotonic() - started
    assert uids == [None if i % 2 == 0 else os.getuid() for i in range(200)]
    assert elapsed < 20  # served concurrently: one after the other would take 100 s


SERVE_SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from fastapi import FastAPI
    from coorm_bridge.http.server import serve

    app = FastAPI()
    serve(app, unix_path=Path(sys.argv[1]), on_ready=lambda a: print(*a, flush=True))
    print("returned", flush=True)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_stops_gracefully_on_signals(sock_path: Path, sig: signal.Signals) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE_SCRIPT, str(sock_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=sock_path.parent,  # not the repository's root, whose coorm_bridge/ would shadow it
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert ready.split() == [f"unix://{sock_path}"]
        conn = UnixHTTPConnection(sock_path)
        conn.request("GET", "/openapi.json")
        assert conn.getresponse().status == 200
        conn.close()
        process.send_signal(sig)
        assert process.wait(timeout=20) == 0
        assert process.stdout.read().split() == ["returned"]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not sock_path.exists()


HOLD_SCRIPT = textwrap.dedent("""
    import asyncio, logging, sys, threading
    from pathlib import Path
    from fastapi import FastAPI
    from coorm_bridge.http.server import serve

    logging.basicConfig(level=logging.INFO)
    released = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), released.set()), daemon=True).start()
    app = FastAPI()

    @app.get("/hold")
    async def hold() -> dict[str, bool]:
        print("holding", flush=True)
        while not released.is_set():
            await asyncio.sleep(0.01)
        return {"released": True}

    serve(
        app,
        unix_path=Path(sys.argv[1]),
        on_ready=lambda a: print(*a, flush=True),
        on_stopping=lambda: print("stopping", flush=True),
    )
    print("returned", flush=True)
""")


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_does_not_cut_the_stop_short(
    sock_path: Path, second: signal.Signals
) -> None:
    """uvicorn would turn a second SIGINT into a forced exit, cancelling the request still
    running (a traceback each) and skipping the app's shutdown: here the stop goes on."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD_SCRIPT, str(sock_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=sock_path.parent,
        text=True,
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stdout.readline().split() == [f"unix://{sock_path}"]
        conn = UnixHTTPConnection(sock_path)
        conn.request("GET", "/hold")
        assert process.stdout.readline() == "holding\n"
        process.send_signal(signal.SIGTERM)
        assert process.stdout.readline() == "stopping\n"  # the stop waits for /hold
        process.send_signal(second)
        process.stdin.write("go\n")
        process.stdin.flush()
        answer = conn.getresponse()
        assert (answer.status, json.loads(answer.read())) == (200, {"released": True})
        conn.close()
        _, errors = process.communicate(timeout=60)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "Traceback" not in errors
    assert f"{second.name} during the stop: ignored" in errors
    assert not sock_path.exists()


def test_open_files_limit_is_raised_never_lowered() -> None:
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    now = raise_open_files_limit()
    assert now >= before
    assert hard == resource.RLIM_INFINITY or now <= hard
    assert now >= min(hard, 65536) or hard == resource.RLIM_INFINITY


def test_peer_of_reads_only_credentials() -> None:
    assert peer_of({"type": "http"}) is None
    assert peer_of({"coorm.peer": (1, 2, 3)}) is None
    peer = PeerCredentials(pid=1, uid=2, gid=3)
    assert peer_of({"coorm.peer": peer}) is peer


def test_background_threads_do_not_leak(sock_path: Path) -> None:
    before = threading.active_count()
    with BackgroundServer(make_app(), unix_path=sock_path):
        pass
    assert threading.active_count() <= before  # the server's thread was joined
