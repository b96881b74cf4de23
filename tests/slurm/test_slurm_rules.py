"""Slurm's own per-user rules on a real Slurm 22.05 with slurmdbd and its limits enforced.

The site: partition alpha (4 nodes) with MaxTime=2-00:00:00, MaxNodes=3 and
AllowAccounts=chem,physics,root; accounts science > chem (science: MaxWall 02:00:00, GrpTRES
node=3), physics and other; alice in chem with MaxWall 01:00:00; bob in physics with the QOS
small (MaxTRESPerUser node=2, MaxWall 04:00:00) as his default; carol without an association;
dave in other (not allowed in the partition). The QOSes deny on limits (DenyOnLimit), so that
Slurm refuses at submission what it would otherwise keep pending for ever.

The rules the adapter reads give each bound with its setting, and the jobs Slurm refuses
(``sbatch --test-only`` as each user) are exactly those the rules refuse. Then a real daemon
refuses a request past each rule with 403, changing nothing, places one within, and cuts the
user's view to their host bound. The users are this run's own (added and deleted by name).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import subprocess
import time
from collections.abc import Iterator

import pytest

from coorm_bridge.adapters.batch.runner import LocalRunner
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.rules import SlurmRules
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from tests import daemons
from tests.slurm.conftest import SlurmInstance

pytestmark = pytest.mark.slurm

FAILSAFE = 120
TAG = f"{os.getpid() % 100000}"
USERS = {who: f"cr{who[0]}{TAG}" for who in ("alice", "bob", "carol", "dave")}
TOKEN = {who: f"{who}-token-{TAG}-0123456789" for who in USERS}


@contextlib.contextmanager
def system_users(names: list[str]) -> Iterator[None]:
    """Unix users of this run's own (Slurm checks reservation users and job owners there)."""
    added = []
    try:
        for name in names:
            subprocess.run(
                ["useradd", "--system", "-M", "-N", "-s", "/usr/sbin/nologin", name],
                check=True, capture_output=True, timeout=30,
            )  # fmt: skip
            added.append(name)
        yield
    finally:
        for name in added:
            subprocess.run(["userdel", name], check=False, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def site(slurm_accounting):
    """The rules of the module's docstring, set in the test Slurm; undone afterwards."""
    s = slurm_accounting
    alice, bob, _carol, dave = USERS.values()
    with system_users(list(USERS.values())):
        sacctmgr = ("sacctmgr", "-i")
        s.run(*sacctmgr, "add", "qos", "small", "MaxTRESPerUser=node=2", "MaxWall=04:00:00")
        s.run(*sacctmgr, "modify", "qos", "where", "name=normal,small", "set", "Flags=DenyOnLimit")
        s.run(*sacctmgr, "add", "account", "science", "parent=root", "MaxWall=02:00:00",
              "GrpTRES=node=3")  # fmt: skip
        s.run(*sacctmgr, "add", "account", "chem", "parent=science")
        s.run(*sacctmgr, "add", "account", "physics,other", "parent=root")
        s.run(*sacctmgr, "add", "user", alice, "account=chem", "MaxWall=01:00:00")
        s.run(*sacctmgr, "add", "user", bob, "account=physics", "qos=normal,small",
              "defaultqos=small")  # fmt: skip
        s.run(*sacctmgr, "add", "user", dave, "account=other")
        s.run("scontrol", "update", "partitionname=alpha", "MaxTime=2-00:00:00", "MaxNodes=3",
              "AllowAccounts=chem,physics,root")  # fmt: skip
        try:
            yield s
        finally:
            s.reset()
            s.run("scontrol", "update", "partitionname=alpha", "MaxTime=UNLIMITED",
                  "MaxNodes=UNLIMITED", "AllowAccounts=ALL", check=False)  # fmt: skip
            for name in USERS.values():
                s.run(*sacctmgr, "delete", "user", f"name={name}", check=False)
            s.run(*sacctmgr, "delete", "account", "chem,physics,other", check=False)
            s.run(*sacctmgr, "delete", "account", "science", check=False)
            s.run(*sacctmgr, "delete", "qos", "small", check=False)


def read_rules(slurm) -> SlurmRules:
    settings = SlurmSettings(
        clusters=(SlurmCluster(name="alpha", partition="alpha", slurm_conf=slurm.conf),)
    )
    with contextlib.closing(SlurmAdapter(settings, SlurmCliBackend(LocalRunner()))) as adapter:
        rules = adapter.rules("alpha")
    assert isinstance(rules, SlurmRules)
    return rules


def settings_of(rules: SlurmRules, name: str) -> tuple[str | None, str | None, str | None]:
    mine = rules.for_user(name, [])
    return (
        mine.denied,
        None if mine.hosts is None else mine.hosts.setting,
        None if mine.duration is None else mine.duration.setting,
    )


def test_each_bound_comes_with_its_setting(site):
    rules = read_rules(site)
    alice, bob, carol, dave = USERS.values()
    assert settings_of(rules, alice) == (
        None,
        "partition MaxNodes is 3",
        f"association chem/{alice} MaxWall is 01:00:00",
    )
    assert settings_of(rules, bob) == (
        None,
        "QOS small MaxTRESPerUser is node=2",
        "QOS small MaxWall is 04:00:00",
    )
    assert settings_of(rules, "root") == (
        None,
        "partition MaxNodes is 3",
        "partition MaxTime is 2-00:00:00",
    )
    assert settings_of(rules, carol)[0] == (
        f"{carol} has no association on cluster alpha "
        "(AccountingStorageEnforce=associations,limits,qos)"
    )
    assert settings_of(rules, dave)[0] == (
        f"partition AllowAccounts is chem,physics,root ({dave}'s default account is other)"
    )


def slurm_refuses(slurm, name: str, nodes: int, minutes: int) -> bool:
    """Whether Slurm refuses ``name``'s job of ``nodes`` nodes for ``minutes`` (its verdict at
    submission, ``sbatch --test-only`` run as that user)."""
    user = pwd.getpwnam(name)
    done = slurm.run(
        "setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
        "sbatch", "--test-only", "-p", "alpha", f"--nodes={nodes}", f"--time={minutes}",
        "--wrap", "true", check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert ("to start at" in said) == (done.returncode == 0), said
    return done.returncode != 0


def test_the_jobs_slurm_refuses_are_exactly_those_the_rules_refuse(site):
    rules = read_rules(site)
    verdicts = []
    for name in [*USERS.values(), "root"]:
        mine = rules.for_user(name, [])
        for nodes in (1, 2, 3, 4):
            for minutes in (30, 60, 61, 150, 2880, 2881):
                by_rules = mine.refusal("alpha", nodes, minutes * 60) is not None
                by_slurm = slurm_refuses(site, name, nodes, minutes)
                verdicts.append((name, nodes, minutes, by_rules, by_slurm))
    disagree = [v for v in verdicts if v[3] != v[4]]
    assert disagree == []
    assert {v[3] for v in verdicts} == {True, False}  # both sides were tried


# -- through a real daemon --------------------------------------------------------------------


def refusal(client: BridgeClient, sid: str, request: Request) -> str:
    with pytest.raises(BridgeError) as refused:
        client.request(sid, request)
    assert refused.value.status == 403
    assert refused.value.code == "batch_rule"
    return refused.value.detail


def first_view(client: BridgeClient, sid: str) -> list[tuple[int, int]]:
    """The session's first view of alpha, as change events carry it (the deadline is a
    failsafe only)."""
    deadline, after = time.monotonic() + FAILSAFE, 0
    while time.monotonic() < deadline:
        for event in client.events(sid, after=after, wait=5):
            after = event.seq
            for change in getattr(event, "changes", ()) or ():
                if change.cluster == "alpha" and change.profile is not None:
                    return [tuple(step) for step in change.profile.steps]
    raise AssertionError("no view of alpha came")


def placed(site: SlurmInstance, client: BridgeClient, sid: str, user: str) -> str:
    """Wait until Slurm holds a placeholder for ``user`` (the bridge makes it on its poller's
    thread, after the request was acknowledged); Slurm's reservations then."""
    deadline = time.monotonic() + FAILSAFE
    while time.monotonic() < deadline:
        shown = site.run("scontrol", "-o", "show", "reservation").stdout
        if f"Users={user}" in shown:
            return shown
        client.events(sid, after=0, wait=2)
    raise AssertionError(f"no placeholder for {user} in Slurm for {sid}")


def test_a_daemon_refuses_requests_past_each_rule_and_places_one_within(site, make_daemon):
    port = daemons.free_port()
    tokens = {TOKEN[who]: name for who, name in USERS.items()}
    daemon = make_daemon(daemons.slurm_config(site, port=port, tokens=tokens), port=port).start()
    token, alice_name = TOKEN, USERS["alice"]
    with daemon.client(token=token["alice"]) as alice, daemon.client(token=token["bob"]) as bob:
        sid = alice.subscribe(Filter()).session
        assert max(n for _, n in first_view(alice, sid)) == 3  # 4 free; one job of hers: 3
        assert refusal(alice, sid, Request(nodes={"alpha": 1}, duration=3601)) == (
            f"alpha: association chem/{alice_name} MaxWall is 01:00:00; the request lasts "
            f"3601 s (3600 s allowed): the batch system would refuse {alice_name} this job"
        )
        assert refusal(alice, sid, Request(nodes={"alpha": 4}, duration=60)).startswith(
            "alpha: partition MaxNodes is 3; the request asks for 4 hosts there"
        )
        assert alice.session(sid).request is None  # nothing was written
        bid = bob.subscribe(Filter()).session
        assert max(n for _, n in first_view(bob, bid)) == 2
        assert refusal(bob, bid, Request(nodes={"alpha": 3}, duration=60)).startswith(
            "alpha: QOS small MaxTRESPerUser is node=2; the request asks for 3 hosts there"
        )
        assert bob.session(bid).request is None
        alice.request(sid, Request(nodes={"alpha": 3}, duration=3600))
        shown = placed(site, alice, sid, alice_name)
        assert USERS["bob"] not in shown  # his refused requests held nothing
    with daemon.client(token=token["carol"]) as carol, pytest.raises(BridgeError) as hidden:
        carol.subscribe(Filter(clusters=("alpha",)))
    assert hidden.value.status == 403
    assert f"{USERS['carol']} has no association on cluster alpha" in hidden.value.detail
