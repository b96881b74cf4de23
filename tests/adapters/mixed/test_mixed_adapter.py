"""The mixed site's adapter: every call about a cluster to the system that has it, snapshots and
polling groups made of the systems' own, one clock, one front end.

Most tests run over simulated platforms on the wall clock (real adapters); ``Recorded`` systems
say which calls reached them, and fail or stall on demand.
"""

from __future__ import annotations

import getpass
import threading
import time
from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.mixed import plugin as mixed_plugin
from coorm_bridge.adapters.mixed.adapter import CLOCK_TOLERANCE, BatchSystem, MixedAdapter
from coorm_bridge.adapters.mixed.frontend import ConfinedFrontEnd
from coorm_bridge.adapters.mixed.plugin import create
from coorm_bridge.adapters.mixed.settings import MixedSettings
from coorm_bridge.adapters.mock import plugin as mock_plugin
from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.adapters.mock.plugin import MockSettings
from coorm_bridge.adapters.oar.adapter import OarAdapter
from coorm_bridge.adapters.oar.cli_backend import OarCliBackend
from coorm_bridge.adapters.oar.settings import OarSettings
from coorm_bridge.adapters.registry import AdapterContext
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.settings import SlurmSettings
from coorm_bridge.batchsim import FILE_NAME, VirtualClock, WallClock, parse_platform
from coorm_bridge.core.batch import (
    AdapterError,
    ClusterSnapshot,
    JobSpec,
    JobState,
    LacksRights,
    Misconfigured,
    Node,
    PlatformSnapshot,
    Reservation,
    ReservationHandle,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.model import ClusterInfo, Interconnect, Link
from coorm_bridge.service.polling import Poller
from tests.oar.test_oar_settings_checked import Nodes, recorded
from tests.slurm.test_slurm_settings_checked import Slurm

USER = getpass.getuser()


def platform(*clusters: tuple[str, int], **options: object) -> MockAdapter:
    text = "".join(f'[[cluster]]\nname = "{n}"\nhosts = {h}\n' for n, h in clusters)
    return MockAdapter(parse_platform(text), WallClock(**options))  # type: ignore[arg-type]


def link(a: str, b: str, latency: float = 0.001) -> Link:
    return Link(clusters=(a, b), latency_s=latency, bandwidth_bps=1e9)


def site(*adapters: Adapter, links: Sequence[Link] = ()) -> MixedAdapter:
    systems = [BatchSystem(i, "mock", a) for i, a in enumerate(adapters)]
    return MixedAdapter(systems, links)


class Recorded(Adapter):
    """A batch system of ``clusters`` that records what it is asked; clusters in ``down`` do
    not answer (the first one asked raises, as BatchAdapter does); with ``broken`` no cluster
    does, and the error names none (a whole system that fails)."""

    def __init__(self, *clusters: str, down: Sequence[str] = (), broken: bool = False) -> None:
        self.names = list(clusters)
        self.down = set(down)
        self.broken = broken
        self.calls: list[tuple[str, ...]] = []
        self.links: tuple[Link, ...] = ()
        self.gate: threading.Event | None = None
        self.closed = False
        self.close_error: Exception | None = None

    def clusters(self) -> list[ClusterInfo]:
        return [ClusterInfo(name=n, hosts=4) for n in self.names]

    def interconnect(self) -> Interconnect:
        return Interconnect(links=self.links)

    def snapshot(self, clusters: list[str] | None = None) -> PlatformSnapshot:
        asked = self.names if clusters is None else clusters
        self.calls.append(("snapshot", *asked))
        if self.gate is not None:
            self.gate.wait(30)
        if self.broken:
            raise AdapterError("the whole system is broken")
        for name in asked:
            if name in self.down:
                raise Unavailable(f"{name}: does not answer", cluster=name)
        now = self.now()
        return PlatformSnapshot(
            time=now,
            clusters={
                n: ClusterSnapshot(cluster=n, time=now, nodes=(Node(name=f"{n}-0"),)) for n in asked
            },
        )

    def polled_together(self, clusters: Sequence[str]) -> list[tuple[str, ...]]:
        return [tuple(clusters)]  # all of this system's at once

    def _record(self, *call: str) -> None:
        self.calls.append(call)

    def reservation(self, cluster: str, name: str) -> Reservation | None:
        self._record("reservation", cluster, name)
        return None

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self._record("create", cluster, spec.name)
        return ReservationHandle(
            cluster=cluster, name=spec.name, start=spec.start, end=spec.end, host_names=("h",)
        )

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self._record("update", cluster, spec.name)
        return self.create_reservation(cluster, spec)

    def delete_reservation(self, cluster: str, name: str) -> None:
        self._record("delete", cluster, name)

    def submit(self, cluster: str, job: JobSpec) -> str:
        self._record("submit", cluster, job.name)
        return f"{cluster}.1"

    def cancel(self, cluster: str, job_id: str) -> None:
        self._record("cancel", cluster, job_id)

    def job_state(self, cluster: str, job_id: str) -> JobState:
        self._record("job_state", cluster, job_id)
        return JobState.RUNNING

    def check_rights(self, cluster: str) -> None:
        self._record("check_rights", cluster)
        raise LacksRights(f"{cluster}: not an operator", cluster=cluster)

    def close(self) -> None:
        self.closed = True
        if self.close_error is not None:
            raise self.close_error


# -- catalogue --------------------------------------------------------------------------------


def test_clusters_come_in_the_files_order_and_links_are_united():
    first, second = Recorded("a1", "a2"), Recorded("b1")
    first.links = (link("a1", "a2"),)
    mixed = site(first, second, links=[link("a2", "b1", 0.01)])
    assert [c.name for c in mixed.clusters()] == ["a1", "a2", "b1"]
    assert mixed.interconnect().links == (link("a1", "a2"), link("a2", "b1", 0.01))
    assert mixed.interconnect().link("b1", "a2") == link("a2", "b1", 0.01)


def test_a_cluster_name_two_systems_share_is_refused_naming_both():
    mixed = site(Recorded("a1", "alpha"), Recorded("b1"), Recorded("alpha"))
    with pytest.raises(AdapterError) as caught:
        mixed.clusters()
    assert str(caught.value) == (
        "cluster 'alpha' is in system 0 (mock) and in system 2 (mock): cluster names must be "
        "distinct across the site's batch systems; rename one"
    )
    with pytest.raises(AdapterError, match="cluster 'alpha' is in system 0"):
        mixed.submit("b1", job("x"))  # nothing is routed on a site that cannot be told apart


def test_site_links_must_name_its_clusters_and_join_each_pair_once():
    # A link naming no cluster is the file's mistake, at its key: the daemon does not start.
    with pytest.raises(Misconfigured) as wrong:
        site(Recorded("a1"), Recorded("b1"), links=[link("a1", "c9")]).clusters()
    assert (wrong.value.key, wrong.value.reason) == (
        "link.0.clusters",
        "no batch system of the site has 'c9' (its clusters: a1, b1)",
    )
    first = Recorded("a1")
    first.links = (link("a1", "b1"),)
    twice = site(first, Recorded("b1"), links=[link("b1", "a1", 0.5)])
    with pytest.raises(AdapterError) as caught:
        twice.interconnect()
    assert str(caught.value) == (
        "clusters 'b1' and 'a1' are linked by system 0 (mock) and by [[adapter.link]]: give "
        "each pair one link"
    )


def test_a_setting_a_system_shows_wrong_is_named_at_its_place_in_the_site():
    # What the batch systems find wrong at start names its key as the file writes it.
    oar = OarAdapter(
        OarSettings.model_validate({"cluster": [{"name": "beta"}], "host_property": "hots"}),
        OarCliBackend(Nodes(recorded()), identity="root"),
    )
    slurm = SlurmAdapter(
        SlurmSettings(
            clusters=[{"name": "a", "partition": "alpha"}, {"name": "d", "partition": "delta"}]
        ),
        SlurmCliBackend(Slurm()),
    )
    mixed = MixedAdapter([BatchSystem(0, "mock", Recorded("a1")), BatchSystem(1, "oar", oar)])
    with pytest.raises(Misconfigured) as caught:
        mixed.clusters()
    assert caught.value.key == "system.1.host_property"
    assert caught.value.reason.startswith("OAR has no resource property 'hots'; its resource ")
    mixed = MixedAdapter([BatchSystem(0, "slurm", slurm), BatchSystem(1, "mock", Recorded("x"))])
    with pytest.raises(Misconfigured) as caught:
        mixed.clusters()
    assert caught.value.key == "system.0.cluster.1.partition"
    assert caught.value.reason.startswith("Slurm has no partition 'delta' (or it has no node)")
    assert caught.value.cluster == "d"


def test_a_setting_a_plugin_refuses_when_built_is_named_at_its_place_too(tmp_path, monkeypatch):
    def refuse(settings, context):
        raise Misconfigured("no such thing here", key="cluster.0.thing", cluster="a")

    monkeypatch.setattr(mixed_plugin, "create_adapter", refuse)
    settings = MixedSettings(systems=(MockSettings(run_jobs=False),))
    with pytest.raises(Misconfigured) as caught:
        create(settings, AdapterContext(state_dir=tmp_path))
    assert (caught.value.key, caught.value.reason) == (
        "system.0.cluster.0.thing",
        "no such thing here",
    )


# -- routing ----------------------------------------------------------------------------------


def job(name: str) -> JobSpec:
    return JobSpec(name=name, user=USER, argv=("true",), hosts=1, walltime=60)


def spec(name: str) -> ReservationSpec:
    return ReservationSpec(
        name=name, start=2_000_000_000, end=2_000_000_100, hosts=1, users=(USER,)
    )


def test_every_call_about_a_cluster_reaches_the_system_that_has_it_and_only_it():
    first, second = Recorded("a1", "a2"), Recorded("b1")
    mixed = site(first, second)
    for cluster in ("a2", "b1"):
        mixed.create_reservation(cluster, spec(f"r-{cluster}"))
        mixed.update_reservation(cluster, spec(f"r-{cluster}"))
        assert mixed.reservation(cluster, f"r-{cluster}") is None
        mixed.delete_reservation(cluster, f"r-{cluster}")
        assert mixed.submit(cluster, job(f"j-{cluster}")) == f"{cluster}.1"
        mixed.cancel(cluster, f"{cluster}.1")
        assert mixed.job_state(cluster, f"{cluster}.1") is JobState.RUNNING
        with pytest.raises(LacksRights, match=f"{cluster}: not an operator"):
            mixed.check_rights(cluster)
    for system, cluster in ((first, "a2"), (second, "b1")):
        name = f"r-{cluster}"
        assert system.calls == [
            ("create", cluster, name),
            ("update", cluster, name),
            ("create", cluster, name),
            ("reservation", cluster, name),
            ("delete", cluster, name),
            ("submit", cluster, f"j-{cluster}"),
            ("cancel", cluster, f"{cluster}.1"),
            ("job_state", cluster, f"{cluster}.1"),
            ("check_rights", cluster),
        ]
    with pytest.raises(AdapterError, match=r"unknown cluster 'z1' \(configured: a1, a2, b1\)"):
        mixed.cancel("z1", "1")


def test_reservations_are_held_on_the_simulated_platform_that_has_the_cluster():
    left, right = platform(("a1", 4)), platform(("b1", 2))
    mixed = site(left, right)
    start = mixed.now() + 60
    made = mixed.create_reservation(
        "b1", ReservationSpec(name="p-b1", start=start, end=start + 60, hosts=2, users=(USER,))
    )
    assert made.host_names == ("b1-0", "b1-1")
    assert [r.name for r in right.snapshot().clusters["b1"].reservations] == ["p-b1"]
    assert left.snapshot().clusters["a1"].reservations == ()
    assert mixed.reservation("b1", "p-b1") == right.reservation("b1", "p-b1")
    mixed.delete_reservation("b1", "p-b1")
    assert right.snapshot().clusters["b1"].reservations == ()


# -- snapshots ----------------------------------------------------------------------------------


def test_a_snapshot_asks_each_system_for_its_clusters_only_in_the_order_asked():
    first, second = Recorded("a1", "a2"), Recorded("b1", "b2")
    mixed = site(first, second)
    shot = mixed.snapshot(["b2", "a1", "b1"])
    assert list(shot.clusters) == ["b2", "a1", "b1"]
    assert {n: s.cluster for n, s in shot.clusters.items()} == {"b2": "b2", "a1": "a1", "b1": "b1"}
    assert first.calls == [("snapshot", "a1")]
    assert second.calls == [("snapshot", "b2", "b1")]
    assert list(mixed.snapshot().clusters) == ["a1", "a2", "b1", "b2"]
    assert mixed.snapshot([]).clusters == {}


def test_a_snapshot_of_real_platforms_merges_their_clusters():
    mixed = site(platform(("a1", 4), ("a2", 2)), platform(("b1", 3)))
    shot = mixed.snapshot()
    assert {name: len(s.nodes) for name, s in shot.clusters.items()} == {"a1": 4, "a2": 2, "b1": 3}
    assert abs(shot.time - time.time()) <= CLOCK_TOLERANCE


cluster_names = st.lists(
    st.sampled_from([f"c{i}" for i in range(8)]), min_size=1, max_size=8, unique=True
)


@given(data=st.data(), names=cluster_names)
def test_a_failed_snapshot_raises_for_the_first_cluster_asked_that_could_not_be_read(data, names):
    count = data.draw(st.integers(1, len(names)))
    owner = {n: data.draw(st.integers(0, count - 1)) for n in names}
    down = set(data.draw(st.lists(st.sampled_from(names), unique=True)))
    broken = set(data.draw(st.lists(st.integers(0, count - 1), unique=True)))
    systems = [
        Recorded(*[n for n in names if owner[n] == i], down=down, broken=i in broken)
        for i in range(count)
    ]
    mixed = site(*[s for s in systems if s.names])
    asked = data.draw(st.permutations(names))
    first_owned = {}
    for name in asked:
        first_owned.setdefault(owner[name], name)
    failing = [n for n in asked if n in down or owner[n] in broken]
    # a broken system fails at its first cluster asked; a cluster down, where its system reads it
    expected = next(
        (
            n
            for n in failing
            if (owner[n] in broken and first_owned[owner[n]] == n)
            or (owner[n] not in broken and n in down)
        ),
        None,
    )
    if expected is None:
        assert list(mixed.snapshot(list(asked)).clusters) == list(asked)
    else:
        with pytest.raises(AdapterError) as caught:
            mixed.snapshot(list(asked))
        error = caught.value
        if owner[expected] in broken:
            assert str(error) == "the whole system is broken"
            assert error.cluster is None
        else:
            assert isinstance(error, Unavailable)
            assert error.cluster == expected
    for index, system in enumerate(systems):  # every system read, for its clusters only
        mine = [n for n in asked if owner[n] == index]
        assert system.calls == ([("snapshot", *mine)] if mine else [])


def test_a_silent_cluster_is_unavailable_alone_and_stale_alone_in_the_poller():
    silent, fine = platform(("a1", 4), ("a2", 2)), platform(("b1", 3))
    mixed = site(silent, fine)
    silent.outage("a2", silent.now(), silent.now() + 3600)
    with pytest.raises(Unavailable) as caught:
        mixed.snapshot(["b1", "a2", "a1"])
    assert caught.value.cluster == "a2"
    assert list(mixed.snapshot(["b1", "a1"]).clusters) == ["b1", "a1"]
    poller = Poller(mixed, [c.name for c in mixed.clusters()], "coorm-", 1.0)
    for cluster in ("a1", "a2", "b1"):
        poller.poll(cluster)
    assert {c: poller.status(c).stale for c in ("a1", "a2", "b1")} == {
        "a1": False,
        "a2": True,
        "b1": False,
    }
    assert "simulated outage" in (poller.status("a2").error or "")


# -- polling groups ----------------------------------------------------------------------------


@given(data=st.data(), names=cluster_names)
def test_polling_groups_never_span_two_systems_and_cover_every_cluster_once(data, names):
    count = data.draw(st.integers(1, len(names)))
    owner = {n: data.draw(st.integers(0, count - 1)) for n in names}
    systems = [Recorded(*[n for n in names if owner[n] == i]) for i in range(count)]
    mixed = site(*[s for s in systems if s.names])
    asked = data.draw(st.permutations(names))
    groups = mixed.polled_together(list(asked))
    assert sorted(n for g in groups for n in g) == sorted(asked)
    for group in groups:
        assert len({owner[n] for n in group}) == 1
        assert [n for n in asked if owner[n] == owner[group[0]]] == list(group)


def test_a_system_that_hangs_holds_up_no_other_systems_poll():
    stalled, other = Recorded("a1"), Recorded("b1")
    stalled.gate = threading.Event()
    mixed = site(stalled, other)
    poller = Poller(mixed, ["a1", "b1"], "coorm-", 1.0)
    assert poller.groups == [("a1",), ("b1",)]
    hung = threading.Thread(target=poller.poll, args=("a1",))
    hung.start()
    try:
        began = time.monotonic()
        poller.poll("b1")
        assert time.monotonic() - began < 5
        assert not poller.status("b1").stale
        assert poller.status("a1").snapshot is None  # still waiting
    finally:
        stalled.gate.set()
        hung.join(10)
    assert not poller.status("a1").stale


def test_a_system_may_not_group_clusters_it_was_not_asked_about():
    class Greedy(Recorded):
        def polled_together(self, clusters: Sequence[str]) -> list[tuple[str, ...]]:
            return [(*clusters, "b1")]

    with pytest.raises(AdapterError, match=r"system 0 \(mock\) groups b1 with its own"):
        site(Greedy("a1"), Recorded("b1")).polled_together(["a1", "b1"])


# -- time ---------------------------------------------------------------------------------------


def test_systems_on_the_hosts_clock_share_it():
    mixed = site(platform(("a1", 1)), Recorded("b1"))
    assert abs(mixed.now() - time.time()) <= 1
    assert mixed.speedup() == 1.0


@pytest.mark.parametrize(
    ("clock", "why"),
    [
        (VirtualClock(int(time.time())), "runs on a virtual clock, which moves only when told"),
        (WallClock(speedup=2), "runs its clock 2 times as fast as the host's"),
        (WallClock(origin=1_700_000_000), r"keeps a time -\d+ s off the host's clock"),
    ],
)
def test_a_simulated_platform_off_the_hosts_clock_is_refused_beside_another_system(clock, why):
    simulated = MockAdapter(parse_platform('[[cluster]]\nname = "d1"\nhosts = 2\n'), clock)
    with pytest.raises(AdapterError, match=rf"^system 1 \(mock\) {why}: the batch systems of a"):
        site(Recorded("a1"), simulated)


def test_a_site_of_one_system_keeps_that_systems_clock():
    simulated = MockAdapter(
        parse_platform('[[cluster]]\nname = "d1"\nhosts = 2\n'), VirtualClock(5)
    )
    mixed = site(simulated)
    assert mixed.now() == 5
    assert mixed.speedup() is None


# -- front end and closing ----------------------------------------------------------------------


def test_the_plugin_builds_each_system_with_a_state_folder_of_its_own(tmp_path):
    settings = MixedSettings(
        systems=(SlurmSettings(clusters=[{"name": "alpha"}]), MockSettings(run_jobs=False))
    )
    context = AdapterContext(state_dir=tmp_path)
    mixed = create(settings, context)
    slurm, simulated = (system.adapter for system in mixed.systems)
    assert isinstance(slurm, SlurmAdapter)
    assert isinstance(simulated, MockAdapter)
    assert (tmp_path / "systems" / "mock" / FILE_NAME).exists()
    front = mixed.front_end()
    assert isinstance(front, ConfinedFrontEnd)
    assert front.front is simulated.front_end()
    mixed.close()  # the platform's journal too: it opens again
    private = create(MixedSettings(systems=(MockSettings(),)), replace(context, private=True))
    try:  # the daemon's reach is each system's: its own user's jobs may run even as root
        (system,) = private.systems
        assert isinstance(system.adapter, MockAdapter)
        assert system.adapter.front_end().private
    finally:
        private.close()


def test_the_front_end_runs_jobs_on_the_simulated_platforms_clusters_only(tmp_path):
    (tmp_path / "platform.toml").write_text('[[cluster]]\nname = "d1"\nhosts = 2\n')
    settings = MockSettings(platform=tmp_path / "platform.toml", run_jobs=False)
    simulated = mock_plugin.create(settings, AdapterContext(state_dir=tmp_path))
    mixed = MixedAdapter(
        [BatchSystem(0, "slurm", Recorded("a1")), BatchSystem(1, "mock", simulated)]
    )
    try:
        front = mixed.front_end()
        assert isinstance(front, ConfinedFrontEnd)
        assert front.grace == simulated.front_end().grace
        assert front.refusal(USER) == simulated.front_end().refusal(USER)
        assert "runs no jobs" in (front.refusal(USER) or "")
        with pytest.raises(AdapterError, match="a1: its batch system takes jobs itself; the "):
            front.submit("a1", job("x"))
        start = mixed.now() + 1
        held = ReservationSpec(name="p", start=start, end=start + 600, hosts=2, users=(USER,))
        mixed.create_reservation("d1", held)
        into = job("y").model_copy(update={"reservation": "p", "hosts": 2})
        batch_job = front.submit("d1", into)
        assert mixed.job_state("d1", batch_job) is JobState.PENDING
        assert mixed.systems[0].adapter.calls == []  # nothing reached the other system
    finally:
        mixed.close()


def test_two_systems_with_a_front_end_are_refused_and_what_was_built_is_closed(tmp_path):
    context = AdapterContext(state_dir=tmp_path)
    with pytest.raises(AdapterError, match=r"system 0 \(mock\) and system 1 \(mock\) both run"):
        create(MixedSettings(systems=(MockSettings(), MockSettings())), context)
    create(MixedSettings(systems=(MockSettings(),)), context).close()  # its journal was let go
    assert site(Recorded("a1"), Recorded("b1")).front_end() is None


def test_closing_closes_every_system_even_when_one_fails():
    systems = [Recorded("a1"), Recorded("b1"), Recorded("c1"), Recorded("d1")]
    systems[1].close_error = RuntimeError("b is stuck")
    systems[2].close_error = OSError("c's socket")
    with pytest.raises(RuntimeError, match="b is stuck") as caught:
        site(*systems).close()
    assert [s.closed for s in systems] == [True, True, True, True]
    assert caught.value.__notes__ == [
        'closing another batch system failed too: OSError("c\'s socket")'
    ]
