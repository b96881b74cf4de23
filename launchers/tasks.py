"""Task lists: what a malleable application (a parameter sweep) runs, one task per host.

The list named in the file's ``[tasks]`` table gives every task once, each with a stable id and
its parameters. The launcher runs the component's command once per task on one host, with
``COORM_TASK`` (the id), ``COORM_TASK_PARAMS`` (the parameters, a JSON object) and
``COORM_TASK_RESULT`` (where the task writes its result) in its environment. Lists are plug-ins
like selectors: an entry point of ``coorm_bridge.task_lists``, or ``module:Class`` shipped with
the application, with a ``Params`` model for the table's ``params``.

A list must give the same tasks, with the same ids, every time it is built: results are kept by
id, and a task whose result is there is never run again.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Protocol, cast

from pydantic import AfterValidator, Field

from coorm_bridge.launchers import plugins
from coorm_bridge.launchers.selectors.base import Params as PluginParams

GROUP = "coorm_bridge.task_lists"
#: Tasks one sweep may have: each gets a result file and a line in the run's record.
MAX_TASKS = 100_000
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")

Scalar = str | int | float | bool


@dataclass(frozen=True)
class Task:
    """One run of the component: ``id`` names its result file, so it is a plain file name."""

    id: str
    params: Mapping[str, Scalar]

    def __post_init__(self) -> None:
        if not _ID.fullmatch(self.id):
            raise ValueError(f"task id {self.id!r} is not a plain name (letters, digits, ._-)")


class TaskList(Protocol):
    def tasks(self) -> Sequence[Task]:
        """Every task, each once, in the order to run them."""
        ...


def _bounded(values: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
    if math.prod(len(v) for v in values.values()) > MAX_TASKS:
        raise ValueError(f"the grid has more than {MAX_TASKS} points")
    return values


class Grid:
    """Every combination of the parameters' values (``x = [1, 2], seed = [7, 8]``: 4 tasks),
    ids ``t1``, ``t2``... in the order of the file's keys and values."""

    class Params(PluginParams):
        parameters: Annotated[
            dict[
                Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")],
                Annotated[list[Scalar], Field(min_length=1, max_length=MAX_TASKS)],
            ],
            Field(min_length=1, max_length=64),
            AfterValidator(_bounded),
        ]

    def __init__(self, params: Params) -> None:
        self.parameters = params.parameters

    def tasks(self) -> list[Task]:
        keys = list(self.parameters)
        combos = itertools.product(*(self.parameters[k] for k in keys))
        return [Task(f"t{n}", dict(zip(keys, values, strict=True))) for n, values in
                enumerate(combos, start=1)]  # fmt: skip


def create_task_list(
    name: str, params: Mapping[str, object], where: str = "tasks.params"
) -> list[Task]:
    """The tasks of list ``name`` built from the file's parameters (errors name the key);
    ValueError when two tasks share an id or there are too many."""
    cls = plugins.load_plugin(GROUP, "task list", name, "tasks")
    made = cast("TaskList", cls(plugins.validated(cls, "task list", name, params, where)))
    tasks = list(made.tasks())
    if len(tasks) > MAX_TASKS:
        raise ValueError(f"task list {name!r} gives {len(tasks)} tasks, more than {MAX_TASKS}")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        twice = sorted(i for i, n in Counter(ids).items() if n > 1)
        raise ValueError(f"task list {name!r} gives ids twice: {', '.join(twice[:5])}")
    return tasks


__all__ = ["GROUP", "Grid", "Task", "TaskList", "create_task_list"]
