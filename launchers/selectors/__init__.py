"""Selectors: the application-specific part of CooRM (paper §III-A), as plug-ins.

:mod:`.base` defines the interface (a pure function of the clusters, their links, the view and
``now``, returning a request or None), :mod:`.loading` finds a selector by entry-point name or
``module:Class`` and builds it from validated parameters, :mod:`.memo` runs it once per distinct
view. Built in: :mod:`.rigid`, :mod:`.moldable` (Amdahl) and :mod:`.cem` (the paper's
multi-cluster CEM application), registered in the ``coorm_bridge.selectors`` group.

Importing this package loads neither numpy nor the profiles: the launcher pays for them only when
its selector reads a view.
"""

from coorm_bridge.launchers.selectors.base import Params, Selector, SelectorClass
from coorm_bridge.launchers.selectors.loading import (
    GROUP,
    SelectorParamsError,
    create_selector,
    installed,
    load_selector,
)
from coorm_bridge.launchers.selectors.memo import Memoized
from coorm_bridge.launchers.selectors.rigid import Rigid

__all__ = [
    "GROUP",
    "Memoized",
    "Params",
    "Rigid",
    "Selector",
    "SelectorClass",
    "SelectorParamsError",
    "create_selector",
    "installed",
    "load_selector",
]
