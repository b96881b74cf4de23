"""SIGHUP (``systemctl reload``) on a real ``coorm-bridge serve``: the file's ``[limits]``,
``bridge.admins`` and ``bridge.tokens`` take effect at the next request, without a restart; a
file that cannot be used is refused with one log line naming file and key, and the daemon goes on
with the settings it had.

Each test awaits the reload's own log line (one per SIGHUP) before it asks again, rather than
sleeping; the failsafe only ends a test that would hang.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coorm_bridge.core.model import Filter
from coorm_bridge.launchers.client import BridgeError
from tests import daemons

pytestmark = pytest.mark.daemon

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
CAROL = "carol-token-0123456789"
FAILSAFE = 120
#: What each reload logs once: applied, or refused.
RELOAD_LINE = ("reloaded ", "reload (SIGHUP) refused")


def text(
    port: int,
    limits: str = "hosts = 2",
    admins: tuple[str, ...] = (),
    tokens: dict[str, str] | None = None,
) -> str:
    """A daemon's file: its socket, TCP on ``port`` with ``tokens`` (default alice's and
    bob's), ``admins``, and the ``[limits]`` table's body ``limits``."""
    known = {ALICE: "alice", BOB: "bob"} if tokens is None else tokens
    base = daemons.config(port=port, tokens=known, admins=list(admins), limits={})
    return f"{base}[limits]\n{limits}\n"


class Daemon(daemons.Daemon):
    """Two clusters (c1: 8 hosts, c2: 4), TCP with tokens, [limits] hosts = 2 to start with."""

    def __init__(self, folder: Path) -> None:
        port = daemons.free_port()
        super().__init__(folder, text(port), daemons.PLATFORM, port)

    def text(self, **options: Any) -> str:
        """Its file with ``options`` (see :func:`text`)."""
        assert self.port is not None
        return text(self.port, **options)

    def rewrite(self, content: str) -> None:
        assert self.config is not None
        self.config.write_text(content)

    def reload(self) -> str:
        """SIGHUP, then the reload's log line once it came."""
        assert self.process is not None
        before = self.reload_lines()
        os.kill(self.process.pid, signal.SIGHUP)
        deadline = time.monotonic() + FAILSAFE
        while len(lines := self.reload_lines()) == len(before):
            assert time.monotonic() < deadline, "no reload logged"
            assert self.process.poll() is None, self.log.read_text()
            time.sleep(0.02)
        [line] = lines[len(before) :]
        return line

    def reload_lines(self) -> list[str]:
        return [x for x in self.log.read_text().splitlines() if any(s in x for s in RELOAD_LINE)]


@pytest.fixture
def make_daemon(make_daemon: Callable[..., Daemon]) -> Callable[..., Daemon]:
    """Daemons of this module's kind (tests/conftest.py stops them)."""
    return functools.partial(make_daemon, cls=Daemon)


def over_limit(call: Callable[[], Any]) -> BridgeError:
    with pytest.raises(BridgeError) as refused:
        call()
    assert 400 <= refused.value.status < 500
    return refused.value


def test_a_higher_limit_takes_effect_on_sighup(make_daemon) -> None:
    daemon = make_daemon().start()
    with daemon.client(ALICE) as alice:
        sid = alice.subscribe(Filter()).session
        refused = over_limit(lambda: alice.request(sid, nodes={"c1": 4}, duration=60))
        assert "limits.hosts allows 2" in str(refused)

        daemon.rewrite(daemon.text(limits="hosts = 8"))
        line = daemon.reload()

        assert line.endswith(f"reloaded {daemon.config} (SIGHUP): limits.hosts: 2 -> 8")
        answer = alice.request(sid, nodes={"c1": 4}, duration=60)
        assert answer.estimated_start is not None
    assert daemon.stop() == 0
    daemon.assert_stopped_cleanly()


def test_a_bad_file_is_refused_and_the_old_limits_stay(make_daemon) -> None:
    daemon = make_daemon().start()
    with daemon.client(ALICE) as alice:
        sid = alice.subscribe(Filter()).session

        daemon.rewrite(daemon.text(limits="hosts = 0"))
        line = daemon.reload()

        assert " ERROR " in line
        assert f"refused, the settings in force stay: {daemon.config}: limits.hosts: " in line
        refused = over_limit(lambda: alice.request(sid, nodes={"c1": 4}, duration=60))
        assert "limits.hosts allows 2" in str(refused)
        assert alice.request(sid, nodes={"c1": 2}, duration=60).estimated_start is not None
        assert alice.health().status == "ok"
    assert daemon.process is not None
    assert daemon.process.poll() is None


def test_new_admins_and_tokens_take_effect_and_other_keys_wait_for_a_restart(make_daemon) -> None:
    daemon = make_daemon().start()
    with daemon.client(ALICE) as alice, daemon.client(BOB) as bob:
        sid = alice.subscribe(Filter()).session
        assert bob.sessions() == []
        over_limit(lambda: bob.withdraw(sid))  # not his: it looks like no session at all
        with daemon.client(CAROL) as carol:
            over_limit(carol.sessions)  # an unknown token

        new = daemon.text(admins=("bob",), tokens={ALICE: "alice", BOB: "bob", CAROL: "carol"})
        daemon.rewrite(new.replace("poll_interval = 0.5", "poll_interval = 2.0"))
        line = daemon.reload()

        assert " WARNING " in line
        assert "bridge.admins: [] -> [bob]" in line
        assert "bridge.tokens: 2 -> 3 tokens; new for carol" in line
        assert line.endswith("needs a restart, left as it was: placement.poll_interval")
        assert [s.session for s in bob.sessions()] == [sid]
        assert bob.withdraw(sid).state == "cancelled"  # an admin acts on alice's session
        with daemon.client(CAROL) as carol:
            assert carol.sessions() == []

        daemon.rewrite(daemon.text(tokens={ALICE: "alice"}))  # bob's token withdrawn, bob no admin
        line = daemon.reload()
        assert "withdrawn for bob" in line
        over_limit(bob.sessions)
