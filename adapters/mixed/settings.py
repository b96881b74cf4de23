"""``[adapter]`` with ``kind = "mixed"``: a site of several batch systems, one table each.

::

    [adapter]
    kind = "mixed"
    [[adapter.system]]          # each validated by the plug-in its kind names
    kind = "slurm"
    [[adapter.system.cluster]]
    name = "alpha"
    [[adapter.system]]
    kind = "mock"
    [[adapter.link]]            # links between clusters of different systems
    clusters = ["alpha", "delta"]

Each system table is read by :func:`.registry.read_settings`, as an ``[adapter]`` table alone
would be, and its errors are located where they are in the file: ``system.1.cluster.0.partition``.
What can be told from the tables alone is refused here, naming the key: a system without a
kind, a mixed one inside, a cluster name two systems share, a clock off the host's, a pair of
clusters linked twice. What only the batch systems can tell (the clusters a simulated platform's
file holds) is checked by the adapter (:mod:`.adapter`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, SerializeAsAny, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from coorm_bridge.adapters.batch.settings import BatchSettings
from coorm_bridge.adapters.registry import AdapterSettings, installed, read_settings, relocated
from coorm_bridge.core.model import Link

KIND = "mixed"


class MixedSettings(AdapterSettings):
    """``[[adapter.system]]`` tables (one per batch system, in the order launchers see their
    clusters) and ``[[adapter.link]]`` tables (links between clusters of different systems)."""

    model_config = AdapterSettings.model_config | {"populate_by_name": True}

    kind: Literal["mixed"] = "mixed"
    systems: tuple[SerializeAsAny[AdapterSettings], ...] = Field(min_length=1, alias="system")
    links: tuple[Link, ...] = Field(default=(), alias="link")

    @field_validator("systems", mode="before")
    @classmethod
    def _each_by_its_kind(cls, tables: Any) -> Any:
        """Every system validated by its own plug-in; all their errors at once, each at its
        key (``<index>.<key>``: pydantic puts ``system`` in front)."""
        if not isinstance(tables, list | tuple):
            return tables  # pydantic says what a tuple should be
        systems: list[AdapterSettings] = []
        errors: list[InitErrorDetails] = []
        for index, table in enumerate(tables):
            if isinstance(table, AdapterSettings):  # built in Python, already valid
                if table.kind == KIND:
                    errors.append(_detail((index, "kind"), KIND, _nested()))
                else:
                    systems.append(table)
                continue
            try:
                systems.append(_system(table))
            except ValidationError as error:
                errors.extend(_at(index, issue) for issue in error.errors())
        if not errors:
            errors = [*_shared_names(systems), *_off_the_host_clock(systems)]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return tuple(systems)

    @field_validator("links")
    @classmethod
    def _each_pair_linked_once(cls, links: tuple[Link, ...]) -> tuple[Link, ...]:
        """A pair linked twice would have two latencies; a cluster linked to itself none."""
        errors: list[InitErrorDetails] = []
        pairs: dict[frozenset[str], int] = {}
        for index, link in enumerate(links):
            pair = frozenset(link.clusters)
            first = pairs.setdefault(pair, index)
            if len(pair) == 1:
                why = f"a link joins two clusters, not {link.clusters[0]!r} to itself"
            elif first != index:
                why = f"clusters {' and '.join(map(repr, link.clusters))} are link.{first} already"
            else:
                continue
            errors.append(_detail((index, "clusters"), list(link.clusters), why))
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return links

    def local_problems(self) -> list[str]:
        """Each system's, under its key."""
        return [
            f"system.{index}.{problem}"
            for index, system in enumerate(self.systems)
            for problem in system.local_problems()
        ]


def _system(table: Any) -> AdapterSettings:
    """One ``[[adapter.system]]`` table, by its kind's plug-in; ValidationError located in it."""
    if not isinstance(table, Mapping):
        raise _invalid((), table, "a batch system is a table: [[adapter.system]]")
    kind = table.get("kind")
    kinds = ", ".join(k for k in installed() if k != KIND)
    if kind is None:
        raise _invalid(("kind",), table, f"each batch system names its kind (installed: {kinds})")
    if kind == KIND:
        raise _invalid(("kind",), kind, _nested())
    try:
        return read_settings(table)
    except ValidationError as error:
        # read_settings locates the plug-in's errors under its kind, as in a tagged union;
        # here the kind is the table's own key, so they are located in the table.
        issues = error.errors()
        raise ValidationError.from_exception_data(
            error.title,
            [relocated(issue, _in_table(issue["loc"], kind)) for issue in issues],
        ) from error


def _nested() -> str:
    kinds = ", ".join(k for k in installed() if k != KIND)
    return (
        "a mixed site lists batch systems, not another mixed site: give its systems here "
        f"(installed: {kinds})"
    )


def _in_table(loc: tuple[str | int, ...], kind: Any) -> tuple[str | int, ...]:
    return loc[1:] if loc and loc[0] == kind and loc != ("kind",) else loc


def _at(index: int, issue: Any) -> InitErrorDetails:
    return relocated(issue, (index, *issue["loc"]))


def _shared_names(systems: list[AdapterSettings]) -> list[InitErrorDetails]:
    """Launchers name clusters, and the bridge routes each call by its cluster's name: two
    systems may not both have one. Only clusters named in the tables are known here; the
    adapter checks the others (a simulated platform's) when it reads them."""
    errors: list[InitErrorDetails] = []
    seen: dict[str, str] = {}
    for index, system in enumerate(systems):
        if not isinstance(system, BatchSettings):
            continue
        for number, cluster in enumerate(system.clusters):
            key = f"system.{index}.cluster.{number} ({system.kind})"
            first = seen.setdefault(cluster.name, key)
            if first != key:
                errors.append(
                    _detail(
                        (index, "cluster", number, "name"),
                        cluster.name,
                        f"{cluster.name!r} is the name of {first} already: cluster names must "
                        "be distinct across the site's batch systems",
                    )
                )
    return errors


def _off_the_host_clock(systems: list[AdapterSettings]) -> list[InitErrorDetails]:
    """With several systems the bridge keeps one time, the host's: a simulated platform on
    another clock would be told starts that are not its own (see :mod:`.adapter`)."""
    if len(systems) < 2:
        return []
    errors: list[InitErrorDetails] = []
    for index, system in enumerate(systems):
        for problem in system.clock_problems():
            key, _, why = problem.partition(": ")
            errors.append(
                _detail(
                    (index, *key.split(".")),
                    None,
                    f"{why}: a mixed site keeps one time for all its batch systems, the host's",
                )
            )
    return errors


def _detail(loc: tuple[str | int, ...], value: Any, message: str) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError("mixed_site", message), loc=loc, input=value)


def _invalid(loc: tuple[str | int, ...], value: Any, message: str) -> ValidationError:
    return ValidationError.from_exception_data("MixedSettings", [_detail(loc, value, message)])
