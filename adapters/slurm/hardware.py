"""A coorm cluster's hardware from Slurm's node records, or why there is none.

Every back-end reads the controller's nodes (Slurm 22.05 ignores ``-p`` with ``--json``) and
keeps the partition's own. When none is left, the partition is not there: its name is wrong,
often only by case (Slurm's partition names are case-sensitive). The error names it and lists
the partitions that are, rather than a bare "no node", as a setting to correct: the daemon
does not start (so does a ``-M`` cluster slurmdbd does not know, a slurm.conf Slurm cannot
process, and a controller that lists no node at all; one that does not answer is no mistake).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coorm_bridge.adapters.batch.backend import BatchFailure, Hardware
from coorm_bridge.adapters.slurm import answers, parse
from coorm_bridge.adapters.slurm.binding import SlurmBinding

#: Slurm 22.05 for a ``-M`` cluster slurmdbd does not know; then it says "'NAME' can't be
#: reached now, or it is an invalid entry for --cluster", which alone is a controller down.
UNKNOWN_CLUSTER = re.compile(r"No cluster '[^']*' known by database")
#: Slurm 22.05's commands for a slurm.conf they cannot read as one (after why, such as
#: "ClusterName needs to be specified"), before they ask any controller.
UNPROCESSABLE = "Unable to process configuration file"


def hardware_of(
    records: Iterable[Mapping[str, Any]], partition: str | None, cluster: str | None = None
) -> Hardware:
    """The hosts of ``partition`` (all of them when None) among node records shaped like
    ``sinfo --json``'s (``name``, ``partitions``, ``cpus``, ``real_memory``): how many, and the
    smallest one's cores and RAM. When there is none, the setting that led there is wrong (a
    BatchFailure "misconfigured": the partition, else the ``-M`` ``cluster``, else the
    controller's slurm_conf); ValueError for a number that is none."""
    nodes = list(records)
    seen = {
        n.get("name") or f"#{i}": n  # by name: a node listed twice counts once
        for i, n in enumerate(nodes)
        if partition is None or partition in (n.get("partitions") or ())
    }
    if not seen:
        key = "partition" if partition is not None else "cluster" if cluster else "slurm_conf"
        raise BatchFailure("misconfigured", no_node(partition, nodes), key=key)
    return Hardware(
        hosts=len(seen),
        cores_per_host=min(parse.number(n.get("cpus")) or 0 for n in seen.values()),
        ram_per_host_mib=min(parse.number(n.get("real_memory")) or 0 for n in seen.values()),
    )


def check_errors(document: Mapping[str, Any], what: str) -> None:
    """A BatchFailure when an answer's ``errors`` are not empty. Slurm 22.05's ``sinfo --json``
    exits 0 with ``errors: [{"error": "Unspecified error"}]`` and no node when slurmctld does not
    answer (down, stopped or busy): an ``unreachable`` failure that says so; no node then says
    nothing of the partition."""
    errors = document.get("errors")
    if not errors:
        return
    texts = [
        ": ".join(dict.fromkeys(str(e[k]) for k in ("description", "error") if e.get(k))) or str(e)
        if isinstance(e, Mapping)
        else str(e)
        for e in (errors if isinstance(errors, list) else [errors])
    ]
    said = "; ".join(texts)
    message = f"{what}: Slurm reported: {said}"
    if answers.UNANSWERED_JSON.search(said):
        raise BatchFailure("unreachable", answers.not_answering(message))
    raise BatchFailure(answers.classify_error(said), answers.not_answering(message))


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


def misaddressed(
    failure: BatchFailure, binding: SlurmBinding, known: Callable[[], list[str] | None]
) -> BatchFailure | None:
    """The setting at fault when a first command to ``binding``'s cluster failed because of it
    (a BatchFailure "misconfigured"), None when the failure is Slurm's (a controller that does
    not answer). ``known``: the Slurm clusters slurmdbd knows (None: it cannot say)."""
    said = str(failure)
    if binding.cluster is not None and UNKNOWN_CLUSTER.search(said):
        clusters = known()
        listed = f"; clusters it knows: {', '.join(clusters)}" if clusters else ""
        message = f"slurmdbd knows no Slurm cluster {binding.cluster!r}{listed}"
        return BatchFailure("misconfigured", message, key="cluster")
    conf = binding.env.get("SLURM_CONF")
    if conf is not None and UNPROCESSABLE in said:
        lines = "; ".join(line.strip() for line in said.splitlines() if line.strip())
        message = f"Slurm cannot use {conf} as its configuration: {lines}"
        return BatchFailure("misconfigured", message, key="slurm_conf")
    return None
