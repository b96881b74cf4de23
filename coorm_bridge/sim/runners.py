"""Doing runs: one batch of specs in any process (:func:`run_batch`), and the local runner.

Whatever process does a run also stores it (:class:`~.store.RunStore`): a pool worker or a Slurm
array task that finished a run has kept it even if the sweep that asked for it is then killed.
The sweep learns of each run through a :class:`RunStatus`, small enough to pickle back.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Protocol

from coorm_bridge.core.model import Frozen
from coorm_bridge.sim import experiment
from coorm_bridge.sim.experiment import RunSpec
from coorm_bridge.sim.store import RUN_COLUMN, RunStore


class RunStatus(Frozen):
    """How one run ended: ``error`` is None if its rows are stored."""

    key: str
    error: str | None = None
    #: Where the failure's traceback was written, if it was.
    log: str | None = None


#: Called by a runner once per run, in the sweep's process, as runs finish.
Done = Callable[[RunStatus], None]


class SweepRunner(Protocol):
    """Somewhere to do runs: the local cores, a Slurm job array."""

    def run(self, specs: Sequence[RunSpec], directory: Path, done: Done) -> None:
        """Do every spec, storing each under ``directory``; report each through ``done``."""


def run_batch(specs: Sequence[RunSpec], directory: str) -> list[RunStatus]:
    """Do and store ``specs`` one after the other; a run that raises is reported, not fatal to
    the batch. Module-level so that pool workers and Slurm tasks can unpickle it."""
    store = RunStore(Path(directory))
    return [_run_one(spec, store) for spec in specs]


def _run_one(spec: RunSpec, store: RunStore) -> RunStatus:
    try:
        rows = experiment.execute(spec)
        if any(RUN_COLUMN in row for row in rows):
            raise ValueError(f"a row has a {RUN_COLUMN!r} column: the sweep adds that one")
        store.save(spec, rows)
    except Exception as error:  # any run's failure is reported, then retried
        trace = traceback.format_exc()
        try:
            log: str | None = str(store.save_error(spec, trace))
        except OSError:
            log = None
        return RunStatus(key=spec.key(), error=f"{type(error).__name__}: {error}", log=log)
    return RunStatus(key=spec.key())


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class LocalSweep:
    """Runs on this machine's cores: in-process with one job (easy to debug, no pickling),
    else one spec per task of a process pool."""

    def __init__(self, jobs: int) -> None:
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        self.jobs = jobs

    def run(self, specs: Sequence[RunSpec], directory: Path, done: Done) -> None:
        """See :class:`SweepRunner`."""
        if self.jobs == 1 or len(specs) <= 1:
            for spec in specs:
                for outcome in run_batch([spec], str(directory)):
                    done(outcome)
            return
        broken = self._pool(specs, directory, done, isolated=False)
        # A worker that died (a crash, the OOM killer) broke the pool and failed every run in
        # it: redo those each in its own process, so that only the culprit fails.
        for start in range(0, len(broken), self.jobs):
            self._pool(broken[start : start + self.jobs], directory, done, isolated=True)

    def _pool(
        self, specs: Sequence[RunSpec], directory: Path, done: Done, *, isolated: bool
    ) -> list[RunSpec]:
        """Run ``specs`` in one pool (or one pool each if ``isolated``); return those that a
        broken shared pool failed (alone in its pool, a run that breaks it has failed)."""
        if isolated:
            pools = [ProcessPoolExecutor(1, mp_context=_context()) for _ in specs]
        else:
            pools = [ProcessPoolExecutor(min(self.jobs, len(specs)), mp_context=_context())]
        broken: list[RunSpec] = []
        try:
            pending: dict[Future[list[RunStatus]], RunSpec] = {
                pools[i if isolated else 0].submit(run_batch, [spec], str(directory)): spec
                for i, spec in enumerate(specs)
            }
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    spec = pending.pop(future)
                    if not isolated and isinstance(future.exception(), BrokenProcessPool):
                        broken.append(spec)
                        continue
                    for outcome in _outcomes(future, spec):
                        done(outcome)
        except BaseException:
            # Ctrl-C or a failing callback: stop now; the runs that finished are stored.
            for pool in pools:
                _terminate(pool)
            raise
        for pool in pools:
            pool.shutdown()
        return broken


def _context() -> BaseContext:
    """forkserver, not fork: the sweep's process may have threads (the progress bar's)."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _outcomes(future: Future[list[RunStatus]], spec: RunSpec) -> list[RunStatus]:
    try:
        return future.result()
    except Exception as error:  # e.g. its worker was killed: its run failed
        return [RunStatus(key=spec.key(), error=f"{type(error).__name__}: {error}")]


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop the pool's workers now, whatever they are running (no public API before 3.14)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)
