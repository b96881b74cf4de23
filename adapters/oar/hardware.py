"""A coorm cluster's hardware from OAR's resources, with the settings that select it checked.

Read once at start: an admin's mistake in ``property``, a cluster's ``value`` (or ``name``) or
``host_property`` is named here, with what OAR has instead, rather than found later. Before,
a ``host_property`` no resource has was taken silently for the network address: the daemon
started and showed its hosts, then every placeholder failed on OAR's SQL error
(``host IN (...)`` of a column that does not exist), retried for ever.

A host is counted by ``host_property``; OAR lists a job's hosts by network address, and the
bridge maps each address to the host of its resources (:func:`.parse.host_names`). So every
resource of the cluster must name its host, and the resources of one network address must all
name the same one: a property that splits an address (``core``; ``cpu`` on machines of several
processors) would count one machine as several hosts, a job on it would occupy only one of them,
and the others would look free. One host over several addresses is one host, whatever OAR places
on it: that is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from coorm_bridge.adapters.batch.backend import BatchFailure, Hardware
from coorm_bridge.adapters.oar import parse
from coorm_bridge.adapters.oar.binding import OarBinding

#: Fields of OAR's answers that are not the site's resource properties: the columns OAR keeps
#: for itself (OAR::Tools::check_resource_property, and cpuset, drain, last_available_upto,
#: which ``oarproperty -l`` lists but OAR sets) and what the answers add (``jobs`` of
#: ``oarnodes``; ``id``, ``links``, ``api_timestamp`` of the REST API).
OAR_OWN = frozenset(
    {
        "resource_id", "network_address", "state", "state_num", "next_state",
        "finaud_decision", "next_finaud_decision", "besteffort", "desktop_computing", "deploy",
        "expiry_date", "last_job_date", "available_upto", "last_available_upto", "walltime",
        "nodes", "type", "suspended_jobs", "scheduler_priority", "cpuset", "drain", "jobs",
        "id", "links", "api_timestamp",
    }
)  # fmt: skip
#: Values listed at most in a message.
LISTED = 20


def hardware(rows: Sequence[Mapping[str, Any]], binding: OarBinding) -> Hardware:
    """The hosts of ``binding``'s cluster among OAR's resources (``oarnodes -J``'s or
    ``/resources/details``' rows), once its settings are shown to select them: a BatchFailure
    ``misconfigured``, its key the setting at fault, when they do not."""
    present = {key for row in rows for key in row}
    if binding.property not in present:
        raise _wrong(
            "property", f"OAR has no resource property {binding.property!r}; {_site(present)}"
        )
    mine = [row for row in rows if _text(row.get(binding.property)) == binding.value]
    if not mine:
        values = {_text(row.get(binding.property)) for row in rows} - {""}
        raise _wrong(
            "value",
            f"OAR has no resource with {binding.property}={binding.value!r}; values of "
            f"{binding.property!r}: {_listed(values)}",
        )
    where = f"{binding.property}={binding.value!r}"
    if binding.host_property not in present:
        raise _wrong(
            "host_property",
            f"OAR has no resource property {binding.host_property!r}; {_site(present)} "
            "(or OAR's own network_address)",
        )
    unnamed = [row for row in mine if not _text(row.get(binding.host_property)).strip()]
    if unnamed:
        ids = [_text(row.get("resource_id", row.get("id"))) for row in unnamed]
        has, which = ("has", "resource") if len(unnamed) == 1 else ("have", "resources")
        raise _wrong(
            "host_property",
            f"{len(unnamed)} of the {len(mine)} resources with {where} {has} no "
            f"{binding.host_property!r} ({which} {_listed(ids)}): each must name its host",
        )
    resources = [parse.resource(row, binding) for row in mine]
    _one_host_per_address(resources, binding, where)
    return parse.hardware(resources)


def _one_host_per_address(
    resources: Sequence[parse.Resource], binding: OarBinding, where: str
) -> None:
    """Refuse a host property that counts one network address as several hosts."""
    hosts: dict[str, set[str]] = {}
    for r in resources:
        hosts.setdefault(r.address, set()).add(r.host)
    split = sorted((address, names) for address, names in hosts.items() if len(names) > 1)
    if not split:
        return
    address, names = split[0]
    counted = len({r.host for r in resources})
    raise _wrong(
        "host_property",
        f"{binding.host_property!r} counts {counted} hosts on the {len(hosts)} network "
        f"addresses of the resources with {where} (network address {address} has "
        f"{binding.host_property} {_listed(names)}): OAR places jobs on network addresses, so "
        "the resources of one address must name one host",
    )


def _wrong(key: str, message: str) -> BatchFailure:
    return BatchFailure("misconfigured", message, key=key)


def _text(value: object) -> str:
    """A property's value as OAR compares it in ``-p`` (NULL: none)."""
    return "" if value is None else str(value)


def _site(present: Collection[str]) -> str:
    """The site's resource properties (what ``oarproperty -l`` lists, OAR's own left out)."""
    site = sorted(set(present) - OAR_OWN)
    return f"its resource properties: {', '.join(site) if site else 'none but its own'}"


def _natural(text: str) -> list[str | int]:
    """``alpha-2`` before ``alpha-10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", text)]


def _listed(values: Collection[str]) -> str:
    """Values in natural order, at most :data:`LISTED` of them."""
    ordered = sorted(set(values), key=_natural)
    if not ordered:
        return "none"
    shown = ", ".join(ordered[:LISTED])
    more = len(ordered) - LISTED
    return f"{shown} and {more} more" if more > 0 else shown
