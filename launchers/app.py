"""The application description ``coorm-launch`` reads: one TOML file, validated with pydantic.

A user writes it by hand, so every mistake is one line naming the file and the key
(``app.toml: component.1.clusters: ...``), as the daemon's configuration does. It says what to
run (components: executable, arguments, environment, processes per host, where each may run),
what to see (the filter), how to choose (the selector and its parameters) and how to deploy
(the MPI launcher, the run directory, the rendezvous ports). How to submit on each cluster is
not here: the bridge tells it per cluster (``ClusterInfo.submission``).

Relative paths in the file are taken from the file's folder, so a file can travel with its
application: an executable given with a ``/`` (``bin/solver``), any argument that starts with
``./`` or ``../``, and the run root. Executables named without a ``/`` are found on the job's
``PATH``.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from coorm_bridge.core.model import (
    ENV_NAME_PATTERN,
    MAX_DURATION,
    Duration,
    Filter,
    Frozen,
    HostCount,
    Label,
    Name,
    describe,
)
from coorm_bridge.launchers.kinds import EvolvingSpec, Kind, MalleableSpec, PluginSpec

#: Processes one host may be given: more than any node has cores.
MAX_PROCESSES_PER_HOST = 65_536
#: Components of one application: coupled codes, not a workflow of thousands.
MAX_COMPONENTS = 64
#: Words and bytes of a command or an environment value: far above any sane command line.
MAX_WORDS = 4096
MAX_TEXT = 65_536
#: A selection's gain worth a new request, at most: the longest duration the bridge accepts.
MAX_MIN_GAIN = MAX_DURATION
#: What an MPI launcher template may refer to (``{hostfile}``...), filled per cluster.
TEMPLATE_KEYS = frozenset({"hostfile", "hosts", "processes", "processes_per_host"})
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
#: A selector: an entry-point name, or ``package.module:Class``.
_SELECTOR = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}(?::[A-Za-z_][A-Za-z0-9_.]{0,127})?$")
#: What the launcher itself puts in every job's environment: a component may not set them.
RESERVED_ENV = frozenset(
    {
        "COORM_RUN_JSON",
        "COORM_COMPONENT",
        "COORM_CLUSTER",
        "COORM_HOSTFILE",
        "COORM_SESSION",
        "COORM_RUN_DIR",
        "COORM_JOB_ID",  # the mock's front end sets these two
        "COORM_JOB_HOSTS",
    }
)


_LABEL: TypeAdapter[str] = TypeAdapter(Label)


class AppError(Exception):
    """The application file cannot be used; the message names the file, the key and why."""


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("holds a NUL byte, which no command line can carry")
    return value


Text = Annotated[str, Field(max_length=MAX_TEXT), AfterValidator(_no_nul)]
Word = Annotated[str, Field(min_length=1, max_length=MAX_TEXT), AfterValidator(_no_nul)]


def _env_name(value: str) -> str:
    if not ENV_NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an environment variable name: letters, digits and '_', "
            "not starting with a digit"
        )
    if value in RESERVED_ENV:
        raise ValueError(f"{value} is set by coorm-launch for every job")
    return value


def _usable_path(value: Path) -> Path:
    text = str(value)
    if "\x00" in text or len(text.encode(errors="surrogateescape")) >= 4096:
        raise ValueError("is not a path the system accepts (a NUL byte, or too long)")
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]
PerHost = Annotated[int, Field(gt=0, le=MAX_PROCESSES_PER_HOST, strict=True)]
Port = Annotated[int, Field(ge=1024, le=65535, strict=True)]
MpiPreset = Literal["auto", "mpirun", "srun", "local", "none"]


def _template(words: tuple[str, ...]) -> tuple[str, ...]:
    for word in words:
        for key in _PLACEHOLDER.findall(word):
            if key not in TEMPLATE_KEYS:
                raise ValueError(
                    f"unknown placeholder {{{key}}} in {word!r}: use "
                    + ", ".join(f"{{{k}}}" for k in sorted(TEMPLATE_KEYS))
                )
    return words


#: An MPI launcher command before the component's own: the words, with placeholders.
Template = Annotated[
    tuple[Word, ...], Field(min_length=1, max_length=MAX_WORDS), AfterValidator(_template)
]


#: The MPI launcher per kind of submission (``{ slurm = "mpirun", mock = "local" }``): one
#: application file for a site and for the mock; a kind left out gets ``auto``.
PerKind = Annotated[
    dict[Literal["mock", "slurm", "oar"], MpiPreset | Template], Field(min_length=1)
]
Mpi = MpiPreset | Template | PerKind


class Component(Frozen):
    """``[[component]]``: one code of the coupled application (say the ocean, or the coupler).

    It runs on one cluster, or on up to ``max_clusters`` (one part per cluster, as a
    multi-cluster solver does); each cluster's job runs one component.
    """

    name: Name
    command: tuple[Word, ...] = Field(min_length=1, max_length=MAX_WORDS)
    """The executable and its arguments, as an argument vector (no shell reads it)."""
    environment: dict[EnvName, Text] = Field(default_factory=dict, max_length=MAX_WORDS)
    processes_per_host: PerHost | None = None
    """None: as many as the cluster's hosts have cores."""
    clusters: tuple[Name, ...] | None = Field(default=None, min_length=1)
    """Where it may run (None: wherever the filter lets the application see)."""
    min_hosts: HostCount = 1
    max_hosts: HostCount | None = None
    """Hosts over all its clusters."""
    max_clusters: Annotated[int, Field(ge=1, le=64, strict=True)] = 1
    mpi: Mpi | None = None
    """This component's MPI launcher, when not the deployment's."""

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.max_hosts is not None and self.max_hosts < self.min_hosts:
            raise ValueError(f"max_hosts ({self.max_hosts}) is below min_hosts ({self.min_hosts})")
        if self.min_hosts < 1:
            raise ValueError("min_hosts: a component runs on at least one host")
        return self


#: ``[selector] min_gain`` by default. In the simulated W0 and W2 workloads on 8 clusters it
#: sends 23 and 3.8 times fewer requests than 0, for a mean response 4% longer (W0, 13-minute
#: jobs) and 5% shorter (W2): a re-request for a few seconds' gain re-plans everyone behind.
DEFAULT_MIN_GAIN = 600


class SelectorSpec(Frozen):
    """``[selector]``: which selector turns views into requests, and its parameters."""

    name: Annotated[str, Field(pattern=_SELECTOR.pattern)] = "rigid"
    """An entry point of the ``coorm_bridge.selectors`` group, or ``module:Class``."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Checked by the selector itself (``coorm-launch --check`` builds it)."""
    min_gain: Annotated[int, Field(ge=0, le=MAX_MIN_GAIN, strict=True)] = DEFAULT_MIN_GAIN
    """Seconds a new selection must end earlier than the current request to be sent (0: any
    change is sent). Fewer requests mean fewer re-plans for everyone queued behind: ten
    minutes by default, from measurements (docs/experiments.md, "The quiet protocol")."""


class Deployment(Frozen):
    """``[deployment]``: how the components are started once the allocation begins."""

    mpi: Mpi = "auto"
    """``mpirun`` (with a hostfile of ``slots=``), ``srun``, ``local`` (``mpirun -np`` on this
    machine, where every mock host is), ``none`` (the command alone, once per cluster), ``auto``
    (``srun`` on Slurm, ``none`` on the mock), a template such as
    ``["mpiexec", "-f", "{hostfile}", "-n", "{processes}"]``, or one of these per kind of
    cluster: ``{ slurm = "mpirun", mock = "local" }``."""
    run_root: Annotated[Path, AfterValidator(_usable_path)] | None = None
    """Where run directories go (``<run_root>/<session>``); None: ``./coorm-runs``."""
    ports: tuple[Port, Port] = (40000, 49999)
    """The range rendezvous ports are picked from, the same way for a given session."""
    poll_interval: Annotated[float, Field(ge=0.1, le=600, allow_inf_nan=False)] = 2.0
    """Seconds between two looks at the jobs' states."""

    @field_validator("ports")
    @classmethod
    def _ordered(cls, ports: tuple[int, int]) -> tuple[int, int]:
        if ports[1] < ports[0]:
            raise ValueError(f"the range ends ({ports[1]}) before it starts ({ports[0]})")
        return ports


class AppSpec(Frozen):
    """The whole file."""

    name: Label | None = None
    """The session's label at the bridge (default: the file's name without ``.toml``)."""
    kind: Kind = "rigid"
    """``rigid`` or ``moldable`` (a selector chooses one request), ``evolving`` (steps in a
    pre-allocation, ``[evolving]`` and ``[growth]``), ``malleable`` (tasks on preemptible
    hosts, ``[malleable]`` and ``[tasks]``): :mod:`.kinds`."""
    evolving: EvolvingSpec | None = None
    growth: PluginSpec | None = None
    malleable: MalleableSpec | None = None
    tasks: PluginSpec | None = None
    duration: Duration | None = None
    """Seconds to ask for; None leaves the duration to the selector (a duration model)."""
    filter: Filter = Filter()
    selector: SelectorSpec = SelectorSpec()
    deployment: Deployment = Deployment()
    components: tuple[Component, ...] = Field(
        min_length=1, max_length=MAX_COMPONENTS, alias="component"
    )

    model_config = Frozen.model_config | {"populate_by_name": True}

    @model_validator(mode="after")
    def _kind(self) -> Self:
        tables = {"evolving": ("evolving", "growth"), "malleable": ("malleable", "tasks")}
        wanted = tables.get(self.kind, ())
        for table in ("evolving", "growth", "malleable", "tasks"):
            given = getattr(self, table) is not None
            if table in wanted and not given:
                raise ValueError(f"kind = {self.kind!r} needs a [{table}] table")
            if given and table not in wanted:
                raise ValueError(f"[{table}] is for kind = {_kind_of(table)!r}, not {self.kind!r}")
        if wanted and len(self.components) != 1:
            raise ValueError(f"kind = {self.kind!r} runs one [[component]]")
        if wanted and self.components[0].max_clusters != 1:
            raise ValueError(f"kind = {self.kind!r} runs on one cluster (max_clusters = 1)")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        names = [c.name for c in self.components]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"component names must differ: {', '.join(twice)} repeat")
        seen = self.filter.clusters
        if seen is not None:
            for number, component in enumerate(self.components):
                hidden = sorted(set(component.clusters or ()) - set(seen))
                if hidden:
                    raise ValueError(
                        f"component.{number}.clusters: {', '.join(hidden)} not in "
                        f"filter.clusters ({', '.join(seen)}): the application would not see it"
                    )
        return self

    @property
    def subscription_filter(self) -> Filter:
        """The filter to subscribe with: the file's, limited to the clusters the components
        may use when every component names its own."""
        if self.filter.clusters is not None or any(c.clusters is None for c in self.components):
            return self.filter
        wanted = sorted({name for c in self.components for name in c.clusters or ()})
        return self.filter.model_copy(update={"clusters": tuple(wanted)})


def _kind_of(table: str) -> str:
    return "evolving" if table in ("evolving", "growth") else "malleable"


def parse_app(text: str, source: str = "<app>", base_dir: Path | None = None) -> AppSpec:
    """An application description from TOML text; relative paths taken from ``base_dir``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise AppError(f"{source}: not valid TOML: {error}") from error
    try:
        app = AppSpec.model_validate(data)
    except ValidationError as error:
        raise AppError(f"{source}: {describe(error)}") from error
    return _resolved(app, base_dir) if base_dir is not None else app


def load_app(path: str | Path, *, programs: bool = False) -> AppSpec:
    """Read an application file (relative paths in it are from its folder). With ``programs``,
    also check that every program given relative to the file is an executable file there
    (:func:`program_problems`)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise AppError(f"{path}: cannot read the application file: {error.strerror}") from error
    except ValueError as error:  # not UTF-8, a NUL in the path
        raise AppError(f"{str(path)!r}: cannot read the application file: {error}") from error
    base = path.resolve().parent
    if programs:
        problems = program_problems(parse_app(text, source=str(path)), base)
        if problems:
            raise AppError(f"{path}: {'; '.join(problems)}")
    app = parse_app(text, source=str(path), base_dir=base)
    if app.name is None:
        try:
            label = _LABEL.validate_python(path.name.removesuffix(".toml")[:256])
        except ValidationError:
            return app  # a file name that is no printable label: the session goes unnamed
        app = app.model_copy(update={"name": label})
    return app


def program_problems(app: AppSpec, base: Path) -> list[str]:
    """``component.N.command.0: why`` for each program given relative to the file (with a
    ``/``, not absolute) that is not an executable file in ``base``: it travels with the file,
    so it can be checked here, before any host is held, rather than failing in every job.
    Programs given by absolute path or found on the job's ``PATH`` live where the jobs run
    (a cluster's nodes, which may not be this host): those are left to the batch system."""
    problems = []
    for number, component in enumerate(app.components):
        spelled = component.command[0]
        if "/" not in spelled or spelled.startswith("/"):
            continue
        program = base / spelled
        where = f"component.{number}.command.0: {spelled!r}"
        if not program.exists():
            problems.append(
                f"{where} is not there (no {program}): a program given with a '/' is read "
                "from the application file's folder"
            )
        elif not program.is_file():
            problems.append(f"{where} is not a program ({program} is a folder)")
        elif not os.access(program, os.X_OK):
            problems.append(f"{where} is not executable: chmod +x {program}")
    return problems


def _resolved(app: AppSpec, base: Path) -> AppSpec:
    """Relative paths are read from ``base``: an executable given with a ``/``, arguments
    starting with ``./`` or ``../``, and the run root."""
    components = tuple(
        c.model_copy(
            update={
                "command": (
                    _from(base, c.command[0]),
                    *(str(base / w) if w.startswith(("./", "../")) else w for w in c.command[1:]),
                )
            }
        )
        for c in app.components
    )
    deployment = app.deployment
    root = deployment.run_root
    if root is not None and not root.is_absolute():
        deployment = deployment.model_copy(update={"run_root": base / root})
    return app.model_copy(update={"components": components, "deployment": deployment})


def _from(base: Path, executable: str) -> str:
    if "/" not in executable or executable.startswith("/"):
        return executable
    return str(base / executable)
