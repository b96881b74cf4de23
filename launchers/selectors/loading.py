"""Finding a selector class by name and building it from the application file's parameters.

A name is either an entry point of the ``coorm_bridge.selectors`` group (the built-ins, or a
package installed beside coorm-bridge) or ``module:Class`` for a selector shipped with the
application's own code (the module must be importable: the launcher decides the search path).
The finding itself is :mod:`coorm_bridge.launchers.plugins`', shared with the other plug-ins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from coorm_bridge.launchers import plugins
from coorm_bridge.launchers.plugins import PluginParamsError
from coorm_bridge.launchers.selectors.base import Selector, SelectorClass

GROUP = "coorm_bridge.selectors"

#: The parameters do not fit the selector's ``Params``; the message names each bad key.
SelectorParamsError = PluginParamsError


def installed() -> list[str]:
    """The names registered in the entry-point group, sorted."""
    return plugins.installed(GROUP)


def load_selector(name: str) -> SelectorClass:
    """The selector class named ``name``: an entry point, or ``module:Class``.

    LookupError when nothing has that name (it lists the installed ones); TypeError when what
    the name designates is not a selector class.
    """
    return cast("SelectorClass", plugins.load_plugin(GROUP, "selector", name, "select"))


def create_selector(
    name: str, params: Mapping[str, object], *, where: str = "selector"
) -> Selector:
    """The selector ``name`` built from ``params`` (the ``[selector]`` table, its name removed).

    Bad parameters raise :class:`SelectorParamsError` with one ``where.key: why`` item per
    problem, so the user finds the line to fix in the file.
    """
    cls = load_selector(name)
    return cls(plugins.validated(cast("type", cls), "selector", name, params, where))
