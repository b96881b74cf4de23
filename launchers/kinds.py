"""The application file's kinds beyond a rigid or moldable request (CooRMv2, slides 002).

- ``evolving``: a code whose needs change as it runs, in a way it learns only as it goes (an
  adaptive mesh refinement). It holds a **pre-allocation** (``[evolving]``: the hosts it may
  need, for how long) and runs in **steps**: each step's job runs on the hosts of one
  non-preemptible request started inside the pre-allocation, then reports what it now needs;
  its **growth rule** (``[growth]``, a plug-in like a selector) turns that report into the next
  step's hosts.
- ``malleable``: a bag of independent tasks that can use any number of hosts (a parameter sweep).
  It asks for **preemptible** hosts (``[malleable]``: where, at most how many, for how long a
  task may run); its **task list** (``[tasks]``, a plug-in) says what to run. A preempted task is
  run again; each task's result is kept once.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from coorm_bridge.core.model import Duration, Frozen, Name, PositiveCount

Kind = Literal["rigid", "moldable", "evolving", "malleable"]
#: The kinds a selector serves (one request, chosen from the view); the others have a plan.
SELECTED: frozenset[str] = frozenset({"rigid", "moldable"})
#: Attempts of one task before the sweep gives it up (a task that fails by itself, not a
#: preemption, which is never counted).
MAX_ATTEMPTS = 100
_PLUGIN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}(?::[A-Za-z_][A-Za-z0-9_.]{0,127})?$"


class PluginSpec(Frozen):
    """``[growth]`` or ``[tasks]``: a plug-in by name (an entry point, or ``module:Class`` next
    to the application file) and its parameters, checked by the plug-in's ``Params``."""

    name: Annotated[str, Field(pattern=_PLUGIN)]
    params: dict[str, Any] = Field(default_factory=dict)


class EvolvingSpec(Frozen):
    """``[evolving]``: the pre-allocation an evolving code runs in."""

    cluster: Name | None = None
    """Where (None: the component's only cluster, else the first the bridge shows)."""
    pre_allocation: PositiveCount
    """Hosts held for the whole run: the most any step may use (the slides' peak)."""
    duration: Duration
    """Seconds the pre-allocation lasts: every step must end by then."""
    first_hosts: PositiveCount = 1
    """Hosts of the first step, before the code has said anything."""


class MalleableSpec(Frozen):
    """``[malleable]``: where a sweep's tasks may run, and how they are cut into requests."""

    cluster: Name | None = None
    """Where (None: the component's only cluster, else the first the bridge shows)."""
    max_hosts: PositiveCount = 64
    """Hosts held at once, at most."""
    task_time: Duration
    """A task's time limit: it is killed past it, and never started with less time left."""
    duration: Duration | None = None
    """Seconds each preemptible request asks for (None: one task's time); tasks follow one
    another on a host while one more fits before the request's end."""
    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS, strict=True)] = 3
    """Runs of a task that failed by itself before it is given up."""


__all__ = ["SELECTED", "EvolvingSpec", "Kind", "MalleableSpec", "PluginSpec"]
