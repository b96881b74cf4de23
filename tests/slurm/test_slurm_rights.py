"""The bridge's account is no Slurm operator, on the real Slurm 22.05 of slurm-local.sh.

Slurm 22.05 answers "Invalid user id" to a non-operator's ``scontrol create reservation`` and to
a ``users=`` name it does not know alike. The account is a Unix user made for the test (and
deleted after it); Slurm's commands run as it through ``setpriv``, which keeps the environment:
in-process with a runner that prefixes them, and for a real daemon (which runs as root here)
with wrappers of the same name first on its PATH.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from coorm_bridge.adapters.batch.runner import Completed, LocalRunner
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.plugin import make_slurm_adapter
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import LacksRights, NotPermitted, ReservationSpec
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.client import BridgeClient
from coorm_bridge.service.config import Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store
from tests import daemons

pytestmark = pytest.mark.slurm

COMMANDS = ("scontrol", "sinfo", "squeue", "sbatch", "scancel", "id")


@pytest.fixture(scope="module")
def account() -> Iterator[pwd.struct_passwd]:
    """A Unix account of this run's own, unknown to Slurm's accounting: no operator."""
    name = f"cbu{os.getpid()}"
    subprocess.run(
        ["useradd", "--system", "-M", "-N", "-s", "/usr/sbin/nologin", name],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True, timeout=30)


def as_account(account: pwd.struct_passwd) -> tuple[str, ...]:
    return ("setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups")


class AsAccount(LocalRunner):
    """Every command run as ``account`` (setpriv keeps SLURM_CONF and TZ)."""

    def __init__(self, account: pwd.struct_passwd) -> None:
        super().__init__()
        self.prefix = as_account(account)

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        return super().run((*self.prefix, *argv), env=env, timeout=timeout)


def adapter_as(slurm, runner: LocalRunner) -> SlurmAdapter:
    settings = SlurmSettings(
        clusters=(SlurmCluster(name="a", partition="alpha", slurm_conf=slurm.conf),)
    )
    return SlurmAdapter(settings, SlurmCliBackend(runner))


def spec(adapter: SlurmAdapter, *users: str) -> ReservationSpec:
    now = adapter.now()
    return ReservationSpec(name="coorm-r1", start=now + 600, end=now + 900, hosts=1, users=users)


def shown(slurm) -> str:
    return slurm.run("scontrol", "-o", "show", "reservation").stdout


def test_a_non_operator_is_told_so_with_the_remedy_and_nothing_is_made(slurm_partitions, account):
    adapter = adapter_as(slurm_partitions, AsAccount(account))
    name = account.pw_name
    try:
        with pytest.raises(LacksRights) as caught:
            adapter.check_rights("a")
        reason = caught.value.reason
        assert reason.startswith(
            f"Slurm refuses to let {name} (the account the bridge runs Slurm's commands as) "
            "create reservations: it is not an operator (Slurm said: Error creating the "
            "reservation: Invalid user id). To fix, without slurmdbd (AccountingStorageType="
            "accounting_storage/none) only SlurmUser and root may: run the bridge as root."
        )
        assert str(caught.value) == f"a: {reason}"
        # A placeholder is refused for the same reason: the bridge's, not its owner's.
        with pytest.raises(LacksRights) as refused:
            adapter.create_reservation("a", spec(adapter, "root"))
        assert refused.value.reason == reason
        assert not isinstance(refused.value, NotPermitted)
    finally:
        adapter.close()
    assert "ReservationName=" not in shown(slurm_partitions)  # neither the probe nor coorm-r1


def test_an_operator_passes_and_an_unknown_owner_is_the_owners_fault(slurm_partitions):
    adapter = adapter_as(slurm_partitions, LocalRunner())  # root: the test's SlurmUser
    try:
        adapter.check_rights("a")
        with pytest.raises(NotPermitted) as caught:
            adapter.create_reservation("a", spec(adapter, "nosuchuser"))
        assert str(caught.value) == (
            "a: Error creating the reservation: Invalid user id (Slurm knows no such user among "
            "those allowed: nosuchuser; the bridge's own account may create reservations)"
        )
    finally:
        adapter.close()
    assert "ReservationName=" not in shown(slurm_partitions)


def test_a_session_for_an_owner_slurm_does_not_know_ends_alone(slurm_partitions, tmp_path):
    settings = SlurmSettings(
        clusters=tuple(
            SlurmCluster(name=p, partition=p, slurm_conf=slurm_partitions.conf)
            for p in ("alpha", "beta")
        )
    )
    config = Config(
        policy=PolicyConfig(interval=0.5, fair_start=3),
        placement=PlacementSettings(poll_interval=1.0),
        limits=LimitSettings(held_share=1.0),  # one user may hold every host (default: half)
        adapter=settings,
    )
    store = Store(tmp_path / "bridge.sqlite")
    service = assemble(config, make_slurm_adapter(settings), store)
    bridge, loop = service.bridge, service.loop
    loop.start()
    try:
        assert bridge.health().status == "ok"  # root may: no problem at start
        sessions = {}
        for owner in ("nosuchuser", "root"):
            sid = bridge.subscribe(owner, Filter(clusters=("alpha", "beta")), None).session
            bridge.put_request(owner, sid, {"alpha": 2, "beta": 2}, 300)
            sessions[owner] = sid

        def first(sid: str, kind: str):
            return next((e for e in store.events(sid) if e.type == kind), None)

        error = wait_for(lambda: first(sessions["nosuchuser"], "error"))
        assert "Slurm knows no such user among those allowed: nosuchuser" in error.reason
        assert wait_for(lambda: first(sessions["root"], "start"))
        assert store.session(sessions["nosuchuser"]).state is AppState.FAILED
        assert bridge.health().problems == ()
    finally:
        loop.stop()
        service.close()
        store.close()
        slurm_partitions.reset()


# --- a real daemon ------------------------------------------------------------------------------


class Daemon(daemons.Daemon):
    """``coorm-bridge serve`` whose Slurm commands run as ``account`` (wrappers on its PATH);
    started by the first :meth:`client`."""

    def __init__(self, folder: Path, slurm, account: pwd.struct_passwd) -> None:
        wrappers = folder / "bin"
        wrappers.mkdir()
        for command in COMMANDS:
            real = shutil.which(command)
            assert real is not None, command
            script = wrappers / command
            script.write_text(f'#!/bin/sh\nexec {" ".join(as_account(account))} {real} "$@"\n')
            script.chmod(0o755)
        env = {**os.environ, "PATH": f"{wrappers}{os.pathsep}{os.environ['PATH']}"}
        super().__init__(folder, daemons.slurm_config(slurm, partitions=False), env=env)

    def client(self, token: str | None = None) -> BridgeClient:
        if self.process is None:
            self.start()
        return super().client(token)

    def lines(self, level: str) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if f" {level} " in line]


def wait_for(predicate, timeout: float = 60, step: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def test_a_daemon_without_rights_says_so_keeps_its_sessions_and_resumes_once_granted(
    slurm_clusters, account
):
    slurm, name = slurm_clusters, account.pw_name
    folder = Path(tempfile.mkdtemp(prefix="cbg-", dir="/tmp"))  # short: a socket path
    daemon = Daemon(folder, slurm, account)
    granted = False
    try:
        with daemon.client() as client:
            # Told before any session: health and one ERROR per cluster, with the remedy.
            health = client.health()
            assert health.status == "degraded", health
            (problem,) = health.problems
            assert problem.kind == "rights"
            assert problem.clusters == tuple(slurm.clusters)
            assert f"sacctmgr modify user where name={name} set adminlevel=Operator" in (
                problem.message
            )
            sid = client.subscribe(Filter(clusters=tuple(slurm.clusters)), name="coupled").session
            nodes = dict.fromkeys(slurm.clusters, 2)
            client.request(sid, Request(nodes=nodes, duration=300))

            # Tried again and told again: a newer placement_failed replaces the one before it
            # (a waiting session's events are coalesced), so its number moves on.
            first: list[int] = []

            def told():
                found = [e for e in client.events(sid) if e.type == "placement_failed"]
                if found and not first:
                    first.append(found[-1].seq)
                return found if found and found[-1].seq > first[0] else None

            failed = wait_for(told, timeout=30)
            assert "the bridge lacks the rights to hold reservations on" in failed[0].reason
            assert "its admin was told" in failed[0].reason
            assert "Invalid user id" in failed[0].reason
            assert client.session(sid).state is AppState.WAITING
            kinds = {e.type for e in client.events(sid)}
            assert not kinds & {"error", "killed", "ended"}, kinds
            errors = daemon.lines("ERROR")
            assert len(errors) == len(slurm.clusters), errors  # once each, not per attempt
            assert all("not an operator" in line for line in errors)

            # The admin's fix, as the message gives it; no restart.
            slurm.run("sacctmgr", "-i", "add", "user", name, "account=root", "adminlevel=Operator")
            granted = True
            start = wait_for(
                lambda: next((e for e in client.events(sid) if e.type == "start"), None)
            )
            assert set(start.allocations) == set(slurm.clusters)
            health = wait_for(lambda: (h := client.health()).status == "ok" and h)
            assert health.problems == ()
            assert len(daemon.lines("ERROR")) == len(slurm.clusters)
            assert sum("solved" in line for line in daemon.lines("WARNING")) == len(slurm.clusters)
            client.done(sid)
            wait_for(lambda: client.session(sid).state is AppState.FINISHED)
    finally:
        daemon.stop()
        if granted:
            slurm.run("sacctmgr", "-i", "delete", "user", f"name={name}", check=False)
        noted = [line for line in daemon.log.read_text().splitlines() if " INFO " not in line]
        print("daemon log, but its INFO lines:", *noted, sep="\n  ")
        slurm.reset()
        shutil.rmtree(folder, ignore_errors=True)
