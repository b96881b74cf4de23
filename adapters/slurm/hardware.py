"""A coorm cluster's hardware from Slurm's node records, or why there is none.

Every back-end reads the controller's nodes (Slurm 22.05 ignores ``-p`` with ``--json``) and
keeps the partition's own. When none is left, the partition is not there: its name is wrong,
often only by case (Slurm's partition names are case-sensitive). The error names it and lists
the partitions that are, rather than a bare "no node".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coorm_bridge.adapters.batch.backend import BatchFailure, Hardware
from coorm_bridge.adapters.slurm import answers, parse


def hardware_of(records: Iterable[Mapping[str, Any]], partition: str | None) -> Hardware:
    """The hosts of ``partition`` (all of them when None) among node records shaped like
    ``sinfo --json``'s (``name``, ``partitions``, ``cpus``, ``real_memory``): how many, and the
    smallest one's cores and RAM. A BatchFailure ("other") when there is none; ValueError for
    a number that is none."""
    nodes = list(records)
    seen = {
        n.get("name") or f"#{i}": n  # by name: a node listed twice counts once
        for i, n in enumerate(nodes)
        if partition is None or partition in (n.get("partitions") or ())
    }
    if not seen:
        raise BatchFailure("other", no_node(partition, nodes))
    return Hardware(
        hosts=len(seen),
        cores_per_host=min(parse.number(n.get("cpus")) or 0 for n in seen.values()),
        ram_per_host_mib=min(parse.number(n.get("real_memory")) or 0 for n in seen.values()),
    )


def check_errors(document: Mapping[str, Any], what: str) -> None:
    """A BatchFailure when an answer's ``errors`` are not empty. Slurm 22.05's ``sinfo --json``
    exits 0 with ``errors: [{"error": "Unspecified error"}]`` and no node when slurmctld does not
    answer: no node then says nothing of the partition."""
    errors = document.get("errors")
    if not errors:
        return
    texts = [
        str(e.get("description") or e.get("error") or e) if isinstance(e, Mapping) else str(e)
        for e in (errors if isinstance(errors, list) else [errors])
    ]
    said = "; ".join(texts)
    raise BatchFailure(answers.classify_error(said), f"{what}: Slurm reported: {said}")


def no_node(partition: str | None, nodes: Iterable[Mapping[str, Any]]) -> str:
    """Why no node was found: the controller has none, or not the partition named."""
    if partition is None:
        return "Slurm lists no node on this controller"
    known = sorted({str(p) for n in nodes for p in n.get("partitions") or ()})
    message = f"Slurm has no partition {partition!r} (or it has no node)"
    if not known:
        return f"{message}, and no partition with nodes at all"
    alike = [p for p in known if p.casefold() == partition.casefold()]
    if alike:
        message += f"; partition names are case-sensitive: did you mean {alike[0]!r}?"
    return f"{message}; partitions with nodes: {', '.join(known)}"
