"""The Slurm runner: a sweep's missing runs as one job array, through submitit.

Each array task runs :func:`~.runners.run_batch` on a few specs with this very Python
(``sys.executable``), stores each run itself and returns the outcomes. A task's end is seen
through its result file, or through its leaving ``squeue`` (a killed task writes no result,
and ``sacct`` is not there on sites without accounting): the specs it had not stored have then
failed, and the next sweep retries them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from coorm_bridge.core.model import Frozen
from coorm_bridge.sim.experiment import RunSpec
from coorm_bridge.sim.runners import Done, RunStatus, run_batch
from coorm_bridge.sim.store import RunStore, SweepStoreError

if TYPE_CHECKING:
    from submitit import Job, SlurmExecutor

SBATCH_OPTION = re.compile(r"^[a-z][a-z0-9-]*$")
#: A task absent from squeue this many polls in a row (and with no result) has ended.
ABSENT_POLLS = 2


class RunnerUnavailable(Exception):
    """The runner cannot be used here (submitit missing, no Slurm, sbatch refused)."""


class SlurmOptions(Frozen):
    """Where and how the array runs; ``sbatch`` adds any sbatch option (``{"qos": "low"}``)."""

    folder: Path
    partition: str | None = None
    time_min: int = Field(default=60, ge=1)
    cpus_per_task: int = Field(default=1, ge=1)
    per_task: int = Field(default=1, ge=1)
    array_parallelism: int | None = Field(default=None, ge=1)
    job_name: str = "coorm-sim"
    sbatch: dict[str, str] = Field(default_factory=dict)
    poll_s: float = Field(default=2.0, gt=0)

    @field_validator("sbatch")
    @classmethod
    def _option_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not SBATCH_OPTION.fullmatch(name):
                raise ValueError(f"{name!r} is not an sbatch option name (e.g. qos, account)")
        return value


class SlurmRunner:
    """Runs specs as a Slurm job array (see the module docstring)."""

    def __init__(self, options: SlurmOptions) -> None:
        """Raises :class:`RunnerUnavailable` at once without submitit or Slurm's client."""
        self.options = options
        self.executor = _executor(options)

    def run(self, specs: Sequence[RunSpec], directory: Path, done: Done) -> None:
        """See :class:`~.runners.SweepRunner`."""
        if not specs:
            return
        step = self.options.per_task
        chunks = [list(specs[i : i + step]) for i in range(0, len(specs), step)]
        jobs = self._submit(chunks, directory.resolve())
        arrays = sorted({job.job_id.split("_")[0] for job in jobs})
        try:
            self._follow(list(zip(jobs, chunks, strict=True)), arrays, RunStore(directory), done)
        except BaseException:
            # Ctrl-C or a failing callback: stop the array; the finished runs are stored.
            subprocess.run(  # noqa: S603 - an argument vector, no shell
                ["scancel", *arrays],  # noqa: S607 - Slurm's client, found on PATH
                check=False,
                timeout=60,
                capture_output=True,
            )
            raise

    def _submit(self, chunks: list[list[RunSpec]], directory: Path) -> list[Job[list[RunStatus]]]:
        from submitit.core.utils import FailedSubmissionError  # noqa: PLC0415 - optional

        executor = self.executor
        try:
            return executor.map_array(run_batch, chunks, [str(directory)] * len(chunks))
        except (subprocess.CalledProcessError, OSError, FailedSubmissionError) as error:
            said = getattr(error, "output", b"") or b""
            detail = said.decode(errors="replace").strip() if isinstance(said, bytes) else said
            raise RunnerUnavailable(f"sbatch failed: {error} {detail}".strip()) from None

    def _follow(
        self,
        pending: list[tuple[Job[list[RunStatus]], list[RunSpec]]],
        arrays: list[str],
        store: RunStore,
        done: Done,
    ) -> None:
        absent: dict[str, int] = {}
        while pending:
            queued = _queued(arrays)
            still: list[tuple[Job[list[RunStatus]], list[RunSpec]]] = []
            for job, chunk in pending:
                if job.paths.result_pickle.exists():
                    outcomes = _results(job, chunk, store)
                elif queued is not None and job.job_id not in queued:
                    absent[job.job_id] = absent.get(job.job_id, 0) + 1
                    if absent[job.job_id] < ABSENT_POLLS:
                        still.append((job, chunk))
                        continue
                    outcomes = _lost(job, chunk, store, "ended without a result")
                else:
                    absent.pop(job.job_id, None)
                    still.append((job, chunk))
                    continue
                for outcome in outcomes:
                    done(outcome)
            pending = still
            if pending:
                time.sleep(self.options.poll_s)


def _executor(options: SlurmOptions) -> SlurmExecutor:
    try:
        from submitit import SlurmExecutor  # noqa: PLC0415 - optional, for this runner only
    except ImportError:
        raise RunnerUnavailable(
            "the slurm executor needs submitit: pip install 'coorm-bridge[sim]'"
        ) from None
    try:
        executor = SlurmExecutor(
            folder=options.folder.resolve() / "%j", python=shlex.quote(sys.executable)
        )
    except RuntimeError as error:  # no srun on this host
        raise RunnerUnavailable(f"no Slurm here: {error}") from None
    parameters: dict[str, object] = {
        "job_name": options.job_name,
        "time": options.time_min,
        "cpus_per_task": options.cpus_per_task,
        "additional_parameters": dict(options.sbatch),
    }
    if options.partition is not None:
        parameters["partition"] = options.partition
    if options.array_parallelism is not None:
        parameters["array_parallelism"] = options.array_parallelism
    executor.update_parameters(**parameters)
    return executor


def _queued(arrays: list[str]) -> set[str] | None:
    """The array tasks Slurm still knows as pending or running; None if squeue failed."""
    try:
        listed = subprocess.run(  # noqa: S603 - an argument vector, no shell
            ["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(arrays)],  # noqa: S607 - on PATH
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        # squeue refuses ids it has forgotten ("Invalid job id"): then none is queued.
        return set() if "Invalid job id" in listed.stderr else None
    return set(listed.stdout.split())


def _results(job: Job[list[RunStatus]], chunk: list[RunSpec], store: RunStore) -> list[RunStatus]:
    try:
        return job.result()
    except Exception as error:  # the task itself failed, not one of its runs
        return _lost(job, chunk, store, f"failed: {str(error).strip().splitlines()[-1:]}")


def _lost(
    job: Job[list[RunStatus]], chunk: list[RunSpec], store: RunStore, why: str
) -> list[RunStatus]:
    """The chunk of a task that ended badly: what it stored before is done, the rest failed."""
    outcomes = []
    for spec in chunk:
        try:
            stored = store.load(spec) is not None
        except SweepStoreError:
            stored = False
        if stored:
            outcomes.append(RunStatus(key=spec.key()))
        else:
            outcomes.append(
                RunStatus(
                    key=spec.key(),
                    error=f"Slurm task {job.job_id} {why} (killed, out of time or memory?)",
                    log=str(job.paths.stderr),
                )
            )
    return outcomes
