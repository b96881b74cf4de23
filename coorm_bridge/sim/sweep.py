"""Run an experiment's specs somewhere, resumably, and merge their rows in a fixed order.

:func:`sweep` is what ``coorm-sim`` calls: it loads the runs an earlier sweep stored
(:mod:`.store`), has a runner (:mod:`.runners`, :mod:`.slurm`) do only the missing ones, then
merges every run's rows in the order of the specs' keys and writes ``<experiment>.csv``. A run
that fails does not stop the others; it is reported, left out of the store, and retried by the
next sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coorm_bridge.sim.experiment import Row, RunSpec
from coorm_bridge.sim.progress import LogReporter, Reporter
from coorm_bridge.sim.runners import RunStatus, SweepRunner
from coorm_bridge.sim.store import RUN_COLUMN, RunStore, merge, to_csv, write_atomically


@dataclass
class SweepResult:
    """What a sweep did; ``rows`` and ``csv`` only if every run succeeded."""

    #: Every run's rows, in the merged order (without the run column).
    rows: list[Row] = field(default_factory=list)
    #: ``<directory>/<experiment>.csv``, None if some run failed.
    csv: Path | None = None
    failures: list[RunStatus] = field(default_factory=list)
    executed: int = 0
    reused: int = 0

    @property
    def ok(self) -> bool:
        """Every run is stored."""
        return not self.failures


def unique(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """``specs`` without repeats (same key: same rows, runs are deterministic), in order."""
    seen: dict[str, RunSpec] = {}
    for spec in specs:
        seen.setdefault(spec.key(), spec)
    return list(seen.values())


def sweep(
    name: str,
    specs: Sequence[RunSpec],
    directory: Path,
    runner: SweepRunner,
    *,
    fresh: bool = False,
    reporter: Reporter | None = None,
) -> SweepResult:
    """Do ``specs`` of experiment ``name`` (those not stored under ``directory`` yet) with
    ``runner``, then merge. Raises :class:`~.store.SweepStoreError` before running anything if a
    stored run is unusable; ``KeyboardInterrupt`` passes through with the finished runs kept."""
    specs = unique(specs)
    strangers = sorted({spec.experiment for spec in specs} - {name})
    if strangers:
        raise ValueError(f"specs of {', '.join(strangers)} in a sweep of {name}")
    store = RunStore(directory)
    if fresh:
        store.clear()
    stored: dict[str, list[Row]] = {}
    for spec in specs:
        rows = store.load(spec)
        if rows is not None:
            stored[spec.key()] = rows
    missing = [spec for spec in specs if spec.key() not in stored]
    result = SweepResult(reused=len(stored))
    reporter = reporter or LogReporter()

    def done(outcome: RunStatus) -> None:
        result.executed += 1
        if outcome.error is not None:
            result.failures.append(outcome)
        reporter.finished(outcome)

    reporter.start(len(specs), len(stored))
    try:
        if missing:
            store.runs.mkdir(parents=True, exist_ok=True)
            runner.run(missing, directory, done)
    finally:
        reporter.close()
    failed = {outcome.key for outcome in result.failures}
    for spec in missing:
        if spec.key() in failed:
            continue
        rows = store.load(spec)
        if rows is None:  # a runner that reported no outcome for it
            outcome = RunStatus(key=spec.key(), error="the runner gave no result for this run")
            result.failures.append(outcome)
            continue
        stored[spec.key()] = rows
    columns, table = merge(stored.items())
    result.rows = [{k: v for k, v in row.items() if k != RUN_COLUMN} for row in table]
    if result.ok:
        result.csv = directory / f"{name}.csv"
        write_atomically(result.csv, to_csv(columns, table))
    return result
