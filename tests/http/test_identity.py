"""Who is who and what is printed: user names as the system's user database gives them, printable
session labels, escaped output, and configuration paths the system would refuse.

The API runs in-process (FastAPI's TestClient, bearer tokens); real uids over the Unix socket of a
real daemon are in tests/daemon/test_daemon_security.py.
"""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter, ValidationError

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.adapters.slurm import commands
from coorm_bridge.batchsim import WallClock, parse_platform
from coorm_bridge.cli.status import escaped, show_status
from coorm_bridge.core.batch import JobSpec, ReservationSpec
from coorm_bridge.core.model import Filter, Label, UserName
from coorm_bridge.http import routes
from coorm_bridge.http.app import create_app
from coorm_bridge.http.errors import Forbidden
from coorm_bridge.service.config import Config, ConfigError, load_config, parse_config
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

PLATFORM = '[[cluster]]\nname = "c1"\nhosts = 8\n'
#: Bearer tokens of users whose names the old ``Name`` check refused.
USERS = {
    "token-at-0123456789abcdef": "alice@example.org",
    "token-dollar-0123456789abc": "WORKSTATION01$",
    "token-upper-0123456789abcd": "Alice.Smith",
    "token-long-0123456789abcde": "u" * 255,
}
ALICE = next(iter(USERS))
USER_NAME = TypeAdapter(UserName)
LABEL = TypeAdapter(Label)


@pytest.fixture
def service(tmp_path):
    store = Store(tmp_path / "bridge.sqlite")
    yield assemble(Config(), MockAdapter(parse_platform(PLATFORM), WallClock()), store)
    store.close()


@pytest.fixture
def bridge(service):
    return service.bridge


@pytest.fixture
def client(service):
    with TestClient(create_app(service, tokens=USERS)) as client:
        yield client


def auth(token):
    return {"Authorization": f"Bearer {token}"}


# -- user names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        *("alice", "alice@example.org", "WORKSTATION01$", "Alice.Smith", "_svc", "1st-user"),
        *("uid1234", "a" * 255, "j.doe@ad.example.org", "x-y_z.w@h"),
    ],
)
def test_user_names_the_system_gives_are_accepted(name):
    assert USER_NAME.validate_python(name) == name
    spec = ReservationSpec(name="coorm-x", start=10, end=20, hosts=1, users=(name, "bob"))
    assert commands.create_reservation(commands.Target(), spec)[-1] == f"users={name},bob"
    assert JobSpec(name="j", user=name, argv=("true",), hosts=1, walltime=60).user == name


@pytest.mark.parametrize(
    "name",
    [
        *("", "-alice", ".alice", "@alice", "a b", "a=b", "a,b", "a:b", "a/b", "a;b", "a`id`"),
        *("a'b", "a$b", "a$$", "$", "1234", "1234$", "a\n", "a\x00", "DOM\\alice", "a" * 256),
        "älice",
    ],
)
def test_user_names_that_could_smuggle_anything_are_refused(name):
    with pytest.raises(ValidationError, match="usable user name"):
        USER_NAME.validate_python(name)
    with pytest.raises(ValueError, match="invalid user name"):
        commands.check_user(name)


def test_users_with_such_names_subscribe_and_own_their_sessions(client):
    sessions = {}
    for token, user in USERS.items():
        answer = client.post("/v1/sessions", json={"name": "run"}, headers=auth(token))
        assert answer.status_code == 201, answer.text
        sessions[user] = answer.json()["session"]
    for token, user in USERS.items():
        mine = client.get("/v1/sessions", headers=auth(token)).json()
        assert [(s["session"], s["owner"]) for s in mine] == [(sessions[user], user)]
    other = client.get(f"/v1/sessions/{sessions['alice@example.org']}", headers=auth(ALICE))
    assert other.status_code == 200
    foreign = client.get(f"/v1/sessions/{sessions['Alice.Smith']}", headers=auth(ALICE))
    assert foreign.status_code == 404


def test_configured_tokens_and_admins_take_such_names():
    config = parse_config(
        '[bridge]\nadmins = ["HOST$", "root@example.org"]\n'
        '[bridge.tokens]\n"token-at-0123456789abcdef" = "alice@example.org"\n'
    )
    assert config.bridge.admins == ("HOST$", "root@example.org")
    assert config.bridge.tokens == {"token-at-0123456789abcdef": "alice@example.org"}
    with pytest.raises(ConfigError, match=r"bridge\.tokens\.token-at-0123456789abcdef: .*usable"):
        parse_config('[bridge.tokens]\n"token-at-0123456789abcdef" = "alice smith"\n')


def test_a_uid_without_a_passwd_entry_is_named_by_its_number(bridge):
    uid = next(uid for uid in range(4_000_000, 4_001_000) if not _known(uid))
    user = routes.user_of_uid(uid)
    assert user == f"uid{uid}"
    assert bridge.subscribe(user, Filter(), None).session
    assert [row.owner for row in bridge.store.sessions()] == [user]


def test_the_users_own_name_is_used_and_an_unusable_one_forbidden(monkeypatch):
    me = pwd.getpwuid(0)
    assert routes.user_of_uid(0) == me.pw_name
    monkeypatch.setattr(
        routes.pwd, "getpwuid", lambda uid: pwd.struct_passwd(("bad name", *me[1:]))
    )
    with pytest.raises(Forbidden, match="bad name"):
        routes.user_of_uid(0)


def _known(uid):
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


# -- labels ---------------------------------------------------------------------------------------

BAD_LABELS = [
    "a\x00b",
    "\x1b[2J\x1b[31mred",
    "tab\there",
    "two\nlines",
    "\x7f",
    "\x85",
    "x\u202ey",
    "\u202aleft",
    "\u2066isolate\u2069",
    "\u200bhidden",
    "line\u2028sep",
    "\ud800",
    "\U000e0041tag",
]


@pytest.mark.parametrize("label", BAD_LABELS)
def test_unprintable_session_names_are_refused_naming_the_field(client, bridge, label):
    before = bridge.store.sessions()
    body = json.dumps({"name": label})  # ASCII: a lone surrogate travels as its JSON escape
    headers = {**auth(ALICE), "Content-Type": "application/json"}
    answer = client.post("/v1/sessions", content=body, headers=headers)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "invalid"
    assert answer.json()["detail"].startswith("body.name: ")
    assert bridge.store.sessions() == before


@pytest.mark.parametrize(
    "label",
    [
        "climate run 3",
        "Météo — étape 2",
        "日本語のジョブ",
        "👩\u200d🔬 lab",
        "a\u00a0b",
        "x" * 256,
        "",
    ],
)
def test_printable_session_names_are_kept(client, label):
    answer = client.post("/v1/sessions", json={"name": label}, headers=auth(ALICE))
    assert answer.status_code == 201, answer.text
    sid = answer.json()["session"]
    assert client.get(f"/v1/sessions/{sid}", headers=auth(ALICE)).json()["name"] == label


def test_labels_are_printable_and_at_most_256_characters():
    with pytest.raises(ValidationError, match="256"):
        LABEL.validate_python("x" * 257)
    with pytest.raises(ValidationError, match=r"character 3 \(U\+202E, Cf\) is not printable"):
        LABEL.validate_python("ab\u202ecd")


# -- what status prints --------------------------------------------------------------------------


def test_escaped_keeps_text_and_escapes_what_a_terminal_would_act_on():
    assert escaped("Météo 日本 a-b_c.d@e$ 👩") == "Météo 日本 a-b_c.d@e$ 👩"
    assert escaped("\x1b[2J\x07\x00\x9b") == "\\x1b[2J\\x07\\x00\\x9b"
    assert escaped("a\u202eb\u2066c\u2028d\u200b") == "a\\u202eb\\u2066c\\u2028d\\u200b"
    assert escaped("\ud800\U000e0041") == "\\ud800\\U000e0041"
    assert escaped("tab\there\nnewline") == "tab\\x09here\\x0anewline"


class _Hostile(BaseHTTPRequestHandler):
    """Answers every request as a bridge refusing it, with escape sequences in the detail."""

    def do_GET(self):
        body = json.dumps({"error": "x\x1b[31m", "detail": "\x1b]0;pwned\x07\x1b[2J gone"})
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_status_escapes_the_errors_it_prints(capsys):
    server = HTTPServer(("127.0.0.1", 0), _Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert show_status(f"http://127.0.0.1:{server.server_port}", None) == 1
    finally:
        server.shutdown()
        server.server_close()
    out = capsys.readouterr()
    assert "\x1b" not in out.err
    assert "\x07" not in out.err
    assert "\\x1b]0;pwned\\x07\\x1b[2J gone" in out.err
    assert "\n" not in out.err.rstrip("\n")


# -- paths the system refuses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "why"),
    [
        ('[bridge]\nsocket = "run/a\\u0000b.sock"\n', "bridge.socket", "NUL"),
        ('[bridge]\nstate_dir = "/var/lib/\\u0000"\n', "bridge.state_dir", "NUL"),
        (f'[bridge]\nstate_dir = "/var/{"x" * 256}"\n', "bridge.state_dir", "255 bytes"),
        (f'[bridge]\nstate_dir = "/{"x/" * 2100}"\n', "bridge.state_dir", "4095 bytes"),
        ('[adapter]\nkind = "mock"\nplatform = "p\\u0000.toml"\n', "adapter.platform", "NUL"),
    ],
)
def test_serve_refuses_a_path_the_system_refuses_in_one_line(tmp_path, text, key, why):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    result = subprocess.run(
        [sys.executable, "-c", SERVE, "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"coorm-bridge: {config}: {key}: ")
    assert why in line
    assert "\x00" not in line
    assert "Traceback" not in result.stderr


SERVE = "import sys; from coorm_bridge.cli.main import main; sys.exit(main())"


def test_a_configuration_file_name_the_system_refuses_is_a_configuration_error():
    with pytest.raises(ConfigError, match="null byte"):
        load_config("/etc/coorm\x00bridge.toml")
