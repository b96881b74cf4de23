"""Identity, output and transport against a real ``coorm-bridge serve`` process: real uids whose
names the system's user database gives with '@' or '$', ``coorm-bridge status`` printing what
users wrote without letting it reach the terminal raw, and TCP over TLS with a certificate made
here (verified by the client, refused when not trusted).

Each test starts its own daemon and stops only that process, by PID; the users it creates are
deleted by name at the end.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import getpass
import ipaddress
import json
import os
import pwd
import shutil
import socket as socketlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from coorm_bridge.core.model import Filter
from coorm_bridge.http.server import BackgroundServer, ServerError
from coorm_bridge.http.tls import TlsFiles
from coorm_bridge.launchers.client import BridgeClient, BridgeError, UntrustedBridge
from coorm_bridge.service.config import ConfigError, load_config
from coorm_bridge.store import Store
from tests import daemons

SERVE = "import sys; from coorm_bridge.cli.main import main; sys.exit(main())"
PLATFORM = '[[cluster]]\nname = "c1"\nhosts = 8\n'


class Daemon(daemons.Daemon):
    """One ``coorm-bridge serve`` over a folder of its own; ``options`` go to
    :func:`tests.daemons.config` (TCP, TLS, tokens)."""

    def __init__(self, folder: Path, **options: Any) -> None:
        config = daemons.config(policy={"interval": 0.2}, **options)
        super().__init__(folder, config, PLATFORM)


@pytest.fixture
def make_daemon(make_daemon: Callable[..., Daemon]) -> Callable[..., Daemon]:
    """Daemons of this module's kind (tests/conftest.py stops them)."""
    return functools.partial(make_daemon, cls=Daemon)


# -- real users -----------------------------------------------------------------------------------

CAN_ADD_USERS = os.geteuid() == 0 and all(map(shutil.which, ("useradd", "userdel", "curl")))


@contextlib.contextmanager
def system_users(names: list[str]) -> Iterator[list[pwd.struct_passwd]]:
    """Users added to the system's database for the test, deleted afterwards by name."""
    added: list[str] = []
    try:
        for name in names:
            subprocess.run(
                ["useradd", "--badname", "-M", "-N", "-s", "/usr/sbin/nologin", name],
                check=True,
                capture_output=True,
            )
            added.append(name)
        yield [pwd.getpwnam(name) for name in names]
    finally:
        for name in added:
            subprocess.run(["userdel", name], check=False, capture_output=True)


def as_user(
    user: pwd.struct_passwd, socket: Path, method: str, path: str, body: str = ""
) -> object:
    """One API call with curl run under ``user``'s uid: the daemon sees that uid as the peer."""
    command = ["curl", "-q", "-sS", "--fail-with-body", "--unix-socket", str(socket)]
    command += ["-X", method, "-H", "Content-Type: application/json"]
    if body:
        command += ["--data", body]
    result = subprocess.run(
        [*command, f"http://bridge/v1{path}"],
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        env={"PATH": os.environ["PATH"], "HOME": "/"},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


@pytest.mark.daemon
@pytest.mark.skipif(not CAN_ADD_USERS, reason="needs root, useradd, userdel and curl")
def test_real_users_named_with_at_and_dollar_own_their_sessions(make_daemon, folder):
    folder.chmod(0o755)  # other users must reach the (world-writable) socket
    daemon = make_daemon().start()
    socket = folder / "bridge.sock"
    names = [f"ct{os.getpid()}@example.org", f"CT{os.getpid()}$"]
    with system_users(names) as users:
        sessions = {}
        for user in users:
            answer = as_user(user, socket, "POST", "/sessions", '{"name": "run"}')
            sessions[user.pw_name] = answer["session"]  # type: ignore[index]
        for user in users:
            listed = as_user(user, socket, "GET", "/sessions")
            assert [(s["session"], s["owner"]) for s in listed] == [  # type: ignore[attr-defined]
                (sessions[user.pw_name], user.pw_name)
            ]
    with BridgeClient(daemon.unix) as client:  # root is no admin here: it sees neither
        assert client.sessions() == []


# -- what status prints ---------------------------------------------------------------------------


@pytest.mark.daemon
def test_status_prints_stored_names_escaped(make_daemon, folder):
    daemon = make_daemon().start()
    # A name stored by an earlier version, which took any text: written behind the daemon's back.
    with Store(folder / "state" / "bridge.sqlite") as store:
        row = store.create_session(
            getpass.getuser(), "\x1b[2J\x1b]0;pwned\x07\u202eevil", Filter(), ["c1"], 1
        )
    result = subprocess.run(
        [sys.executable, "-c", SERVE, "status"],
        env={**os.environ, "COORM_BRIDGE_URL": daemon.unix},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=folder,
    )
    line = next(line for line in result.stdout.splitlines() if line.startswith(row.id))
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\u202eevil" in line
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in result.stdout


# -- TLS ------------------------------------------------------------------------------------------

TOKEN = "alice-token-0123456789"


def free_port() -> int:
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed(folder: Path, stem: str) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost signed by its own key: its own CA. The key file
    is private, as the daemon requires."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"coorm-bridge test {stem}")])
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{stem}.crt", folder / f"{stem}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


@pytest.fixture
def tls_daemon(make_daemon, folder):
    """A daemon serving TCP over TLS on 127.0.0.1 with a certificate made for the test."""
    certificate, key = self_signed(folder, "bridge")
    port = free_port()
    tls = {"certificate": certificate.name, "key": key.name}
    daemon = make_daemon(port=port, tcp=tls, tokens={TOKEN: "alice"}).start()
    return daemon, f"https://127.0.0.1:{port}", certificate


@pytest.fixture
def no_ca_from_the_environment(monkeypatch):
    for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(variable, raising=False)


@pytest.mark.daemon
def test_tls_serves_a_client_that_verifies_the_certificate(tls_daemon, no_ca_from_the_environment):
    daemon, url, certificate = tls_daemon
    with BridgeClient(url, token=TOKEN, verify=certificate) as client:
        sid = client.subscribe(name="over tls").session
        assert client.session(sid).owner == "alice"
        assert client.health().status == "ok"
    assert f"and {url}" in daemon.log.read_text()  # the ready line names the https address
    with BridgeClient(daemon.unix) as local:  # the Unix socket stays plain, identity by uid
        assert local.health().status == "ok"


@pytest.mark.daemon
def test_requests_ca_bundle_is_honoured(tls_daemon, monkeypatch):
    _, url, certificate = tls_daemon
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(certificate))
    with BridgeClient(url, token=TOKEN) as client:
        assert client.sessions() == []


@pytest.mark.daemon
def test_tls_refuses_a_client_that_does_not_trust_the_certificate(
    tls_daemon, folder, no_ca_from_the_environment
):
    _, url, _ = tls_daemon
    other, _ = self_signed(folder, "other")
    slept: list[float] = []
    for verify in (None, other):
        with BridgeClient(url, token=TOKEN, verify=verify, sleep=slept.append) as client:
            with pytest.raises(UntrustedBridge) as refused:
                client.sessions()
            assert refused.value.code == "untrusted_certificate"
            assert "verify" in refused.value.detail
            with pytest.raises(UntrustedBridge):  # following does not retry what cannot work
                next(client.follow("whatever", wait=1))
    assert slept == []
    plain = url.replace("https://", "http://")
    with BridgeClient(plain, token=TOKEN) as client, pytest.raises(BridgeError) as refused:
        client.sessions()  # no token ever goes to the TLS port in clear and gets an answer
    assert refused.value.status in (0, 400)


def test_a_certificate_and_key_that_do_not_serve_tls_are_refused_at_load(folder):
    certificate, key = self_signed(folder, "a")
    _, other_key = self_signed(folder, "b")
    config = folder / "site.toml"

    def load(cert: Path, key: Path) -> str:
        config.write_text(
            f'[bridge.tcp]\nhost = "0.0.0.0"\ncertificate = "{cert}"\nkey = "{key}"\n'
            f'[bridge.tokens]\n"{TOKEN}" = "alice"\n'
        )
        config.chmod(0o600)
        with pytest.raises(ConfigError) as refused:
            load_config(config)
        return str(refused.value)

    assert "bridge.tcp.certificate" in load(certificate, other_key)
    assert "bridge.tcp.key: cannot read" in load(certificate, folder / "missing.key")
    assert "bridge.tcp.certificate: cannot read" in load(folder / "missing.crt", key)
    key.chmod(0o644)
    assert "bridge.tcp.key" in load(certificate, key)
    assert "chmod o-r" in load(certificate, key)
    key.chmod(0o600)
    assert load_config(config).bridge.tcp.certificate == certificate


def test_the_server_refuses_tls_files_it_cannot_use(folder):
    certificate, _ = self_signed(folder, "a")
    _, key = self_signed(folder, "b")
    server = BackgroundServer(
        create_app_for_nothing(),
        unix_path=folder / "s.sock",
        tcp=("127.0.0.1", 0),
        tls=TlsFiles(certificate=certificate, key=key),
    )
    with pytest.raises(ServerError, match="cannot serve TLS"):
        server.start()
    assert not (folder / "s.sock").exists()


def create_app_for_nothing():
    async def app(scope, receive, send):
        raise AssertionError("never called")

    return app


@pytest.mark.daemon
@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_an_explicit_ca_wins_over_the_environment(tls_daemon, folder, monkeypatch, variable):
    """The environment names the daemon's own CA, the caller another: the caller's is used, so a
    server the environment vouches for is refused (and, the other way, accepted)."""
    _, url, certificate = tls_daemon
    other, _ = self_signed(folder, "other")
    monkeypatch.setenv(variable, str(certificate))
    with BridgeClient(url, token=TOKEN, verify=other) as client, pytest.raises(UntrustedBridge):
        client.sessions()
    monkeypatch.setenv(variable, str(other))
    with BridgeClient(url, token=TOKEN, verify=certificate) as client:
        assert client.sessions() == []
    status = subprocess.run(
        [sys.executable, "-m", "coorm_bridge.cli.main", "status", "--url", url, "--ca", str(other)],
        env={**os.environ, variable: str(certificate), "COORM_BRIDGE_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        check=False,
        cwd=folder,  # not the repository's root, whose coorm_bridge/ would shadow the package
    )
    assert status.returncode != 0
    assert "certificate" in status.stderr
