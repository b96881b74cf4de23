"""A small, real experiment for the sweep's tests (not shipped): importable by pool workers and
Slurm tasks through PYTHONPATH=tests/sim, registered as "toy" when imported (unpickling a
ToySpec imports it).

Each run leaves a file in its ``marks`` folder (to count executions), and obeys files the tests
put there: ``fail-<n>`` raises, ``exit-<n>`` kills the process, ``sleep-<n>`` sleeps that long.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

from coorm_bridge.sim.experiment import EXPERIMENTS, Experiment, Report, Row, RunSpec

EXPERIMENTS.setdefault("toy", "simtoy:Toy")


class ToySpec(RunSpec):
    experiment: str = "toy"
    n: int
    marks: str


class Toy(Experiment):
    name = "toy"
    help = "a small test experiment"
    spec = ToySpec

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--count", type=int, default=12)
        parser.add_argument("--marks", required=True)

    def plan(self, args: argparse.Namespace) -> list[RunSpec]:
        count = 3 if args.quick else args.count
        return [ToySpec(n=n, marks=str(Path(args.marks).resolve())) for n in range(count)]

    def execute(self, spec: RunSpec) -> list[Row]:
        assert isinstance(spec, ToySpec)
        n, marks = spec.n, Path(spec.marks)
        (marks / f"ran-{n}-{uuid.uuid4().hex}").write_text(sys.executable)
        if (marks / f"fail-{n}").exists():
            raise RuntimeError(f"toy failure {n}")
        if (marks / f"exit-{n}").exists():
            os._exit(3)
        if (marks / f"sleep-{n}").exists():
            time.sleep(float((marks / f"sleep-{n}").read_text()))
        # the first runs finish last: a parallel sweep sees them end out of order
        time.sleep(0.02 * (12 - n) if n < 12 else 0)
        rows: list[Row] = [{"n": n, "i": i, "square": n * n} for i in range(1 + n % 2)]
        if n == 10:
            rows[0]["ten"] = True
        if n == 2:
            rows[0]["two"] = 2.5
        return rows

    def report(self, rows: list[Row], out: Path) -> Report:
        total = sum(int(row["square"] or 0) for row in rows)
        summary = out / "toy-summary.txt"
        summary.write_text(f"{total}\n")
        return Report(files=[summary], summary=[f"toy: {len(rows)} rows, squares {total}"])


def executions(marks: Path) -> dict[int, int]:
    """How many times each run was executed, by n."""
    counted: dict[int, int] = {}
    for mark in marks.glob("ran-*"):
        n = int(mark.name.split("-")[1])
        counted[n] = counted.get(n, 0) + 1
    return counted
