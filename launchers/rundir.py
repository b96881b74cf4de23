"""The run directory: what a started application's jobs read, and what is kept of them.

``<run_root>/<session>/`` holds, per cluster, a hostfile (one granted host per line, with
``slots=`` for mpirun), ``run.json`` describing every component (its clusters, hosts,
processes and rendezvous address), the jobs' outputs (``<cluster>.out``/``.err``) and
``jobs.json`` (each cluster's job id, state and exit status, rewritten as they change). Every
job's environment names ``run.json`` (``COORM_RUN_JSON``), its component (``COORM_COMPONENT``),
its cluster, hostfile, session and run directory (``COORM_CLUSTER``, ``COORM_HOSTFILE``,
``COORM_SESSION``, ``COORM_RUN_DIR``), so coupled codes find each other over TCP without any
other agreement. ``run.json``'s ``components`` maps each name, in the file's order, to its
clusters, processes, rendezvous (its first part's) and parts.

Rendezvous ports are picked from the file's range from a digest of the session: the same
session always gets the same ports (a restarted launcher writes the same ``run.json``), two
sessions rarely share one, and the parts of one session never do.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coorm_bridge.core.messages import StartEvent
from coorm_bridge.core.model import ClusterInfo
from coorm_bridge.launchers.app import AppSpec, Component, Mpi
from coorm_bridge.launchers.layout import layout

#: The MPI launchers by name: words before the component's command, placeholders filled per
#: cluster. ``srun`` runs inside the job's allocation, on its hosts.
PRESETS: Mapping[str, tuple[str, ...]] = {
    "mpirun": ("mpirun", "--hostfile", "{hostfile}", "-np", "{processes}"),
    "srun": (
        "srun",
        "--nodes={hosts}",
        "--ntasks={processes}",
        "--ntasks-per-node={processes_per_host}",
    ),
    "none": (),
    # Every host of the mock platform is this machine: the ranks all start here.
    "local": ("mpirun", "--oversubscribe", "-np", "{processes}"),
}
#: What ``auto`` means for each kind of submission. For Open MPI on Slurm prefer ``mpirun``
#: (inside the job it starts its daemons through Slurm on the job's hosts): Debian's Open MPI
#: has no PMI for ``srun`` to launch MPI ranks directly ("OMPI was not built with SLURM's PMI
#: support"). On the mock, ``local`` starts the ranks here, where all its hosts are.
AUTO = {"slurm": "srun", "mock": "none", "oar": "mpirun"}
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
DEFAULT_ROOT = Path("coorm-runs")


def mpi_words(choice: Mpi, kind: str) -> tuple[tuple[str, ...], bool]:
    """The launcher's words for a cluster of ``kind``, and whether its hostfile says ``slots=``
    (OpenMPI's mpirun reads it; other launchers want bare host names)."""
    if isinstance(choice, dict):
        return mpi_words(choice.get(kind, "auto"), kind)  # type: ignore[call-overload]
    if isinstance(choice, tuple):
        return choice, choice[0].rsplit("/", 1)[-1] == "mpirun"
    name = AUTO.get(kind, "none") if choice == "auto" else choice
    return PRESETS[name], name in ("mpirun", "local")


def fill(words: Sequence[str], values: Mapping[str, str]) -> tuple[str, ...]:
    """``words`` with each ``{key}`` replaced (the keys were checked when the file was read)."""
    return tuple(_PLACEHOLDER.sub(lambda m: values[m.group(1)], word) for word in words)


def rendezvous_ports(session: str, count: int, ports: tuple[int, int]) -> list[int]:
    """``count`` distinct ports of the range, the same ones for the same session."""
    first, last = ports
    size = last - first + 1
    if count > size:
        raise ValueError(f"{count} parts need {count} rendezvous ports; the range has {size}")
    offset = int.from_bytes(hashlib.sha256(session.encode()).digest()[:8], "big") % size
    return [first + (offset + k) % size for k in range(count)]


@dataclass(frozen=True, slots=True)
class JobPlan:
    """One cluster's job, ready for a deployer: what to run, where, and where its output goes."""

    cluster: str
    component: str
    hosts: tuple[str, ...]
    reservation: str | None
    argv: tuple[str, ...]
    environment: Mapping[str, str]
    workdir: Path
    stdout: Path
    stderr: Path


@dataclass
class ClusterJob:
    """What ``jobs.json`` keeps of one cluster's job."""

    component: str
    kind: str
    job: str | None = None
    state: str = "unsubmitted"
    exit_code: int | None = None
    detail: str | None = None


@dataclass
class RunDirectory:
    """A run's folder and its job records (``jobs.json``, rewritten whole on every change)."""

    path: Path
    plans: list[JobPlan]
    records: dict[str, ClusterJob] = field(default_factory=dict)

    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    def record(self, cluster: str, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self.records[cluster], key, value)
        document = {
            plan.cluster: {
                **vars(self.records[plan.cluster]),
                "stdout": str(plan.stdout),
                "stderr": str(plan.stderr),
            }
            for plan in self.plans
        }
        write_whole(self.path / "jobs.json", json.dumps(document, indent=2) + "\n")


def prepare(
    app: AppSpec,
    session: str,
    start: StartEvent,
    clusters: Mapping[str, ClusterInfo],
    kinds: Mapping[str, str],
    *,
    address: Callable[[str, str], str] | None = None,
    root: Path | None = None,
) -> RunDirectory:
    """Make the run directory of a start: hostfiles, ``run.json``, and one job plan per cluster
    of the allocation, on exactly the hosts it grants. ``kinds``: each cluster's submission kind
    (``auto`` picks the MPI launcher from it); ``address(cluster, host)``: the address others
    reach ``host`` at (default: its name)."""
    granted = {name: len(a.hosts) for name, a in start.allocations.items()}
    parts = layout(app.components, granted)
    folder = (root or app.deployment.run_root or DEFAULT_ROOT).absolute() / session
    folder.mkdir(parents=True, exist_ok=True)
    ports = rendezvous_ports(session, len(parts), app.deployment.ports)
    reach = address or (lambda cluster, host: host)
    described: dict[str, dict[str, Any]] = {}
    plans = []
    for part, port in zip(parts, ports, strict=True):
        component = part.component
        allocation = start.allocations[part.cluster]
        per_host = component.processes_per_host or clusters[part.cluster].cores_per_host
        hostfile = folder / f"{part.cluster}.hosts"
        argv = command_on(
            app,
            component,
            kinds[part.cluster],
            allocation.hosts,
            per_host=per_host,
            hostfile=hostfile,
        )
        entry = described.setdefault(component.name, _component_entry(component))
        entry["clusters"].append(part.cluster)
        entry["processes"] += per_host * len(allocation.hosts)
        entry["parts"].append(
            {
                "cluster": part.cluster,
                "hosts": list(allocation.hosts),
                "processes_per_host": per_host,
                "processes": per_host * len(allocation.hosts),
                "hostfile": str(hostfile),
                "reservation": allocation.reservation,
                "rendezvous": {"host": reach(part.cluster, allocation.hosts[0]), "port": port},
            }
        )
        plans.append(
            JobPlan(
                cluster=part.cluster,
                component=component.name,
                hosts=tuple(allocation.hosts),
                reservation=allocation.reservation,
                argv=argv,
                environment={
                    **component.environment,
                    "COORM_RUN_JSON": str(folder / "run.json"),
                    "COORM_COMPONENT": component.name,
                    "COORM_CLUSTER": part.cluster,
                    "COORM_HOSTFILE": str(hostfile),
                    "COORM_SESSION": session,
                    "COORM_RUN_DIR": str(folder),
                },
                workdir=folder,
                stdout=folder / f"{part.cluster}.out",
                stderr=folder / f"{part.cluster}.err",
            )
        )
    for entry in described.values():
        entry["rendezvous"] = entry["parts"][0]["rendezvous"]
    run = {
        "session": session,
        "application": app.name,
        "start": start.time,
        "end": start.end,
        # when the launcher was told, by its clock: what its jobs' start is measured against
        "told": round(time.time(), 3),
        "directory": str(folder),
        "components": described,
    }
    write_whole(folder / "run.json", json.dumps(run, indent=2) + "\n")
    directory = RunDirectory(folder, plans)
    directory.records = {
        plan.cluster: ClusterJob(plan.component, kinds[plan.cluster]) for plan in plans
    }
    return directory


def command_on(
    app: AppSpec,
    component: Component,
    kind: str,
    hosts: Sequence[str],
    *,
    per_host: int,
    hostfile: Path,
) -> tuple[str, ...]:
    """The argument vector that runs ``component`` on ``hosts`` (``per_host`` processes each)
    with its MPI launcher on a cluster of submission ``kind``; writes the hostfile it names."""
    words, slots = mpi_words(component.mpi or app.deployment.mpi, kind)
    write_whole(hostfile, hostfile_text(hosts, per_host if slots else None))
    values = {
        "hostfile": str(hostfile),
        "hosts": str(len(hosts)),
        "processes": str(per_host * len(hosts)),
        "processes_per_host": str(per_host),
    }
    return (*fill(words, values), *component.command)


def _component_entry(component: Component) -> dict[str, Any]:
    """A component in ``run.json``; its rendezvous is its first part's (filled at the end)."""
    return {"name": component.name, "clusters": [], "processes": 0, "rendezvous": None, "parts": []}


def hostfile_text(hosts: Sequence[str], slots: int | None) -> str:
    """One host per line; ``host slots=N`` when the MPI launcher reads slots."""
    suffix = "" if slots is None else f" slots={slots}"
    return "".join(f"{host}{suffix}\n" for host in hosts)


def write_whole(path: Path, text: str) -> None:
    """Written whole or not at all: a job or a user reading it never sees half a file."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)
