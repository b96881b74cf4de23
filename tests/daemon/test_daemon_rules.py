"""A batch system's own per-user rules, against a real ``coorm-bridge serve`` on the mock: the
platform file's ``[[cluster.rule]]`` tables stand for a site's rules (Slurm's are tested on the
real Slurm in tests/slurm/test_slurm_rules.py). A request past a rule is refused naming the
cluster and the setting, and changes nothing; a user's view shows only what they may ask for.

Each test starts its own daemon and stops only that process, by PID.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from tests import daemons
from tests.daemons import free_port, wait_for

pytestmark = pytest.mark.daemon

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789abc"
FAILSAFE = 60

#: c1 (8 hosts): one job of anyone's at most 4 hosts for 600 s, none of bob's at all; c2 (4
#: hosts): no rule.
RULES = """
[[cluster.rule]]
max_hosts = 4
max_duration = 600
[[cluster.rule]]
users = ["bob"]
deny = true
"""
PLATFORM = '[[cluster]]\nname = "c1"\nhosts = 8\n' + RULES + '[[cluster]]\nname = "c2"\nhosts = 4\n'


class Daemon(daemons.Daemon):
    """Two clusters of 8 and 4 hosts, the first with rules; tokens for alice and bob."""

    def __init__(self, folder: Path, platform: str = PLATFORM) -> None:
        port = free_port()
        config = daemons.config(port=port, tokens={ALICE: "alice", BOB: "bob"})
        super().__init__(folder, config, platform, port)


@pytest.fixture
def make_daemon(make_daemon):
    return functools.partial(make_daemon, cls=Daemon)


def refusal(client: BridgeClient, sid: str, request: Request) -> BridgeError:
    with pytest.raises(BridgeError) as refused:
        client.request(sid, request)
    assert refused.value.status == 403
    assert refused.value.code == "batch_rule"
    return refused.value


def test_a_request_past_a_rule_is_refused_naming_it_and_one_within_starts(make_daemon):
    daemon = make_daemon().start()
    with daemon.client(token=ALICE) as alice:
        sid = alice.subscribe(Filter()).session
        too_big = refusal(alice, sid, Request(nodes={"c1": 5, "c2": 1}, duration=60))
        assert too_big.detail == (
            "c1: platform rule #1 (everyone) max_hosts is 4; the request asks for 5 hosts there: "
            "the batch system would refuse alice this job"
        )
        too_long = refusal(alice, sid, Request(nodes={"c1": 1}, duration=601))
        assert too_long.detail.startswith(
            "c1: platform rule #1 (everyone) max_duration is 600 s; the request lasts 601 s"
        )
        assert alice.session(sid).request is None  # nothing was written
        # c2 has no rule: five hours there are the bridge's own [limits] to judge.
        alice.request(sid, Request(nodes={"c1": 4, "c2": 4}, duration=600))
        wait_for(alice, sid, "start")


def test_views_show_a_user_only_what_they_may_ask_for(make_daemon):
    daemon = make_daemon().start()
    with daemon.client(token=ALICE) as alice, daemon.client(token=BOB) as bob:
        sid = alice.subscribe(Filter()).session
        view = wait_for_view(alice, sid)
        assert max(n for _, n in view["c1"]) == 4  # 8 free, but one job of hers takes 4
        assert max(n for _, n in view["c2"]) == 4
        # bob may run nothing on c1: he does not see it, and cannot ask for it by name.
        subscribed = bob.subscribe(Filter())
        assert [c.name for c in subscribed.clusters] == ["c2"]
        with pytest.raises(BridgeError) as hidden:
            bob.request(subscribed.session, Request(nodes={"c1": 1}, duration=60))
        assert hidden.value.status == 422  # c1 is not one of his session's clusters
        with pytest.raises(BridgeError) as denied:
            bob.subscribe(Filter(clusters=("c1",)))
        assert denied.value.status == 403
        assert denied.value.detail == (
            "no cluster the filter lets through takes jobs of yours: "
            "c1: platform rule #2 (bob) denies bob any job"
        )


def test_rules_changed_in_the_platform_file_apply_after_a_restart_that_keeps_the_state(
    make_daemon, folder
):
    daemon = make_daemon().start()
    with daemon.client(token=ALICE) as alice:
        sid = alice.subscribe(Filter()).session
        refusal(alice, sid, Request(nodes={"c1": 6}, duration=60))
    daemon.stop()
    lifted = PLATFORM.replace("max_hosts = 4\n", "")
    again = make_daemon(lifted).start()  # the same folder: the platform's saved state resumes
    with again.client(token=ALICE) as alice:
        assert alice.session(sid).state == "submitted"  # the session carried on, no request yet
        alice.request(sid, Request(nodes={"c1": 6}, duration=60))
        wait_for(alice, sid, "start")


def wait_for_view(client: BridgeClient, sid: str) -> dict[str, list[tuple[int, int]]]:
    """The session's first view, as change events carry it (the deadline is a failsafe)."""
    deadline, after = time.monotonic() + FAILSAFE, 0
    view: dict[str, list[tuple[int, int]]] = {}
    while time.monotonic() < deadline and len(view) < 2:
        for event in client.events(sid, after=after, wait=5):
            after = event.seq
            for change in getattr(event, "changes", ()) or ():
                if change.profile is not None:
                    view[change.cluster] = [tuple(step) for step in change.profile.steps]
    assert len(view) == 2, f"no view of both clusters came: {view}"
    return view
