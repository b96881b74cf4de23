"""Finding a selector class by name and building it from the application file's parameters.

A name is either an entry point of the ``coorm_bridge.selectors`` group (the built-ins, or a
package installed beside coorm-bridge) or ``module:Class`` for a selector shipped with the
application's own code (the module must be importable: the launcher decides the search path).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import import_module
from importlib.metadata import entry_points
from typing import cast

from pydantic import BaseModel, ValidationError

from coorm_bridge.launchers.selectors.base import Selector, SelectorClass

GROUP = "coorm_bridge.selectors"

_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class SelectorParamsError(ValueError):
    """The parameters do not fit the selector's ``Params``; the message names each bad key."""


def installed() -> list[str]:
    """The names registered in the entry-point group, sorted."""
    return sorted({ep.name for ep in entry_points(group=GROUP)})


def load_selector(name: str) -> SelectorClass:
    """The selector class named ``name``: an entry point, or ``module:Class``.

    LookupError when nothing has that name (it lists the installed ones); TypeError when what
    the name designates is not a selector class.
    """
    if ":" in name:
        loaded = _from_module(name)
    else:
        found = entry_points(group=GROUP, name=name)
        if not found:
            known = ", ".join(installed()) or "none"
            raise LookupError(
                f"no selector named {name!r}; installed: {known} (or give module:Class)"
            )
        loaded = next(iter(found)).load()
    return _checked(name, loaded)


def create_selector(
    name: str, params: Mapping[str, object], *, where: str = "selector"
) -> Selector:
    """The selector ``name`` built from ``params`` (the ``[selector]`` table, its name removed).

    Bad parameters raise :class:`SelectorParamsError` with one ``where.key: why`` item per
    problem, so the user finds the line to fix in the file.
    """
    cls = load_selector(name)
    try:
        validated = cls.Params.model_validate(dict(params))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join([where, *(str(part) for part in issue['loc'])])}: {issue['msg']}"
            for issue in error.errors()
        )
        raise SelectorParamsError(f"selector {name!r}: {problems}") from None
    return cls(validated)


def _from_module(name: str) -> object:
    module_name, _, attribute = name.partition(":")
    if not _MODULE.fullmatch(module_name) or not all(
        part.isidentifier() for part in attribute.split(".")
    ):
        raise LookupError(f"{name!r} is neither an installed selector nor module:Class")
    try:
        found: object = import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and f"{module_name}.".startswith(f"{error.name}."):
            raise LookupError(
                f"selector {name!r}: no module {module_name!r} on the search path"
            ) from None
        raise  # the module exists but imports something missing: the traceback helps most
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise LookupError(f"selector {name!r}: {module_name} has no {attribute}") from None
    return found


def _checked(name: str, loaded: object) -> SelectorClass:
    if not isinstance(loaded, type):
        raise TypeError(f"selector {name!r} does not name a class")
    params = getattr(loaded, "Params", None)
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise TypeError(f"selector {name!r} has no Params model (a pydantic BaseModel)")
    if not callable(getattr(loaded, "select", None)):
        raise TypeError(f"selector {name!r} has no select() method")
    return cast("SelectorClass", loaded)
