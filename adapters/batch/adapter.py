"""BatchAdapter: the adapter interface over any batch system, whatever its back-end.

The generic part (psij-python's executor base): validation of everything that reaches the batch
system, verification of what it actually made (Slurm 22.05 silently creates a reservation smaller
than asked when the partition is short: it is deleted and refused), start estimates for the
pending jobs its scheduler left without one, and the mapping of its failures to Unavailable (no
answer: views go stale), Refused (a conflict the placement loop works around), Misconfigured (a
setting naming what the batch system does not have, located in the file) and AdapterError
(configuration). A batch system supplies a :class:`.backend.Backend` and one binding per cluster.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import ClassVar, Generic

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.batch.backend import B, Backend, BatchFailure
from coorm_bridge.adapters.batch.estimate import estimate_starts
from coorm_bridge.adapters.batch.hosts import choose_hosts, earliest_named_start
from coorm_bridge.adapters.batch.settings import BatchSettings
from coorm_bridge.core.batch import (
    AdapterError,
    ClusterSnapshot,
    JobSpec,
    JobState,
    LacksRights,
    Misconfigured,
    NotPermitted,
    PlatformSnapshot,
    Refused,
    Reservation,
    ReservationHandle,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.model import ClusterInfo, Interconnect
from coorm_bridge.core.rules import ClusterRules

log = logging.getLogger(__name__)

#: Failures that are conflicts with what the batch system holds, or a limit of the session's user:
#: the placement loop retries.
REFUSALS = frozenset({"busy", "overlap", "in_use", "invalid_time", "user_refused"})


class BatchAdapter(Adapter, Generic[B]):
    """The clusters of ``settings``, each reached through ``backend`` with its binding."""

    #: The batch system's name in messages.
    system: ClassVar[str] = "the batch system"

    def __init__(self, settings: BatchSettings, backend: Backend[B], bindings: Iterable[B]) -> None:
        self.settings = settings
        self.backend = backend
        self.bindings = {binding.name: binding for binding in bindings}
        unbound = sorted({c.name for c in settings.clusters} ^ set(self.bindings))
        if unbound:
            raise AdapterError(f"clusters and bindings differ: {', '.join(unbound)}")
        self._infos: list[ClusterInfo] | None = None
        self._lock = threading.Lock()

    # -- catalogue ----------------------------------------------------------------------------

    def clusters(self) -> list[ClusterInfo]:
        """From the batch system's node list (asked once): hosts, the smallest host's cores and
        RAM; speed and scratch from the settings (batch systems do not know them); how to
        submit there from the binding."""
        with self._lock:
            if self._infos is None:
                infos = []
                for cluster in self.settings.clusters:
                    binding = self.bindings[cluster.name]
                    with self._failures(cluster.name, reading=True):
                        hardware = self.backend.hardware(binding)
                    infos.append(
                        ClusterInfo(
                            name=cluster.name,
                            hosts=hardware.hosts,
                            cores_per_host=max(1, hardware.cores_per_host),
                            ram_per_host_mib=hardware.ram_per_host_mib,
                            scratch_per_host_mib=cluster.scratch_per_host_mib,
                            speed=cluster.speed,
                            submission=binding.submission(),
                        )
                    )
                self._infos = infos
            return list(self._infos)

    def configured(self) -> list[str]:
        """The clusters of the settings, in their order."""
        return [cluster.name for cluster in self.settings.clusters]

    def interconnect(self) -> Interconnect:
        return Interconnect(links=self.settings.links)

    # -- reading ------------------------------------------------------------------------------

    def polled_together(self, clusters: Sequence[str]) -> list[tuple[str, ...]]:
        """Clusters whose reads share one answer of the batch system (see
        :meth:`.Backend.source`), in the order given."""
        groups: dict[Hashable, list[str]] = {}
        for name in clusters:
            groups.setdefault(self.backend.source(self._binding(name)), []).append(name)
        return [tuple(group) for group in groups.values()]

    def snapshot(self, clusters: list[str] | None = None) -> PlatformSnapshot:
        """Every cluster read at once (:meth:`.Backend.read_all`: clusters that share a batch
        system's answer ask for it once); the first that could not be read, in the order asked,
        raises as a read alone would (Unavailable for that cluster)."""
        names = list(self.bindings) if clusters is None else clusters
        bindings = [self._binding(name) for name in names]
        now = self.now()
        results = self.backend.read_all(bindings, now)
        shots = {}
        for name in names:
            with self._failures(name, reading=True):
                result = results[name]
                if not isinstance(result, tuple):
                    raise result
            nodes, jobs, reservations = result
            shot = ClusterSnapshot(
                cluster=name,
                time=now,
                nodes=tuple(nodes),
                jobs=tuple(jobs),
                reservations=tuple(reservations),
            )
            shots[name] = estimate_starts(shot)
        return PlatformSnapshot(time=now, clusters=shots)

    # -- reservations -------------------------------------------------------------------------

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        binding = self._binding(cluster)
        with self._failures(cluster):
            made = self._asked(binding, spec, self.backend.create_reservation)
        return self._verified(binding, made, created=True)

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        """Change a reservation in place; one that has begun can change its end, size and users
        but not its start (Slurm refuses to be told even the same start again)."""
        binding = self._binding(cluster)
        with self._failures(cluster, reading=True):
            current = self.backend.reservation(binding, spec.name)
        begun = current is not None and current.start <= self.now()
        if begun and current is not None and spec.start != current.start:
            raise Refused(
                f"{cluster}: reservation {spec.name} has begun: its start cannot move",
                cluster=cluster,
            )

        def update(binding: B, spec: ReservationSpec) -> None:
            self.backend.update_reservation(binding, spec, begun=begun)

        with self._failures(cluster):
            made = self._asked(binding, spec, update)
        return self._verified(binding, made, created=False)

    def reservation(self, cluster: str, name: str) -> Reservation | None:
        binding = self._binding(cluster)
        with self._failures(cluster, reading=True):
            return self.backend.reservation(binding, name)

    def delete_reservation(self, cluster: str, name: str) -> None:
        binding = self._binding(cluster)
        try:
            with self._failures(cluster):
                self.backend.delete_reservation(binding, name)
        except _Gone:
            return  # already gone: deleting is idempotent

    def _asked(
        self, binding: B, spec: ReservationSpec, send: Callable[[B, ReservationSpec], None]
    ) -> ReservationSpec:
        """Send ``spec``; when a host count is refused as busy, name free hosts instead (see
        :mod:`.hosts`: Slurm refuses a count at a running job's end, not the same hosts named).
        Returns what was asked in the end."""
        try:
            send(binding, spec)
            return spec
        except BatchFailure as failure:
            if failure.kind != "busy" or spec.host_names:
                raise
            nodes, jobs, reservations = self.backend.read(binding, self.now())
            hosts = choose_hosts(spec, nodes, jobs, reservations)
            if hosts is None:  # really busy: say when the same hosts' worth would be free
                hint = earliest_named_start(spec, nodes, jobs, reservations)
                raise Refused(
                    f"{binding.name}: {failure}", cluster=binding.name, retry_after=hint
                ) from failure
        named = spec.model_copy(update={"host_names": hosts, "hosts": len(hosts)})
        log.info(
            "%s: %s refused %d hosts for %s as busy; asking for %s by name",
            binding.name,
            self.system,
            spec.size,
            spec.name,
            ",".join(hosts),
        )
        send(binding, named)
        return named

    def _verified(self, binding: B, spec: ReservationSpec, *, created: bool) -> ReservationHandle:
        """Read back what was made; a smaller or shifted reservation is not what was asked (a
        new one is deleted: all or nothing)."""
        cluster = binding.name
        with self._failures(cluster, reading=True):
            made = self.backend.reservation(binding, spec.name)
        if made is None:
            raise AdapterError(f"{cluster}: reservation {spec.name} vanished", cluster=cluster)
        problem = spec.unmet_by(made)
        if problem is not None:
            if created:
                self.delete_reservation(cluster, spec.name)
            raise Refused(
                f"{cluster}: {self.system} made reservation {spec.name} with {problem}",
                cluster=cluster,
            )
        return ReservationHandle(
            cluster=cluster,
            name=made.name,
            start=made.start,
            end=made.end,
            host_names=made.host_names,
        )

    # -- jobs ---------------------------------------------------------------------------------

    def submit(self, cluster: str, job: JobSpec) -> str:
        binding = self._binding(cluster)
        with self._failures(cluster):
            return self.backend.submit(binding, job)

    def cancel(self, cluster: str, job_id: str) -> None:
        binding = self._binding(cluster)
        with self._failures(cluster):
            self.backend.cancel(binding, job_id)

    def job_state(self, cluster: str, job_id: str) -> JobState:
        binding = self._binding(cluster)
        with self._failures(cluster, reading=True):
            return self.backend.job_state(binding, job_id)

    def rules(self, cluster: str) -> ClusterRules:
        binding = self._binding(cluster)
        with self._failures(cluster, reading=True):
            return self.backend.rules(binding)

    def check_rights(self, cluster: str) -> None:
        binding = self._binding(cluster)
        with self._failures(cluster):
            self.backend.check_rights(binding)

    def close(self) -> None:
        self.backend.close()

    # -- errors -------------------------------------------------------------------------------

    def _binding(self, cluster: str) -> B:
        try:
            return self.bindings[cluster]
        except KeyError:
            known = ", ".join(self.bindings)
            raise AdapterError(f"unknown cluster {cluster!r} (configured: {known})") from None

    def setting_key(self, cluster: str, key: str | None) -> str:
        """Where a setting of ``cluster`` is in the ``[adapter]`` table: a key of its
        ``[[adapter.cluster]]`` table as ``cluster.<index>.<key>`` (None: the table itself),
        any other key as it is (a setting of every cluster). Subclasses map a setting that
        defaults to another one to the key the admin would change."""
        for index, settings in enumerate(self.settings.clusters):
            if settings.name == cluster:
                if key is None:
                    return f"cluster.{index}"
                return f"cluster.{index}.{key}" if key in type(settings).model_fields else key
        return key or "cluster"

    @contextmanager
    def _failures(self, cluster: str, *, reading: bool = False) -> Iterator[None]:
        """The back-end's failures as the adapter interface's errors, naming the cluster. A
        read that fails means the batch system cannot be used now, whatever it said: the bridge
        keeps its last snapshot; unless it shows a setting to be wrong (Misconfigured)."""
        try:
            yield
        except BatchFailure as failure:
            message = f"{cluster}: {failure}"
            if failure.kind == "misconfigured":
                key = self.setting_key(cluster, failure.key)
                raise Misconfigured(str(failure), key=key, cluster=cluster) from failure
            if failure.kind == "no_such_reservation" and not reading:
                raise _Gone(message) from failure
            if failure.kind == "unreachable" or reading:
                raise Unavailable(message, cluster=cluster) from failure
            if failure.kind == "no_rights":
                raise LacksRights(message, cluster=cluster, reason=str(failure)) from failure
            if failure.kind in REFUSALS:
                raise Refused(
                    message, cluster=cluster, retry_after=failure.retry_after
                ) from failure
            if failure.kind == "invalid_user":
                raise NotPermitted(message, cluster=cluster) from failure
            raise AdapterError(message, cluster=cluster) from failure
        except ValueError as invalid:  # a name the request builders refuse
            raise AdapterError(f"{cluster}: {invalid}", cluster=cluster) from invalid
        except AdapterError as error:  # the runner's (no answer, no command): say where
            if error.cluster is not None:
                raise
            kind = Unavailable if isinstance(error, Unavailable) else AdapterError
            raise kind(f"{cluster}: {error}", cluster=cluster) from error


class _Gone(AdapterError):
    """The reservation to delete does not exist (any more)."""
