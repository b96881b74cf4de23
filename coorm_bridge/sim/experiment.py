"""What every experiment of ``coorm-sim`` supplies, and the registry the sweep and the CLI use.

An experiment is cut in three so that its runs can go anywhere: :meth:`Experiment.plan` lists
the runs (small pydantic models, picklable, with a stable :meth:`RunSpec.key`),
:meth:`Experiment.execute` does one run and returns its rows (deterministic for its spec: no
clock, no global random state), and :meth:`Experiment.report` turns every row into figures. The
sweep (:mod:`.sweep`) stores each run's rows under its key, so an interrupted sweep resumes and
the merged table does not depend on the order in which runs finished.
"""

from __future__ import annotations

import argparse
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import ClassVar

from coorm_bridge.core.model import Frozen

#: One line of an experiment's table: plain values only, so that it goes to CSV and JSON as is.
Value = str | int | float | bool | None
Row = dict[str, Value]


class RunSpec(Frozen):
    """One run's parameters; each experiment subclasses it with its own fields."""

    experiment: str

    def key(self) -> str:
        """A stable, readable id: the experiment, then every field sorted by name."""
        fields = self.model_dump(mode="json", exclude={"experiment"})
        return " ".join([self.experiment, *(f"{k}={fields[k]}" for k in sorted(fields))])

    def digest(self) -> str:
        """A short file-name-safe id of :meth:`key`."""
        return hashlib.sha256(self.key().encode()).hexdigest()[:16]


@dataclass
class Report:
    """What :meth:`Experiment.report` wrote, and the lines to print about it."""

    files: list[Path] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)


class Experiment(ABC):
    """One ``coorm-sim`` sub-command; see the module docstring."""

    name: ClassVar[str]
    help: ClassVar[str]
    spec: ClassVar[type[RunSpec]]
    exclusive: ClassVar[bool] = False
    """Its runs measure the machine (a real daemon's CPU time): one at a time, whatever
    ``--jobs`` says."""

    @abstractmethod
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The experiment's own options (``--quick`` and the sweep's are added by the CLI)."""

    @abstractmethod
    def plan(self, args: argparse.Namespace) -> list[RunSpec]:
        """The runs to do; ``args.quick`` asks for the small sizes CI runs."""

    @abstractmethod
    def execute(self, spec: RunSpec) -> list[Row]:
        """One run: deterministic for its spec (CPU-time columns aside)."""

    @abstractmethod
    def report(self, rows: list[Row], out: Path) -> Report:
        """Figures (PNG) and summary tables (CSV) from every run's rows, written under ``out``."""


#: The experiments ``coorm-sim`` offers: name → "module:Class", imported when used.
EXPERIMENTS: dict[str, str] = {
    "scalability": "coorm_bridge.sim.scalability:Scalability",
    "fairness": "coorm_bridge.sim.fairness:Fairness",
    "coalloc": "coorm_bridge.sim.coalloc:Coalloc",
    "evolving": "coorm_bridge.sim.evolving:Evolving",
    "validate": "coorm_bridge.sim.validate:Validate",
}


def experiment(name: str) -> Experiment:
    """The experiment called ``name``, built."""
    try:
        target = EXPERIMENTS[name]
    except KeyError:
        raise LookupError(f"no experiment {name!r}; known: {', '.join(EXPERIMENTS)}") from None
    module, _, cls = target.partition(":")
    built = getattr(import_module(module), cls)()
    assert isinstance(built, Experiment)
    return built


def execute(spec: RunSpec) -> list[Row]:
    """Run one spec in whatever process receives it (a pool worker, a Slurm job)."""
    return experiment(spec.experiment).execute(spec)
