"""The pyslurm back-end: reads through libslurm (pyslurm 22.5's ``job``, ``node`` and
``reservation`` classes), writes through the commands (a :class:`.SlurmCliBackend`).

Optional and never required: pyslurm is imported only when asked for, and only a pyslurm whose
major.minor is the running Slurm's is accepted (PyPI has 25.11, which refuses Slurm 22.05 with
"Slurm version mismatch"; 22.5.x builds from GitHub only). It reads the controller of this
process's ``SLURM_CONF`` from this host (no ``[adapter.ssh]``, no ``-M``) and its answers go
through the commands' parsers (:mod:`.parse`).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import pwd
import re
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from coorm_bridge.adapters.batch.backend import Backend, BatchFailure, Hardware
from coorm_bridge.adapters.slurm import answers, parse
from coorm_bridge.adapters.slurm.binding import SlurmBinding
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.hardware import hardware_of
from coorm_bridge.adapters.slurm.settings import SlurmSettings
from coorm_bridge.core.batch import AdapterError, Job, JobSpec, JobState, Node, Reservation
from coorm_bridge.core.batch import ReservationSpec as Spec
from coorm_bridge.core.rules import ClusterRules

_VERSION = re.compile(r"(\d+)\.(\d+)")


def compare_versions(pyslurm_version: str, slurm_version: str) -> tuple[bool, str]:
    """Whether a pyslurm release suits a Slurm release: same major.minor (22.5.3 is for 22.05)."""
    found = [_VERSION.search(v) for v in (pyslurm_version, slurm_version)]
    if found[0] is None or found[1] is None:
        return False, f"unreadable versions: pyslurm {pyslurm_version!r}, Slurm {slurm_version!r}"
    mine, theirs = ((int(m.group(1)), int(m.group(2))) for m in found if m is not None)
    if mine != theirs:
        return False, (
            f"pyslurm {pyslurm_version} is for Slurm {mine[0]}.{mine[1]:02d}, this Slurm is "
            f"{slurm_version}: pyslurm {theirs[0]}.{theirs[1]}.x is needed"
        )
    return True, f"pyslurm {pyslurm_version} matches Slurm {slurm_version}"


@functools.cache
def _import() -> tuple[Any, str]:
    """(the pyslurm module or None, why not); imported once: importing it starts libslurm."""
    try:
        return importlib.import_module("pyslurm"), ""
    except Exception as error:  # 25.x raises on a version mismatch
        return None, f"pyslurm cannot be imported ({type(error).__name__}: {error})"


def slurm_version(timeout: float = 10) -> str:
    """The running Slurm's version (``scontrol --version``: "slurm 22.05.8"); ValueError if none."""
    try:
        done = subprocess.run(
            ["scontrol", "--version"],  # noqa: S607 - Slurm's client, found on PATH like the CLI
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ValueError(f"scontrol --version: {error}") from error
    found = _VERSION.search(done.stdout) if done.returncode == 0 else None
    if found is None:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise ValueError(f"scontrol --version: {lines[-1] if lines else done.returncode}")
    return done.stdout.split()[-1]


def pyslurm_status() -> tuple[bool, str]:
    """Whether pyslurm is importable, has the 22.5 API and matches the running Slurm; why."""
    module, why = _import()
    if module is None:
        return False, why
    version = str(getattr(module, "__version__", "") or "unknown")
    missing = [name for name in ("job", "node", "reservation") if not hasattr(module, name)]
    if missing:
        return False, f"pyslurm {version} lacks the 22.5 API (pyslurm.{', pyslurm.'.join(missing)})"
    try:
        running = slurm_version()
    except ValueError as error:
        return False, f"cannot tell which Slurm runs here: {error}"
    return compare_versions(version, running)


class PyslurmBackend(Backend[SlurmBinding]):
    """Reads with pyslurm (one controller: the process's SLURM_CONF), writes with ``cli``."""

    def __init__(self, settings: SlurmSettings, cli: SlurmCliBackend) -> None:
        here = os.environ.get("SLURM_CONF")
        problems = ["[adapter.ssh] is set: pyslurm reads this host's Slurm"] if settings.ssh else []
        for c in settings.clusters:
            if c.cluster is not None:
                problems.append(f"cluster {c.name} uses -M {c.cluster}")
            if c.slurm_conf is not None and str(c.slurm_conf) != here:
                problems.append(f"cluster {c.name}: slurm_conf {c.slurm_conf} is not SLURM_CONF")
        if problems:
            raise AdapterError(
                f'backend = "pyslurm" reads one controller, the process\'s SLURM_CONF '
                f'({here or "unset"}): {"; ".join(problems)}; use backend = "cli"'
            )
        ok, why = pyslurm_status()
        if not ok:
            raise AdapterError(f'backend = "pyslurm" cannot be used: {why}; use backend = "cli"')
        self.pyslurm: Any = _import()[0]
        self.cli = cli
        self._lock = threading.Lock()  # libslurm's client calls, one at a time

    def _call(self, read: Callable[[], dict[Any, Any]]) -> dict[Any, Any]:
        """pyslurm raises ValueError(Slurm's error string, errno) when Slurm says no."""
        try:
            with self._lock:
                return read()
        except Exception as error:  # a C extension: any error fails the read
            message = str(error.args[0] if error.args else error) or type(error).__name__
            said = answers.not_answering(f"pyslurm: {message}")
            raise BatchFailure(answers.classify_error(message), said) from error

    def _nodes(self) -> dict[str, dict[str, Any]]:
        return self._call(lambda: dict(self.pyslurm.node().get()))

    def hardware(self, binding: SlurmBinding) -> Hardware:
        nodes = [{**n, "name": n.get("name") or name} for name, n in self._nodes().items()]
        try:
            return hardware_of(nodes, binding.partition, binding.cluster)
        except ValueError as error:
            raise BatchFailure("other", f"pyslurm: {error}") from error

    def read(
        self, binding: SlurmBinding, now: int
    ) -> tuple[list[Node], list[Job], list[Reservation]]:
        # pyslurm's dicts in the shapes of ``sinfo --json`` and ``squeue --json`` (22.05).
        records = [
            {"name": n.get("name") or name, "state": n.get("state") or "", "state_flags": [],
             "partitions": n.get("partitions") or []}
            for name, n in self._nodes().items()
        ]  # fmt: skip
        nodes = parse.parse_sinfo(json.dumps({"nodes": records}), binding.partition)
        rows = [
            {"job_id": j.get("job_id", key), "job_state": j.get("job_state"),
             "user_name": _user(j.get("user_id")), "partition": j.get("partition") or "",
             "nodes": j.get("nodes"), "node_count": j.get("num_nodes"),
             "time_limit": j.get("time_limit") if isinstance(j.get("time_limit"), int) else None,
             "start_time": j.get("start_time"), "resv_name": j.get("resv_name")}
            for key, j in self._call(lambda: dict(self.pyslurm.job().get())).items()
        ]  # fmt: skip
        jobs = parse.parse_squeue(json.dumps({"jobs": rows}), binding.partition, now=now)
        names = {node.name for node in nodes}
        return nodes, jobs, self._reservations(binding.partition, names)

    def _reservations(self, partition: str | None, nodes: set[str]) -> list[Reservation]:
        found = []
        for name, r in self._call(lambda: dict(self.pyslurm.reservation().get())).items():
            reservation = parse.reservation_of(
                str(name),
                r.get("node_list"),
                parse.number(r.get("node_cnt")),
                parse.number(r.get("start_time")),
                parse.number(r.get("end_time")),
                ",".join(r.get("users") or ()),
                in_partition=partition is None or r.get("partition") == partition,
                nodes=nodes,
                source="pyslurm",
            )
            if reservation is not None:
                found.append(reservation)
        return found

    def reservation(self, binding: SlurmBinding, name: str) -> Reservation | None:
        return next((r for r in self._reservations(None, set()) if r.name == name), None)

    # Writes, submissions and single job states: the commands.
    def create_reservation(self, binding: SlurmBinding, spec: Spec) -> None:
        self.cli.create_reservation(binding, spec)

    def update_reservation(self, binding: SlurmBinding, spec: Spec, *, begun: bool = False) -> None:
        self.cli.update_reservation(binding, spec, begun=begun)

    def delete_reservation(self, binding: SlurmBinding, name: str) -> None:
        self.cli.delete_reservation(binding, name)

    def submit(self, binding: SlurmBinding, job: JobSpec) -> str:
        return self.cli.submit(binding, job)

    def cancel(self, binding: SlurmBinding, job_id: str) -> None:
        self.cli.cancel(binding, job_id)

    def job_state(self, binding: SlurmBinding, job_id: str) -> JobState:
        return self.cli.job_state(binding, job_id)

    def check_rights(self, binding: SlurmBinding) -> None:
        self.cli.check_rights(binding)

    def rules(self, binding: SlurmBinding) -> ClusterRules:
        """Read by the commands (:meth:`.SlurmCliBackend.rules`): pyslurm 22.05 reads
        partitions but not slurmdbd's associations and QOS limits, and both must agree."""
        return self.cli.rules(binding)

    def close(self) -> None:
        self.cli.close()


def _user(uid: Any) -> str:
    try:
        return pwd.getpwuid(int(uid)).pw_name
    except (KeyError, TypeError, ValueError):
        return ""
