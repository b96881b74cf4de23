"""Reading Slurm's rules for users' jobs: the commands, and parsers of their answers.

One read is five commands, each one answer for every user (the poll asks about once a minute):
``scontrol show config`` (``ClusterName``, ``AccountingStorageEnforce``), ``scontrol -o show
partition``, and, where accounting is enforced, ``sacctmgr -n -P`` ``show user``, ``show assoc``
and ``show qos`` with fixed formats. scontrol 22.05 has no ``--json`` for partitions or the
configuration, and sacctmgr none at all: its ``-P`` lines are ``|``-separated.

Parsing is bounded: at most :data:`MAX_LINES` lines and :data:`MAX_FIELD` characters a field;
anything else raises :class:`ValueError` naming the command and the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from coorm_bridge.adapters.slurm import parse
from coorm_bridge.adapters.slurm.commands import Target
from coorm_bridge.adapters.slurm.rights import config_values
from coorm_bridge.adapters.slurm.rules import Association, Limit, Partition, Qos

MAX_LINES: Final = 200_000
MAX_FIELD: Final = 4096
#: Seconds of the longest time limit Slurm can hold (its 32-bit minutes).
MAX_SECONDS: Final = 0xFFFFFFFE * 60

ASSOC_FORMAT: Final = "cluster,account,user,partition,parentname,maxwall,maxtres,grptres,defaultqos"
QOS_FORMAT: Final = "name,maxwall,maxtrespu,maxtres,grptres"
USER_FORMAT: Final = "user,defaultaccount"

_NONE: Final = frozenset({"", "(null)", "N/A", "NONE", "UNLIMITED", "INFINITE", "ALL"})
_TIME: Final = re.compile(r"^(?:(\d{1,5})-)?(\d{1,9})(?::(\d{1,2}))?(?::(\d{1,2}))?$")


def show_config(target: Target) -> tuple[str, ...]:
    return ("scontrol", *target.clusters(), "show", "config")


def show_partitions(target: Target) -> tuple[str, ...]:
    return ("scontrol", *target.clusters(), "-o", "show", "partition")


def show_users() -> tuple[str, ...]:
    return ("sacctmgr", "-n", "-P", "show", "user", f"format={USER_FORMAT}")


def show_associations(cluster: str) -> tuple[str, ...]:
    return (
        "sacctmgr", "-n", "-P", "show", "assoc", f"cluster={cluster}", f"format={ASSOC_FORMAT}",
    )  # fmt: skip


def show_qos() -> tuple[str, ...]:
    return ("sacctmgr", "-n", "-P", "show", "qos", f"format={QOS_FORMAT}")


def _lines(text: str, what: str) -> Iterator[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_LINES:
        raise ValueError(f"{what}: {len(lines)} lines, more than the {MAX_LINES} read")
    yield from lines


def _field(value: str, what: str) -> str:
    value = value.strip()
    if len(value) > MAX_FIELD:
        raise ValueError(f"{what}: a field of {len(value)} characters")
    return value


def time_limit(text: str, what: str) -> Limit | None:
    """A Slurm time (``2-00:00:00``, ``01:00:00``, ``30:00``, ``90``: minutes) in seconds, as
    Slurm prints it; None for ``UNLIMITED``."""
    text = _field(text, what)
    if text.upper() in _NONE:
        return None
    match = _TIME.fullmatch(text)
    if match is None:
        raise ValueError(f"{what}: not a Slurm time {text!r}")
    days, *clock = match.groups()
    numbers = [int(n) for n in clock if n is not None]
    if days is not None:  # D-H, D-H:M, D-H:M:S
        numbers += [0] * (3 - len(numbers))
    else:  # M, M:S, H:M:S
        numbers = {1: [0, numbers[0], 0], 2: [0, *numbers], 3: numbers}[len(numbers)]
    hours, minutes, seconds = numbers
    total = ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds
    if total > MAX_SECONDS:
        raise ValueError(f"{what}: time {text!r} is past Slurm's own limit")
    return Limit(value=total, text=text)


def node_limit(tres: str, what: str) -> Limit | None:
    """The ``node=`` of a TRES list (``cpu=4,node=2``), as ``node=2``; None if it sets none."""
    tres = _field(tres, what)
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key.strip() == "node":
            return Limit(value=_count(value, what), text=f"node={value.strip()}")
    return None


def _count(text: str, what: str) -> int:
    text = text.strip()
    if not text.isdigit() or len(text) > 10:
        raise ValueError(f"{what}: not a node count {text!r}")
    return int(text)


def _names(text: str, what: str) -> tuple[str, ...] | None:
    """A comma list (``ALL``: None)."""
    text = _field(text, what)
    if text.upper() in _NONE:
        return None
    return tuple(parse.safe_name(n) for n in text.split(",") if n)


def enforce_of(config: str) -> tuple[str, tuple[str, ...]]:
    """``ClusterName`` and ``AccountingStorageEnforce``'s words from ``scontrol show config``."""
    values = config_values(config)
    cluster = values.get("ClusterName", "").strip()
    if not cluster:
        raise ValueError("scontrol show config: no ClusterName")
    words = values.get("AccountingStorageEnforce", "none").lower()
    enforce = tuple(w for w in words.replace(" ", "").split(",") if w and w != "none")
    return cluster, enforce


def parse_partition(text: str, name: str | None) -> Partition:
    """Partition ``name`` (None: the default one) of ``scontrol -o show partition``."""
    what = "scontrol show partition"
    found: list[dict[str, str]] = []
    for line in _lines(text, what):
        fields = parse.record_fields(line)
        if "PartitionName" not in fields:
            raise ValueError(f"{what}: a line without PartitionName: {line[:200]!r}")
        if fields["PartitionName"] == name or (name is None and fields.get("Default") == "YES"):
            found.append(fields)
    if not found:
        raise ValueError(f"{what}: no partition {name or '(the default)'}")
    fields = found[0]
    max_nodes = fields.get("MaxNodes", "UNLIMITED")
    qos = _field(fields.get("QoS", "N/A"), what)
    return Partition(
        name=fields["PartitionName"],
        max_time=time_limit(fields.get("MaxTime", "UNLIMITED"), f"{what} MaxTime"),
        max_nodes=None
        if max_nodes.upper() in _NONE
        else Limit(value=_count(max_nodes, what), text=max_nodes),
        allow_accounts=_names(fields.get("AllowAccounts", "ALL"), what),
        deny_accounts=_names(fields.get("DenyAccounts", ""), what) or (),
        allow_groups=_names(fields.get("AllowGroups", "ALL"), what),
        allow_qos=_names(fields.get("AllowQos", "ALL"), what),
        deny_qos=_names(fields.get("DenyQos", ""), what) or (),
        qos=None if qos.upper() in _NONE else parse.safe_name(qos),
    )


def _rows(text: str, what: str, width: int) -> Iterator[list[str]]:
    for line in _lines(text, what):
        row = [_field(value, what) for value in line.split("|")]
        if len(row) != width:
            raise ValueError(f"{what}: {len(row)} fields, not {width}: {line[:200]!r}")
        yield row


def parse_users(text: str) -> tuple[tuple[str, str], ...]:
    """Each user's default account (``show user format=user,defaultaccount``)."""
    rows = _rows(text, "sacctmgr show user", 2)
    return tuple((user, account) for user, account in rows if account)


def parse_associations(text: str) -> tuple[Association, ...]:
    """``show assoc format=`` :data:`ASSOC_FORMAT`, one cluster's."""
    what = "sacctmgr show assoc"
    found = []
    for _cluster, account, user, partition, parent, wall, tres, grp, qos in _rows(text, what, 9):
        found.append(
            Association(
                account=account,
                user=user or None,
                partition=partition or None,
                parent=parent or None,
                max_wall=time_limit(wall, f"{what} MaxWall"),
                max_nodes=node_limit(tres, f"{what} MaxTRES"),
                grp_nodes=node_limit(grp, f"{what} GrpTRES"),
                default_qos=qos or None,
            )
        )
    return tuple(found)


def parse_qos(text: str) -> tuple[Qos, ...]:
    """``show qos format=`` :data:`QOS_FORMAT`."""
    what = "sacctmgr show qos"
    return tuple(
        Qos(
            name=name,
            max_wall=time_limit(wall, f"{what} MaxWall"),
            max_nodes_per_user=node_limit(per_user, f"{what} MaxTRESPU"),
            max_nodes_per_job=node_limit(per_job, f"{what} MaxTRES"),
            grp_nodes=node_limit(grp, f"{what} GrpTRES"),
        )
        for name, wall, per_user, per_job, grp in _rows(text, what, 5)
    )
