"""The bridge's account is no Slurm operator, on the real Slurm 22.05 of slurm-local.sh.

Slurm 22.05 answers "Invalid user id" to a non-operator's ``scontrol create reservation`` and to
a ``users=`` name it does not know alike. The account is a Unix user made for the test (and
deleted after it); Slurm's commands run as it through ``setpriv``, which keeps the environment,
with a runner that prefixes them.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator, Mapping, Sequence

import pytest

from coorm_bridge.adapters.base import LacksRights, NotPermitted, ReservationSpec
from coorm_bridge.adapters.batch.runner import Completed, LocalRunner
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.command_backend import CliBackend
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings

pytestmark = pytest.mark.slurm


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
    return SlurmAdapter(settings, CliBackend(runner))


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
