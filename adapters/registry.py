"""Adapters as plug-ins: found by kind in the ``coorm_bridge.adapters`` entry-point group.

A package adds a batch system without touching this one: it registers an :class:`AdapterPlugin`
under the kind its ``[adapter]`` table names (``kind = "mine"``)::

    [project.entry-points."coorm_bridge.adapters"]
    mine = "mine.plugin:PLUGIN"

The plugin's settings model (an :class:`AdapterSettings`) validates the table; its ``create``
builds the adapter from the validated settings and an :class:`AdapterContext`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar, get_args

from pydantic import ValidationError
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import AdapterError
from coorm_bridge.core.model import Frozen

GROUP = "coorm_bridge.adapters"
#: The kind of an ``[adapter]`` table that does not name one: the simulated platform.
DEFAULT_KIND = "mock"


class AdapterSettings(Frozen):
    """Base of every adapter's ``[adapter]`` table; subclasses narrow ``kind`` to their own."""

    kind: str

    def local_problems(self) -> list[str]:
        """``key: why`` for what the settings name on this host and this host lacks (a file
        that is not there), keys relative to the ``[adapter]`` table. Asked when the daemon
        loads its configuration, once relative paths are resolved, so that a typo is refused
        with its key rather than found later as a batch system that does not answer."""
        return []

    def clock_problems(self) -> list[str]:
        """``key: why`` for what would keep the adapter's :meth:`~.Adapter.now` off the host's
        clock (a simulated platform's speed-up); real batch systems have none. A bridge over
        several batch systems (``kind = "mixed"``) needs one time for all of them, and asks
        before building anything: a simulated clock that has run ahead is kept in its state."""
        return []


S = TypeVar("S", bound=AdapterSettings)


@dataclass(frozen=True)
class AdapterContext:
    """What the daemon offers an adapter besides its settings."""

    state_dir: Path
    """The daemon's state folder (private to its user), for adapters that keep state."""
    private: bool = False
    """Only the daemon's own user can reach it (its default socket, mode 600, and no TCP, as
    ``coorm-bridge serve`` without a configuration): an adapter that runs work as the daemon's
    account may run that user's, even root's, since nobody else can ask."""


@dataclass(frozen=True)
class AdapterPlugin(Generic[S]):
    """One kind of adapter: its settings model and how to build it from them."""

    kind: str
    settings: type[S]
    create: Callable[[S, AdapterContext], Adapter]


class UnknownAdapter(AdapterError):
    """No usable plug-in for a kind (none installed, or one that cannot be loaded)."""


@functools.cache
def _entry_points() -> dict[str, tuple[EntryPoint, ...]]:
    """The group's entry points by name, read once: the installed packages do not change."""
    found: dict[str, tuple[EntryPoint, ...]] = {}
    for entry in entry_points(group=GROUP):
        found[entry.name] = (*found.get(entry.name, ()), entry)
    return found


def installed() -> list[str]:
    """The kinds of every installed adapter, sorted."""
    return sorted(_entry_points())


@functools.cache
def find_plugin(kind: str) -> AdapterPlugin[Any]:
    """The plugin registered for ``kind``; :class:`UnknownAdapter` says what is installed."""
    entries = _entry_points().get(kind, ())
    if not entries:
        kinds = ", ".join(installed()) or "none"
        raise UnknownAdapter(f"no adapter of kind {kind!r} is installed (installed: {kinds})")
    if len(entries) > 1:
        where = ", ".join(entry.value for entry in entries)
        raise UnknownAdapter(f"adapter kind {kind!r} is registered more than once: {where}")
    (entry,) = entries
    try:
        plugin = entry.load()
    except Exception as error:  # whatever the plug-in's import raises
        raise UnknownAdapter(
            f"adapter kind {kind!r} ({entry.value}) cannot be loaded: "
            f"{type(error).__name__}: {error}"
        ) from error
    if not (
        isinstance(plugin, AdapterPlugin)
        and plugin.kind == kind
        and isinstance(plugin.settings, type)
        and issubclass(plugin.settings, AdapterSettings)
    ):
        raise UnknownAdapter(
            f"adapter kind {kind!r} ({entry.value}) is not an AdapterPlugin of kind {kind!r} "
            "with AdapterSettings"
        )
    return plugin


def read_settings(table: Mapping[str, Any]) -> AdapterSettings:
    """An ``[adapter]`` table validated by the settings model of the plugin its kind names.

    Raises ValidationError located as a tagged union would be (``kind`` for an unknown kind,
    ``<kind>.<key>`` for the plugin's own errors), so that messages name the key.
    """
    kind = table.get("kind", DEFAULT_KIND)
    try:
        plugin = find_plugin(kind) if isinstance(kind, str) else None
    except UnknownAdapter as error:
        raise _error(("kind",), kind, "adapter_kind", str(error)) from error
    if plugin is None:
        raise _error(("kind",), kind, "adapter_kind", "the adapter kind must be a string")
    try:
        settings: AdapterSettings = plugin.settings.model_validate({**table, "kind": kind})
    except ValidationError as error:
        raise ValidationError.from_exception_data(
            error.title, [_located(issue, kind) for issue in error.errors()]
        ) from error
    return settings


def create_adapter(settings: AdapterSettings, context: AdapterContext) -> Adapter:
    """The adapter ``settings`` describe, built by the plugin of their kind."""
    plugin = find_plugin(settings.kind)
    if not isinstance(settings, plugin.settings):
        raise AdapterError(
            f"adapter kind {settings.kind!r} needs {plugin.settings.__name__}, "
            f"not {type(settings).__name__}"
        )
    return plugin.create(settings, context)


_ERROR_TYPES = frozenset(get_args(ErrorType))


def _error(loc: tuple[str, ...], value: Any, kind: str, message: str) -> ValidationError:
    detail = InitErrorDetails(type=PydanticCustomError(kind, message), loc=loc, input=value)
    return ValidationError.from_exception_data("AdapterSettings", [detail])


def _located(issue: ErrorDetails, kind: str) -> InitErrorDetails:
    """One of the plugin model's errors, its location under the kind."""
    return relocated(issue, (kind, *issue["loc"]))


def relocated(issue: ErrorDetails, loc: tuple[str | int, ...]) -> InitErrorDetails:
    """``issue`` (an error of a validation) at ``loc`` instead, message and context kept: for
    settings that validate tables of their own with :func:`read_settings` and say where they
    are in the file."""
    if issue["type"] not in _ERROR_TYPES:  # a plug-in's own error type: keep its message
        custom = PydanticCustomError(issue["type"], issue["msg"])
        return InitErrorDetails(type=custom, loc=loc, input=issue["input"])
    detail = InitErrorDetails(type=issue["type"], loc=loc, input=issue["input"])
    if "ctx" in issue:
        detail["ctx"] = issue["ctx"]
    return detail
