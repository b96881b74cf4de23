"""Telling Slurm 22.05's two "Invalid user id" apart: the bridge's account is no operator, or a
reservation's user is unknown. The answers are scripted here as 22.05 gives them (see
tests/slurm/test_slurm_rights.py for the real thing)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from coorm_bridge.adapters.batch.backend import BatchFailure
from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.slurm import rights
from coorm_bridge.adapters.slurm.binding import SlurmBinding
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.core.batch import ReservationSpec, Unavailable

BAD_USER = Completed(1, "", "Error creating the reservation: Invalid user id\n")
BAD_TIME = Completed(1, "", "Error creating the reservation: Invalid time specified\n")
CONFIG = "SlurmUser               = slurm(64030)\nAccountingStorageType   = {}\n"


class Scripted(Runner):
    """Answers by the command's first words; records what ran."""

    def __init__(self, answers: Mapping[str, Completed | Exception]) -> None:
        self.answers = dict(answers)
        self.ran: list[tuple[str, ...]] = []

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        self.ran.append(tuple(argv))
        probe = "reservationname=coorm-rights-probe" in argv
        key = "probe" if probe else "id" if argv[0] == "id" else " ".join(argv[:3])
        answer = self.answers.get(key, Completed(0, "", ""))
        if isinstance(answer, Exception):
            raise answer
        return answer


def backend(**answers: Completed | Exception) -> tuple[SlurmCliBackend, Scripted]:
    runner = Scripted({k.replace("_", " "): v for k, v in answers.items()})
    return SlurmCliBackend(runner), runner


BINDING = SlurmBinding("alpha", partition="alpha")
SPEC = ReservationSpec(name="coorm-x", start=2_000_000_000, end=2_000_000_600, hosts=2,
                       users=("nosuchuser",))  # fmt: skip


def test_the_probe_is_a_reservation_in_2000_that_nothing_creates():
    argv = rights.probe(rights.Target(cluster="c1"))
    assert argv[:4] == ("scontrol", "-M", "c1", "create")
    assert "starttime=2000-01-01T00:00:00" in argv


def test_an_operator_gets_past_the_rights_check():
    cli, runner = backend(probe=BAD_TIME)
    cli.check_rights(BINDING)
    assert len(runner.ran) == 1


def test_a_non_operator_is_told_what_to_do_with_slurmdbd():
    config = Completed(0, CONFIG.format("accounting_storage/slurmdbd"), "")
    cli, _ = backend(probe=BAD_USER, id=Completed(0, "bridge\n", ""), scontrol_show_config=config)
    with pytest.raises(BatchFailure) as caught:
        cli.check_rights(BINDING)
    assert caught.value.kind == "no_rights"
    message = str(caught.value)
    assert message.startswith(
        "Slurm refuses to let bridge (the account the bridge runs Slurm's commands as) create "
        "reservations: it is not an operator (Slurm said: Error creating the reservation: "
        "Invalid user id). To fix, make it an operator: sacctmgr modify user where name=bridge "
        "set adminlevel=Operator"
    )
    assert "sacctmgr add user bridge account=<an account> adminlevel=Operator" in message
    assert "or run the bridge as SlurmUser (slurm) or root" in message


def test_without_slurmdbd_only_slurmuser_or_root_will_do():
    config = Completed(0, CONFIG.format("accounting_storage/none"), "")
    cli, _ = backend(probe=BAD_USER, id=Completed(0, "bridge\n", ""), scontrol_show_config=config)
    with pytest.raises(BatchFailure) as caught:
        cli.check_rights(BINDING)
    message = str(caught.value)
    assert "without slurmdbd (AccountingStorageType=accounting_storage/none)" in message
    assert "run the bridge as SlurmUser (slurm) or root" in message
    assert "sacctmgr" not in message


def test_the_remedy_is_given_even_when_the_account_and_config_cannot_be_read():
    cli, _ = backend(probe=BAD_USER, id=Unavailable("no"), scontrol_show_config=BAD_USER)
    with pytest.raises(BatchFailure, match="the bridge's account") as caught:
        cli.check_rights(BINDING)
    assert caught.value.kind == "no_rights"


def test_a_refused_reservation_is_blamed_on_the_account_when_the_probe_says_so():
    cli, _ = backend(scontrol_create_reservation=BAD_USER, probe=BAD_USER)
    with pytest.raises(BatchFailure) as caught:
        cli.create_reservation(BINDING, SPEC)
    assert caught.value.kind == "no_rights"


def test_a_refused_reservation_is_blamed_on_its_users_when_the_account_may():
    cli, _ = backend(scontrol_create_reservation=BAD_USER, probe=BAD_TIME)
    with pytest.raises(BatchFailure) as caught:
        cli.create_reservation(BINDING, SPEC)
    assert caught.value.kind == "invalid_user"
    assert "Slurm knows no such user among those allowed: nosuchuser" in str(caught.value)


def test_a_probe_without_answer_blames_nobody():
    cli, _ = backend(scontrol_create_reservation=BAD_USER, probe=Unavailable("slurmctld is away"))
    with pytest.raises(Unavailable, match="away"):
        cli.create_reservation(BINDING, SPEC)


def test_the_config_values_are_read_from_show_config():
    text = "Configuration data as of 2026-11-24T03:08:45\nSlurmUser               = root(0)\n"
    assert rights.config_values(text) == {"SlurmUser": "root(0)"}
