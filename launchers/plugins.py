"""Finding an application's plug-in class by name and building it from the file's parameters.

Selectors, growth rules and task lists are found the same way: an entry point of their group
(the built-ins, or a package installed beside coorm-bridge), or ``module:Class`` for one shipped
with the application's own code (the module must be importable: the launcher decides the search
path). Each class has a ``Params`` model (pydantic v2) that validates the file's table, with
errors naming the key, and a constructor taking one validated ``Params``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import import_module
from importlib.metadata import entry_points

from pydantic import BaseModel, ValidationError

_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class PluginParamsError(ValueError):
    """The parameters do not fit the plug-in's ``Params``; the message names each bad key."""


def installed(group: str) -> list[str]:
    """The names registered in the entry-point group, sorted."""
    return sorted({ep.name for ep in entry_points(group=group)})


def load_plugin(group: str, what: str, name: str, method: str) -> type:
    """The class named ``name`` (an entry point of ``group``, or ``module:Class``), which must
    have a ``Params`` model and a ``method``. LookupError when nothing has that name (it lists
    the installed ones); TypeError when what the name designates is not such a class."""
    if ":" in name:
        loaded = _from_module(what, name)
    else:
        found = entry_points(group=group, name=name)
        if not found:
            known = ", ".join(installed(group)) or "none"
            raise LookupError(
                f"no {what} named {name!r}; installed: {known} (or give module:Class)"
            )
        loaded = next(iter(found)).load()
    if not isinstance(loaded, type):
        raise TypeError(f"{what} {name!r} does not name a class")
    params = getattr(loaded, "Params", None)
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise TypeError(f"{what} {name!r} has no Params model (a pydantic BaseModel)")
    if not callable(getattr(loaded, method, None)):
        raise TypeError(f"{what} {name!r} has no {method}() method")
    return loaded


def validated(cls: type, what: str, name: str, params: Mapping[str, object], where: str) -> object:
    """``params`` checked by ``cls.Params``: :class:`PluginParamsError` with one
    ``where.key: why`` item per problem, so the user finds the line to fix in the file."""
    model: type[BaseModel] = getattr(cls, "Params")  # noqa: B009 - checked by load_plugin
    try:
        return model.model_validate(dict(params))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join([where, *(str(part) for part in issue['loc'])])}: {issue['msg']}"
            for issue in error.errors()
        )
        raise PluginParamsError(f"{what} {name!r}: {problems}") from None


def _from_module(what: str, name: str) -> object:
    module_name, _, attribute = name.partition(":")
    if not _MODULE.fullmatch(module_name) or not all(
        part.isidentifier() for part in attribute.split(".")
    ):
        raise LookupError(f"{name!r} is neither an installed {what} nor module:Class")
    try:
        found: object = import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and f"{module_name}.".startswith(f"{error.name}."):
            raise LookupError(
                f"{what} {name!r}: no module {module_name!r} on the search path"
            ) from None
        raise  # the module exists but imports something missing: the traceback helps most
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise LookupError(f"{what} {name!r}: {module_name} has no {attribute}") from None
    return found
