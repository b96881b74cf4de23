"""The OAR adapter's commands on a front-end over SSH (a private OpenSSH server on loopback, as
root, which submits each placeholder as its owner through ``runuser``): the same snapshot as
here, a placeholder held and deleted, and an unknown host key refused before anything runs."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from coorm_bridge.adapters.oar.adapter import OarAdapter
from coorm_bridge.adapters.oar.plugin import make_oar_adapter
from coorm_bridge.adapters.oar.settings import OarSettings
from coorm_bridge.core.batch import AdapterError, ReservationSpec
from tests.oar.lab import OarInstance
from tests.sshd import Sshd, running_sshd

pytestmark = pytest.mark.oar


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with running_sshd(tmp_path_factory.mktemp("sshd"), required_by="COORM_REQUIRE_OAR") as server:
        yield server


def over_ssh(oar: OarInstance, sshd: Sshd, known_hosts: str | None = None) -> OarAdapter:
    ssh = {
        "host": "127.0.0.1",
        "port": sshd.port,
        "user": "root",
        "key_file": str(sshd.client_key),
        "known_hosts": known_hosts or str(sshd.known_hosts),
    }
    table = {"kind": "oar", "cluster": [{"name": c} for c in oar.clusters], "ssh": ssh}
    return make_oar_adapter(OarSettings.model_validate(table))


def test_the_commands_over_ssh_read_and_hold_as_here(oar: OarInstance, sshd: Sshd) -> None:
    oar.reset()
    user = oar.users[0]
    oar.submit("-t", "noop", "-p", "cluster='alpha'", "-l", "/host=2,walltime=0:10:00", user=user)
    remote = over_ssh(oar, sshd)
    here = make_oar_adapter(
        OarSettings.model_validate({"kind": "oar", "cluster": [{"name": c} for c in oar.clusters]})
    )
    try:
        assert [c.model_copy(update={"submission": None}) for c in remote.clusters()] == [
            c.model_copy(update={"submission": None}) for c in here.clusters()
        ]
        assert {c.submission.front_end for c in remote.clusters()} == {"127.0.0.1"}
        logins = sshd.accepted()
        now = remote.now()
        spec = ReservationSpec(
            name="coorm-ssh-beta", start=now + 900, end=now + 1500, hosts=2, users=(user,)
        )
        made = remote.create_reservation("beta", spec)
        assert (made.start, made.end, len(made.host_names)) == (spec.start, spec.end, 2)
        shot = here.snapshot()
        assert shot.clusters["beta"].reservations[0].name == spec.name
        assert shot.clusters["beta"].reservations[0].users == (user,)  # runuser: the owner's
        for name in oar.clusters:
            a, b = remote.snapshot().clusters[name], here.snapshot().clusters[name]
            assert (a.nodes, a.jobs, a.reservations) == (b.nodes, b.jobs, b.reservations)
        remote.delete_reservation("beta", spec.name)
        deadline = time.monotonic() + 30  # oardel asks; OAR ends the job at its next pass
        while here.reservation("beta", spec.name) is not None:
            assert time.monotonic() < deadline, "the placeholder stayed"
            time.sleep(0.2)
        assert sshd.accepted() == logins  # one connection, reused by every command
    finally:
        remote.close()
        here.close()
        oar.reset()


def test_an_unknown_host_key_is_refused(oar: OarInstance, sshd: Sshd, tmp_path) -> None:  # type: ignore[no-untyped-def]
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    remote = over_ssh(oar, sshd, known_hosts=str(empty))
    try:
        with pytest.raises(AdapterError, match=r"127\.0\.0\.1"):
            remote.snapshot()
    finally:
        remote.close()
