"""The simulated platform's description: clusters, links, background load and outages, from TOML.

A default platform ships inside the package (three clusters of different sizes and speeds, busy
with a synthetic load from the start), so the bridge runs with no configuration at all. Errors
name the file and the key, because a site admin edits these files by hand.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, ValidationError, model_validator

from coorm_bridge.batchsim.limits import (
    DURATION_LIMIT,
    MAX_COUNT,
    MAX_HOSTS,
    MAX_JOBS,
    TIME_LIMIT,
    at_most,
)
from coorm_bridge.batchsim.rules import UserRule
from coorm_bridge.batchsim.scheduler import SchedulingPolicy
from coorm_bridge.core.batch import AdapterError
from coorm_bridge.core.model import ClusterInfo, Frozen, Link, Name, Submission, describe

DEFAULT_PLATFORM = "default_platform.toml"

Count = Annotated[int, Field(gt=0, strict=True), at_most(MAX_COUNT, "2**53")]
Size = Annotated[int, Field(ge=0, strict=True), at_most(MAX_COUNT, "2**53")]
Jobs = Annotated[int, Field(gt=0, strict=True), at_most(MAX_JOBS, "jobs of one load")]
Hosts = Annotated[int, Field(gt=0, strict=True), at_most(MAX_HOSTS, "hosts of one cluster")]
Offset = Annotated[int, Field(ge=0, strict=True), DURATION_LIMIT]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False), DURATION_LIMIT]
TimeScale = Annotated[float, Field(gt=0, allow_inf_nan=False), at_most(1000.0, "a thousandfold")]


class ClusterSpec(ClusterInfo):
    """One simulated cluster (its CINFO) and the batch scheduler that runs it."""

    policy: SchedulingPolicy = SchedulingPolicy.CONSERVATIVE
    # The simulator's bounds on what a cluster may be (see limits); what launchers see is the same.
    hosts: Hosts
    cores_per_host: Count = 1
    ram_per_host_mib: Size = 0
    scratch_per_host_mib: Size = 0
    rules: tuple[UserRule, ...] = Field(default=(), alias="rule", max_length=1000)
    """``[[cluster.rule]]``: what the simulated batch system allows each user's job (see
    :mod:`.rules`). Not part of the simulation's history: changing them keeps the saved state."""

    model_config = ClusterInfo.model_config | {"populate_by_name": True}

    @model_validator(mode="after")
    def _no_submission(self) -> Self:
        if self.submission is not None:
            raise ValueError(
                "submission is not a platform setting: jobs go to the mock's own front end"
            )
        return self

    def info(self) -> ClusterInfo:
        """What launchers see: the cluster, without how the simulation schedules it, and how
        to submit there (the bridge's front end: the simulated batch system has none)."""
        info = self.model_dump(exclude={"policy", "rules"}) | {
            "submission": Submission(kind="mock")
        }
        return ClusterInfo.model_validate(info)

    def host_names(self) -> list[str]:
        width = len(str(self.hosts - 1))
        return [f"{self.name}-{i:0{width}d}" for i in range(self.hosts)]


class TraceLoad(Frozen):
    """Replay a Standard Workload Format trace onto one cluster."""

    kind: Literal["swf"] = "swf"
    cluster: Name
    path: Path
    """Relative paths are read from the platform file's folder."""
    procs_per_host: Count = 1
    time_scale: TimeScale = 1.0
    offset: Offset = 0
    """Seconds after the platform's start at which the trace's time 0 falls."""
    max_jobs: Jobs | None = None
    too_large: Literal["drop", "clamp"] = "drop"


class SyntheticLoad(Frozen):
    """A seeded synthetic load on one cluster (exponential arrivals and runtimes)."""

    kind: Literal["synthetic"] = "synthetic"
    cluster: Name
    seed: Annotated[int, Field(ge=0, strict=True), at_most(MAX_COUNT, "2**53")] = 0
    count: Jobs = 100
    mean_interarrival: Seconds = 600.0
    mean_runtime: Seconds = 1800.0
    max_hosts: Hosts | None = None
    """Largest job; default a quarter of the cluster."""


Load = Annotated[TraceLoad | SyntheticLoad, Field(discriminator="kind")]


class OutageSpec(Frozen):
    """A scheduled window during which one cluster's batch system does not answer.

    Times are seconds after the platform's start, not Unix times, because the start is usually
    the wall-clock time at which the daemon starts: a test run as a separate process can still
    say "cluster b goes silent from 60 s to 120 s".
    """

    cluster: Name
    start: Offset
    end: Offset

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.end <= self.start:
            raise ValueError(
                f"an outage must end after it starts (start = {self.start}, end = {self.end})"
            )
        return self


class PlatformSpec(Frozen):
    """``[[cluster]]``, ``[[link]]``, ``[[load]]`` and ``[[outage]]`` tables of a platform file."""

    start: Annotated[int, Field(ge=0, strict=True), TIME_LIMIT] | None = None
    """Platform time at its very first start (Unix seconds); None: the wall-clock time then.
    A platform that resumes its saved state goes on from where it was, never back to this."""
    warmup: Offset = 0
    """Seconds of load the platform has already run when it starts: its schedulers and loads
    (trace offsets included) begin that long before ``start``, so that it opens as a site in
    use, jobs running and queued. Outages still count from ``start``."""
    clusters: tuple[ClusterSpec, ...] = Field(min_length=1, alias="cluster")
    links: tuple[Link, ...] = Field(default=(), alias="link")
    loads: tuple[Load, ...] = Field(default=(), alias="load")
    outages: tuple[OutageSpec, ...] = Field(default=(), alias="outage")
    base_dir: Path = Path()
    """Where relative trace paths are read from (the platform file's folder)."""

    model_config = Frozen.model_config | {"populate_by_name": True}

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        names = [c.name for c in self.clusters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"cluster names must be unique; {', '.join(twice)} repeat")
        for link in self.links:
            unknown = sorted(set(link.clusters) - set(names))
            if unknown:
                raise ValueError(f"a link names unknown cluster(s) {', '.join(unknown)}")
        for load in self.loads:
            if load.cluster not in names:
                raise ValueError(f"a load names unknown cluster {load.cluster}")
        for number, outage in enumerate(self.outages):
            if outage.cluster not in names:
                raise ValueError(f"outage.{number}.cluster: unknown cluster {outage.cluster}")
        return self

    def cluster(self, name: str) -> ClusterSpec:
        for spec in self.clusters:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def trace_path(self, load: TraceLoad) -> Path:
        """Where a trace is read from: relative paths are the platform file's folder's."""
        return load.path if load.path.is_absolute() else self.base_dir / load.path

    def identity(self) -> str:
        """A digest of everything the simulation's history depends on: the description and the
        content of its traces, not where the files are nor their comments. Saved state is
        replayed only onto a platform with the same identity (see :mod:`.journal`)."""
        # Fields added since platforms were first saved are left out at their defaults, so
        # that a platform saved before them keeps its identity.
        data = self.model_dump(
            mode="json",
            exclude={"base_dir": True, "clusters": {"__all__": {"submission", "rules"}}},
        )
        if not self.warmup:
            del data["warmup"]
        for load, dumped in zip(self.loads, data["loads"], strict=True):
            if isinstance(load, TraceLoad):
                path = self.trace_path(load)
                try:
                    dumped["path"] = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError as error:
                    raise AdapterError(f"cannot read trace {path}: {error.strerror}") from error
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def parse_platform(
    text: str, source: str = "<platform>", base_dir: Path | None = None
) -> PlatformSpec:
    """Parse a platform description; errors say where (file, key) and why."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise AdapterError(f"{source}: not valid TOML: {error}") from error
    if base_dir is not None:
        data["base_dir"] = base_dir
    try:
        return PlatformSpec.model_validate(data)
    except ValidationError as error:
        raise AdapterError(f"{source}: {describe(error)}") from error


def load_platform(path: str | Path | None = None) -> PlatformSpec:
    """Read a platform file, or the packaged default when ``path`` is None."""
    if path is None:
        text = files("coorm_bridge.batchsim").joinpath(DEFAULT_PLATFORM).read_text()
        return parse_platform(text, source=f"(default) {DEFAULT_PLATFORM}")
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise AdapterError(f"{path}: cannot read the platform file: {error.strerror}") from error
    return parse_platform(text, source=str(path), base_dir=path.resolve().parent)
