"""Slow peers: one peer holds many slow and silent connections; another user's calls are timed.

A real daemon (``coorm-bridge serve`` on the mock, its Unix socket and TCP on loopback, TLS with
``--tls``) started under an open-file limit (``--nofile``, soft and hard, as ``prlimit`` would
set it). An attacker (a child process: over the socket as user ``nobody``, over TCP from
127.0.0.2) opens ``--slow`` connections that each send one byte of a request every ``--every``
seconds and ``--silent`` ones that send nothing, opening another as soon as one is closed (after
``--every``: a patient attacker). Meanwhile another user (this process: root on the socket, a
token from 127.0.0.1 on TCP) calls ``GET /v1/health`` and subscribes (``POST /v1/sessions``, then
withdraws, untimed), each on a new connection, every ``--pace`` seconds.

Printed: per transport, the other user's ``health``/``subscribe`` p50/p99/max in ms and their
failures (no answer within 10 s, a refused or reset connection); the attacker's connections
held at the end and how many the daemon closed or refused; the daemon's open descriptors
(``/proc/<pid>/fd``: max and at the end), its log's size and the lines of accept errors in it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

PLATFORM = '[[cluster]]\nname = "alpha"\nhosts = 64\n'
CONFIG = """policy = {{ interval = 1.0 }}
adapter = {{ kind = "mock", platform = "platform.toml" }}
[bridge]
socket = "{dir}/bridge.sock"
state_dir = "{dir}/state"
tokens = {{ "{token}" = "bench" }}
[bridge.tcp]
host = "127.0.0.1"
port = {port}
{tls}
"""
REQUEST = b"GET /v1/health HTTP/1.1\r\nHost: bridge\r\nX-Slow: " + b"a" * 4000 + b"\r\n\r\n"
TIMEOUT = 10.0


# -- the attacker (a child process) -------------------------------------------------------------


async def hold(args: argparse.Namespace, slow: bool, stats: dict[str, int], end: float) -> None:
    """One slot: a connection held as long as the daemon lets it, then another."""
    while time.monotonic() < end:
        try:
            if args.unix:
                reader, writer = await asyncio.open_unix_connection(args.unix)
            else:
                context = None
                if args.tls:
                    context = ssl.create_default_context()
                    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", args.port, ssl=context, local_addr=("127.0.0.2", 0)
                )
        except OSError:
            stats["failed"] += 1
            await asyncio.sleep(args.every)
            continue
        stats["opened"] += 1
        stats["held"] += 1
        try:
            for byte in REQUEST if slow else b"":
                writer.write(bytes([byte]))
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    if await asyncio.wait_for(reader.read(1), args.every) == b"":
                        break  # closed by the daemon
            else:
                await reader.read(1)  # silent: until the daemon closes it
        except OSError:
            pass
        finally:
            stats["held"] -= 1
            stats["closed"] += 1
            writer.close()
        await asyncio.sleep(args.every)


async def attack(args: argparse.Namespace) -> None:
    stats = {"opened": 0, "held": 0, "closed": 0, "failed": 0}
    end = time.monotonic() + args.seconds
    slots = [hold(args, True, stats, end) for _ in range(args.slow)]
    slots += [hold(args, False, stats, end) for _ in range(args.silent)]
    tasks = [asyncio.create_task(slot) for slot in slots]
    await asyncio.sleep(args.seconds)
    held = stats["held"]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps({**stats, "held": held}), flush=True)


# -- the other user ------------------------------------------------------------------------------


def call(
    where: str | int,
    method: str,
    path: str,
    body: bytes = b"",
    *,
    token: str = "",
    tls: ssl.SSLContext | None = None,
) -> bytes:
    """One request on a new connection (``where``: a socket path or a TCP port, over ``tls``
    then); its body."""
    family = socket.AF_UNIX if isinstance(where, str) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as plain:
        plain.settimeout(TIMEOUT)
        plain.connect(where if isinstance(where, str) else ("127.0.0.1", where))
        conn = plain if isinstance(where, str) or tls is None else tls.wrap_socket(plain)
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        head = f"{method} {path} HTTP/1.1\r\nHost: bridge\r\nConnection: close\r\n{auth}"
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        conn.sendall(head.encode() + body)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/1.1 ") else b"none"
    if not status.startswith(b"2"):
        raise OSError(f"HTTP {status.decode()}")
    return answer.partition(b"\r\n\r\n")[2]


def timed(
    samples: dict[str, list[float]], fails: dict[str, int], name: str, *a: Any, **kw: Any
) -> bytes:
    begin = time.perf_counter()
    try:
        answer = call(*a, **kw)
    except OSError:
        fails[name] = fails.get(name, 0) + 1
        return b""
    samples.setdefault(name, []).append(time.perf_counter() - begin)
    return answer


def measure(
    where: str | int, token: str, seconds: float, pace: float, tls: ssl.SSLContext | None
) -> str:
    samples: dict[str, list[float]] = {}
    fails: dict[str, int] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        timed(samples, fails, "health", where, "GET", "/v1/health", token=token, tls=tls)
        body = json.dumps({"name": "other"}).encode()
        answer = timed(
            samples, fails, "subscribe", where, "POST", "/v1/sessions", body, token=token, tls=tls
        )
        if answer:
            session = json.loads(answer)["session"]
            with contextlib.suppress(OSError):
                call(where, "DELETE", f"/v1/sessions/{session}", token=token, tls=tls)
        time.sleep(pace)
    parts = []
    for name in ("health", "subscribe"):
        got = sorted(samples.get(name, [])) or [float("nan")]
        pick = [got[min(len(got) - 1, int(q * len(got)))] * 1000 for q in (0.5, 0.99, 1.0)]
        parts.append(
            f"{name}_p50_ms={pick[0]:.1f} {name}_p99_ms={pick[1]:.1f} {name}_max_ms={pick[2]:.1f} "
            f"{name}_n={len(samples.get(name, []))} {name}_failed={fails.get(name, 0)}"
        )
    return " ".join(parts)


# -- the daemon ---------------------------------------------------------------------------------


def self_signed(folder: Path) -> str:
    """A certificate for 127.0.0.1, its own CA; the ``[bridge.tcp]`` keys that serve it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "slow peers")])
    now = datetime.datetime.now(datetime.UTC)
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(san, critical=False)
        .sign(key, hashes.SHA256())
    )
    (folder / "bridge.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (folder / "bridge.key").write_bytes(pem)
    (folder / "bridge.key").chmod(0o600)
    return f'certificate = "{folder}/bridge.crt"\nkey = "{folder}/bridge.key"'


def start_daemon(folder: Path, port: int, token: str, args: argparse.Namespace) -> Any:
    (folder / "platform.toml").write_text(PLATFORM)
    config = folder / "bridge.toml"
    tls = self_signed(folder) if args.tls else ""
    config.write_text(CONFIG.format(dir=folder, port=port, token=token, tls=tls))
    config.chmod(0o600)
    code = "import sys; from coorm_bridge.cli.main import main; sys.exit(main())"
    with (folder / "daemon.log").open("wb") as log:  # the open-file limit: soft and hard
        command = [f"--nofile={args.nofile}:{args.nofile}", "--", sys.executable, "-c", code]
        command = ["prlimit", *command, "serve", "-c", str(config)]
        return subprocess.Popen(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603


def wait_ready(socket_path: str, daemon: Any) -> None:
    for _ in range(600):
        with contextlib.suppress(OSError):
            call(socket_path, "GET", "/v1/health")
            return
        if daemon.poll() is not None:
            raise RuntimeError(f"the daemon exited ({daemon.returncode})")
        time.sleep(0.1)
    raise RuntimeError("the daemon did not answer in 60 s")


def descriptors(pid: int) -> int:
    with contextlib.suppress(OSError):
        return len(os.listdir(f"/proc/{pid}/fd"))
    return -1


def attacker(args: argparse.Namespace, folder: Path, port: int, over: str) -> Any:
    command = [sys.executable, __file__, "attack", "--slow", str(args.slow)]
    command += ["--silent", str(args.silent), "--every", str(args.every)]
    command += ["--seconds", str(args.seconds)]
    if over == "unix":
        command += ["--unix", str(folder / "bridge.sock")]
        if os.geteuid() == 0:  # another user than the one measured
            command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]
    else:
        command += ["--port", str(port)] + (["--tls"] if args.tls else [])
    room = args.slow + args.silent + 256
    command = ["prlimit", f"--nofile={room}:{room}", "--", *command]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)  # noqa: S603


async def timing(
    args: argparse.Namespace, daemon: Any, where: str | int, token: str, tls: Any
) -> tuple[str, int]:
    """The other user's calls once the attacker had ``--warmup`` seconds; the daemon's most
    descriptors meanwhile."""
    stop, top = asyncio.Event(), 0

    async def watch() -> None:
        nonlocal top
        while not stop.is_set():
            top = max(top, descriptors(daemon.pid))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(args.warmup)
    seconds = args.seconds - args.warmup - 1
    line = await asyncio.to_thread(measure, where, token, seconds, args.pace, tls)
    stop.set()
    await watcher
    return line, top


def phase(
    args: argparse.Namespace, daemon: Any, folder: Path, port: int, *, token: str, over: str
) -> None:
    """One attack over ``over`` (unix or tcp), timed and printed."""
    child = attacker(args, folder, port, over)
    tls = None
    if over == "tcp" and args.tls:
        tls = ssl.create_default_context()
        tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
        over = "tls"
    where: str | int = str(folder / "bridge.sock") if over == "unix" else port
    line, peak = asyncio.run(timing(args, daemon, where, "" if over == "unix" else token, tls))
    at_end = descriptors(daemon.pid)
    out, _ = child.communicate(timeout=60)
    held = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    log = (folder / "daemon.log").read_bytes()
    print(
        f"slow_peers over={over} nofile={args.nofile} slow={args.slow} "
        f"silent={args.silent} {line} attacker_held={held.get('held')} "
        f"attacker_opened={held.get('opened')} attacker_closed={held.get('closed')} "
        f"attacker_failed={held.get('failed')} daemon_fds_max={peak} "
        f"daemon_fds_end={at_end} log_bytes={len(log)} "
        f"log_accept_errors={log.count(b'out of system resource')} "
        f"log_tracebacks={log.count(b'Traceback')}",
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port, token = probe.getsockname()[1], secrets.token_urlsafe(24)
    folder = Path(tempfile.mkdtemp(prefix="cb-slow-", dir="/tmp"))
    folder.chmod(0o755)  # the attacker on the socket is another user
    daemon = start_daemon(folder, port, token, args)
    try:
        wait_ready(str(folder / "bridge.sock"), daemon)
        for over in args.over.split(","):
            phase(args, daemon, folder, port, token=token, over=over)
        if daemon.poll() is not None:
            print(f"the daemon exited ({daemon.returncode})", file=sys.stderr)
            return 1
        return 0
    finally:
        daemon.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.wait(30)
        daemon.kill()
        daemon.wait()
        if args.keep:
            print(f"kept: {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=["attack"], help=argparse.SUPPRESS)
    parser.add_argument("--slow", type=int, default=2000, help="slow connections held")
    parser.add_argument("--silent", type=int, default=200, help="silent connections held")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between slow bytes")
    parser.add_argument("--seconds", type=float, default=60.0, help="attack's duration")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds before timing")
    parser.add_argument("--pace", type=float, default=0.05, help="seconds between timed calls")
    parser.add_argument("--nofile", type=int, default=1024, help="the daemon's open-file limit")
    parser.add_argument("--over", default="unix,tcp", help="unix, tcp or both (comma)")
    parser.add_argument("--tls", action="store_true", help="the attack over TCP uses TLS")
    parser.add_argument("--keep", action="store_true", help="keep the daemon's folder")
    parser.add_argument("--unix", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "attack":
        asyncio.run(attack(args))
        return
    sys.exit(run(args))


if __name__ == "__main__":
    main()
