"""MixedAdapter: several batch systems behind one adapter, each cluster served by its own.

The bridge sees one platform; each call about a cluster goes to the system that has it, and
the calls about all of them are made of the systems' answers:

- **Clusters** in the order of the systems in the file, then each system's order; a name two
  systems share is refused (:class:`.AdapterError` naming both): the bridge, its store and the
  launchers know a cluster by its name only. **Links**: the systems' own and the site's
  ``[[adapter.link]]`` tables (between clusters of different systems), each pair once.
- **Snapshots** ask each system for its own clusters only, the systems at once (a snapshot of
  two takes as long as the slower one). The contract of :meth:`.Adapter.snapshot` holds: a
  cluster that cannot be read raises (``Unavailable`` for it). Every system is read to the
  end, then the failure raised is that of the *first cluster in the order asked* that could not
  be read (a failure of a whole system counts at its first cluster asked): the same error
  whichever system answered first, as :class:`.BatchAdapter` does within one system.
- **Polling groups** are each system's own (:meth:`.Adapter.polled_together`), never two
  systems in one: a batch system that does not answer holds up no other.
- **Front end**: the system that has one (only the simulated platform does) runs the jobs of
  its clusters; its front end refuses the others' (their batch systems take jobs themselves).
  Two systems with a front end are refused: each keeps the processes it started in its own
  folder, and the bridge's job calls do not say which one to ask after a restart.
- **Time**: with several systems, the host's clock. Each must run on it (``speedup() == 1.0``,
  ``now()`` within :data:`CLOCK_TOLERANCE`): a simulated platform on a virtual or faster clock
  would be told starts in a time that is not its own, so such a site is refused. A site of one
  system keeps that system's clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.frontend import FrontEnd
from coorm_bridge.adapters.mixed.frontend import ConfinedFrontEnd
from coorm_bridge.core.batch import (
    AdapterError,
    ClusterSnapshot,
    JobSpec,
    JobState,
    Misconfigured,
    PlatformSnapshot,
    Reservation,
    ReservationHandle,
    ReservationSpec,
)
from coorm_bridge.core.model import ClusterInfo, Interconnect, Link
from coorm_bridge.core.rules import ClusterRules

#: Seconds a system's time may be off the host's: a simulated wall clock starts at a whole
#: second, up to one behind, and the two are read one after the other.
CLOCK_TOLERANCE = 2


@dataclass(frozen=True)
class BatchSystem:
    """One ``[[adapter.system]]``: its place in the file, its kind, its adapter."""

    index: int
    kind: str
    adapter: Adapter

    @property
    def label(self) -> str:
        return system_label(self.index, self.kind)


def system_label(index: int, kind: str) -> str:
    """A system as messages name it, after its key (``system.1``): ``system 1 (slurm)``."""
    return f"system {index} ({kind})"


class MixedAdapter(Adapter):
    """``systems`` as one platform, with the site's ``links`` between them; see the module
    docstring. Raises AdapterError when their clocks disagree or two have a front end (the
    systems stay the caller's to close then); owns them otherwise (:meth:`close`)."""

    def __init__(self, systems: Sequence[BatchSystem], links: Iterable[Link] = ()) -> None:
        if not systems:
            raise AdapterError("a mixed site needs at least one batch system")
        self.systems = tuple(systems)
        self.links = tuple(links)
        _check_clocks(self.systems)
        self._front_end = self._the_front_end()
        self._owners: dict[str, BatchSystem] = {}
        self._lock = threading.Lock()

    # -- catalogue ----------------------------------------------------------------------------

    def clusters(self) -> list[ClusterInfo]:
        """Every system's, in the file's order; learns which system has which cluster."""
        infos: list[ClusterInfo] = []
        owners: dict[str, BatchSystem] = {}
        for system in self.systems:
            try:
                found = system.adapter.clusters()
            except Misconfigured as error:  # a key of the system's table, in the site's
                raise error.under(f"system.{system.index}") from error
            for info in found:
                other = owners.setdefault(info.name, system)
                if other is not system:
                    raise AdapterError(
                        f"cluster {info.name!r} is in {other.label} and in {system.label}: "
                        "cluster names must be distinct across the site's batch systems; "
                        "rename one",
                        cluster=info.name,
                    )
                infos.append(info)
        _check_links(self.links, owners)
        with self._lock:
            self._owners = owners
        return infos

    def interconnect(self) -> Interconnect:
        """The systems' links and the site's; a pair linked twice is refused. (The site's
        name clusters of its systems: checked with them, :meth:`clusters`.)"""
        self._index()
        links: dict[frozenset[str], tuple[Link, str]] = {}
        placed = [(link, s.label) for s in self.systems for link in s.adapter.interconnect().links]
        for link, where in [*placed, *((link, "[[adapter.link]]") for link in self.links)]:
            first = links.setdefault(frozenset(link.clusters), (link, where))
            if first[1] != where or first[0] != link:
                a, b = link.clusters
                raise AdapterError(
                    f"clusters {a!r} and {b!r} are linked by {first[1]} and by {where}: "
                    "give each pair one link"
                )
        return Interconnect(links=tuple(link for link, _ in links.values()))

    # -- reading ------------------------------------------------------------------------------

    def snapshot(self, clusters: list[str] | None = None) -> PlatformSnapshot:
        """Each system asked for its clusters only; see the module docstring for failures."""
        names = list(self._index()) if clusters is None else list(dict.fromkeys(clusters))
        asked = self._by_system(names)
        if not asked:
            return PlatformSnapshot(time=self.now(), clusters={})
        if len(asked) == 1:
            ((system, mine),) = asked.items()
            answers = {system: _read(system, mine)}
        else:
            with ThreadPoolExecutor(len(asked), thread_name_prefix="coorm-mixed") as pool:
                futures = {s: pool.submit(_read, s, mine) for s, mine in asked.items()}
                answers = {system: future.result() for system, future in futures.items()}
        failures = [
            (names.index(failure.cluster if failure.cluster in mine else mine[0]), failure)
            for system, mine in asked.items()
            if isinstance(failure := answers[system], AdapterError)
        ]
        if failures:
            raise min(failures, key=lambda found: found[0])[1]
        shots: dict[str, ClusterSnapshot] = {}
        times = []
        for system, mine in asked.items():
            answer = answers[system]
            assert isinstance(answer, PlatformSnapshot)
            times.append(answer.time)
            for name in mine:
                shot = answer.clusters.get(name)
                if shot is None:
                    raise AdapterError(
                        f"{name}: {system.label} gave no snapshot of it", cluster=name
                    )
                shots[name] = shot
        return PlatformSnapshot(time=min(times), clusters={name: shots[name] for name in names})

    def polled_together(self, clusters: Sequence[str]) -> list[tuple[str, ...]]:
        """Each system's own groups of its clusters (in the order of their systems' first
        cluster given): never two systems in one group."""
        groups: list[tuple[str, ...]] = []
        for system, mine in self._by_system(list(dict.fromkeys(clusters))).items():
            for group in system.adapter.polled_together(mine):
                strangers = sorted(set(group) - set(mine))
                if strangers:
                    raise AdapterError(
                        f"{system.label} groups {', '.join(strangers)} with its own clusters "
                        f"{', '.join(mine)}: it was not asked about them"
                    )
                groups.append(tuple(group))
        return groups

    def reservation(self, cluster: str, name: str) -> Reservation | None:
        return self._owner(cluster).adapter.reservation(cluster, name)

    # -- writing ------------------------------------------------------------------------------

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        return self._owner(cluster).adapter.create_reservation(cluster, spec)

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        return self._owner(cluster).adapter.update_reservation(cluster, spec)

    def delete_reservation(self, cluster: str, name: str) -> None:
        self._owner(cluster).adapter.delete_reservation(cluster, name)

    def submit(self, cluster: str, job: JobSpec) -> str:
        return self._owner(cluster).adapter.submit(cluster, job)

    def cancel(self, cluster: str, job_id: str) -> None:
        self._owner(cluster).adapter.cancel(cluster, job_id)

    def job_state(self, cluster: str, job_id: str) -> JobState:
        return self._owner(cluster).adapter.job_state(cluster, job_id)

    def check_rights(self, cluster: str) -> None:
        self._owner(cluster).adapter.check_rights(cluster)

    def rules(self, cluster: str) -> ClusterRules:
        return self._owner(cluster).adapter.rules(cluster)

    # -- the site as a whole ------------------------------------------------------------------

    def front_end(self) -> FrontEnd | None:
        return self._front_end

    def now(self) -> int:
        """The host's clock, which every system keeps (checked when built); a site of one
        system, that system's."""
        if len(self.systems) == 1:
            return self.systems[0].adapter.now()
        return int(time.time())

    def instant(self) -> float:
        if len(self.systems) == 1:
            return self.systems[0].adapter.instant()
        return time.time()

    def reservation_gap(self, cluster: str) -> int:
        return self._owner(cluster).adapter.reservation_gap(cluster)

    def reservation_lead(self) -> int:
        """The largest of the systems': a request's placeholders all start at one time."""
        return max((system.adapter.reservation_lead() for system in self.systems), default=0)

    def speedup(self) -> float | None:
        if len(self.systems) == 1:
            return self.systems[0].adapter.speedup()
        return 1.0

    def close(self) -> None:
        """Close every system, in the file's order, even when one raises (the first error is
        raised once all are closed)."""
        close_all(system.adapter for system in self.systems)

    # -- routing ------------------------------------------------------------------------------

    def _index(self) -> dict[str, BatchSystem]:
        """Cluster name → system, read from the systems the first time it is needed."""
        with self._lock:
            owners = self._owners
        if not owners:
            self.clusters()
            with self._lock:
                owners = self._owners
        return owners

    def _owner(self, cluster: str) -> BatchSystem:
        owners = self._index()
        system = owners.get(cluster)
        if system is None:
            known = ", ".join(owners)
            raise AdapterError(f"unknown cluster {cluster!r} (configured: {known})")
        return system

    def _by_system(self, names: list[str]) -> dict[BatchSystem, list[str]]:
        """``names`` by the system that has each, systems in the order of their first name."""
        asked: dict[BatchSystem, list[str]] = {}
        for name in names:
            asked.setdefault(self._owner(name), []).append(name)
        return asked

    def _the_front_end(self) -> FrontEnd | None:
        fronts = [(system, system.adapter.front_end()) for system in self.systems]
        fronted = [(system, front) for system, front in fronts if front is not None]
        if len(fronted) > 1:
            labels = " and ".join(system.label for system, _ in fronted)
            raise AdapterError(
                f"{labels} both run jobs on this host through the bridge (a front end): a "
                "mixed site may have one; put the simulated clusters in one platform"
            )
        if not fronted:
            return None
        ((system, front),) = fronted
        return ConfinedFrontEnd(front, system.label, lambda name: self._owner(name) is system)


def _read(system: BatchSystem, clusters: list[str]) -> PlatformSnapshot | AdapterError:
    """One system's snapshot of ``clusters``, or why it could not be taken."""
    try:
        return system.adapter.snapshot(clusters)
    except AdapterError as error:
        return error


def _check_clocks(systems: Sequence[BatchSystem]) -> None:
    """With several systems, every one on the host's time (see the module docstring)."""
    if len(systems) < 2:
        return
    for system in systems:
        speedup = system.adapter.speedup()
        if speedup is None:
            why = "runs on a virtual clock, which moves only when told"
        elif speedup != 1:
            why = f"runs its clock {speedup:g} times as fast as the host's"
        else:
            offset = system.adapter.now() - time.time()
            if abs(offset) <= CLOCK_TOLERANCE:
                continue
            why = f"keeps a time {offset:+.0f} s off the host's clock"
        raise AdapterError(
            f"{system.label} {why}: the batch systems of a mixed site share one time, the "
            "host's (keep a simulated platform on another clock on a bridge of its own)"
        )


def _check_links(links: Iterable[Link], owners: dict[str, BatchSystem]) -> None:
    """The site's links join clusters its systems have (a simulated platform's are known only
    once it is read): a name that is none is the file's mistake."""
    for index, link in enumerate(links):
        unknown = [name for name in link.clusters if name not in owners]
        if unknown:
            raise Misconfigured(
                f"no batch system of the site has {' or '.join(map(repr, unknown))} (its "
                f"clusters: {', '.join(owners)})",
                key=f"link.{index}.clusters",
            )


def close_all(adapters: Iterable[Adapter]) -> None:
    """Close each adapter, in order, even when one raises; then raise the first error, the
    others noted on it (one system that cannot close must not keep the next one open)."""
    errors: list[Exception] = []
    for adapter in adapters:
        try:
            adapter.close()
        except Exception as error:  # whatever a plug-in's close raises: the others still close
            errors.append(error)
    if errors:
        first, *others = errors
        for other in others:
            first.add_note(f"closing another batch system failed too: {other!r}")
        raise first
