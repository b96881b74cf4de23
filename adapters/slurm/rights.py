"""Whether Slurm lets the bridge's account hold reservations, and what to tell an admin if not.

Only an operator, an admin, SlurmUser or root may create reservations. Slurm 22.05 answers
"Invalid user id" both to a caller that is none of them and to a ``users=`` name it does not
know (only slurmctld's log tells the two apart). A reservation that can never be made, starting
in 2000, tells them apart and changes nothing: Slurm checks the caller's rights first ("Invalid
user id"), then the start ("Invalid time specified"), and creates nothing either way. It costs
one RPC; slurmctld logs an info line for it (and "Security violation" for a non-operator).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from coorm_bridge.adapters.slurm.commands import Target

#: The probe's name: never created (it starts in the past), deleted should it ever be.
PROBE_NAME: Final = "coorm-rights-probe"
_PROBE_START: Final = "2000-01-01T00:00:00"

_LINE: Final = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def probe(target: Target) -> tuple[str, ...]:
    """``scontrol create reservation`` that Slurm refuses whoever asks (see the module)."""
    return (
        "scontrol",
        *target.clusters(),
        "create",
        "reservation",
        f"reservationname={PROBE_NAME}",
        f"starttime={_PROBE_START}",
        "duration=1",
        "nodecnt=1",
        "users=root",
    )


def show_config(target: Target) -> tuple[str, ...]:
    """``scontrol show config``: SlurmUser and AccountingStorageType, for the remedy."""
    return ("scontrol", *target.clusters(), "show", "config")


def config_values(text: str) -> dict[str, str]:
    """``Key = value`` lines of ``scontrol show config`` (other lines are ignored)."""
    values = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            values[match.group(1)] = match.group(2)
    return values


def lacking(said: str, account: str | None, config: Mapping[str, str]) -> str:
    """What Slurm said, why, and what an admin can do about it.

    ``account``: the account the commands run as (``id -un`` where they run), None if unknown;
    ``config``: :func:`config_values` (empty if unknown).
    """
    who = account or "the bridge's account"
    slurm_user = re.sub(r"\(\d+\)$", "", config.get("SlurmUser", "")).strip() or "SlurmUser"
    as_them = "root" if slurm_user == "root" else f"SlurmUser ({slurm_user}) or root"
    storage = config.get("AccountingStorageType", "")
    head = (
        f"Slurm refuses to let {who} (the account the bridge runs Slurm's commands as) create "
        f"reservations: it is not an operator (Slurm said: {said.strip()})"
    )
    operator = (
        f"sacctmgr modify user where name={who} set adminlevel=Operator (if slurmdbd does not "
        f"know {who} yet: sacctmgr add user {who} account=<an account> adminlevel=Operator)"
    )
    if storage and "slurmdbd" not in storage:
        remedy = (
            f"without slurmdbd (AccountingStorageType={storage}) only SlurmUser and root may: "
            f"run the bridge as {as_them}"
        )
    else:
        remedy = f"make it an operator: {operator}; or run the bridge as {as_them}"
    return f"{head}. To fix, {remedy}. Placements resume by themselves once it may."
