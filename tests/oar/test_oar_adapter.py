"""The OAR adapter against a real OAR 2.5.9 (tests/oar/oar-local.sh), through its commands and
through its REST API: what the bridge reads is what OAR holds, and its placeholders are
created, refused with OAR's suggestion, moved, shrunk, deleted and used by a user's job."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from coorm_bridge.adapters.oar.adapter import OarAdapter
from coorm_bridge.adapters.oar.plugin import make_oar_adapter
from coorm_bridge.adapters.oar.rest_backend import OarRestBackend
from coorm_bridge.adapters.oar.settings import OarSettings
from coorm_bridge.core.batch import AdapterError, JobSpec, JobState, Refused, ReservationSpec
from tests.oar.lab import OarInstance

pytestmark = pytest.mark.oar

BACKENDS = ("cli", "rest")
#: Where each backend holds its placeholders when both run one scenario side by side.
CLUSTER = {"cli": "alpha", "rest": "beta"}


def adapter_for(oar: OarInstance, backend: str) -> OarAdapter:
    table: dict[str, object] = {
        "kind": "oar",
        "backend": backend,
        "cluster": [{"name": c} for c in oar.clusters],
    }
    if backend == "rest":
        table["rest"] = {"url": oar.api_url}
    return make_oar_adapter(OarSettings.model_validate(table))


@pytest.fixture(params=BACKENDS)
def site(
    request: pytest.FixtureRequest, oar: OarInstance
) -> Iterator[tuple[OarInstance, OarAdapter]]:
    oar.reset()
    adapter = adapter_for(oar, request.param)
    yield oar, adapter
    adapter.close()
    oar.reset()


@pytest.fixture
def sites(oar: OarInstance) -> Iterator[tuple[OarInstance, dict[str, OarAdapter]]]:
    """An adapter of each backend, for the scenarios that wait on OAR's scheduler: both run
    at once (see ``side_by_side``), so that their waits overlap."""
    oar.reset()
    adapters = {backend: adapter_for(oar, backend) for backend in BACKENDS}
    yield oar, adapters
    for adapter in adapters.values():
        adapter.close()
    oar.reset()


def side_by_side(
    scenario: Callable[[str, OarAdapter], None], adapters: dict[str, OarAdapter]
) -> None:
    """``scenario(backend, adapter)`` for every backend at once, each in a thread of its own
    and on its own placeholders; a failure says which backend failed."""
    with ThreadPoolExecutor(len(adapters)) as pool:
        running = {backend: pool.submit(scenario, backend, a) for backend, a in adapters.items()}
    failed: list[BaseException] = []
    for backend, future in running.items():
        error = future.exception()
        if error is not None:
            error.add_note(f"(backend {backend!r}, on cluster {CLUSTER[backend]})")
            failed.append(error)
    if len(failed) == 1:
        raise failed[0]
    if failed:
        raise BaseExceptionGroup("both backends failed", failed)


def wait(predicate, timeout: float = 30.0, step: float = 0.2):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def busy(shot) -> set[tuple[str, int, int]]:  # type: ignore[no-untyped-def]
    """(host, start, end) of everything that occupies a host: jobs and reservations."""
    found = {(h, j.start, j.end) for j in shot.jobs if j.start is not None for h in j.host_names}
    found |= {(h, r.start, r.end) for r in shot.reservations for h in r.host_names}
    return found


def test_the_clusters_are_the_resources_of_their_property_counted_by_host(site) -> None:  # type: ignore[no-untyped-def]
    oar, adapter = site
    infos = {c.name: c for c in adapter.clusters()}
    assert sorted(infos) == sorted(oar.clusters)
    for name, info in infos.items():
        assert info.hosts == len(oar.nodes[name])
        assert info.cores_per_host == oar.cores
        assert info.submission is not None
        assert info.submission.kind == "oar"
    shot = adapter.snapshot()
    for name in oar.clusters:
        assert [n.name for n in shot.clusters[name].nodes] == sorted(oar.nodes[name])
        assert all(n.state == "up" for n in shot.clusters[name].nodes)


def test_the_snapshot_matches_what_was_submitted(site) -> None:  # type: ignore[no-untyped-def]
    oar, adapter = site
    user = oar.users[0]
    running = oar.submit(
        "-t", "noop", "-p", "cluster='alpha'", "-l", "/host=3,walltime=0:20:00", user=user
    )
    one_core = oar.submit(
        "-t", "noop", "-p", "cluster='alpha'", "-l", "/core=1,walltime=0:10:00", user=user
    )
    filling = oar.submit(
        "-t", "noop", "-p", "cluster='beta'", "-l", "/host=8,walltime=0:30:00", user=user
    )
    waiting = oar.submit(
        "-t", "noop", "-p", "cluster='beta'", "-l", "/host=5,walltime=0:15:00", user=user
    )
    for job in (running, one_core, filling):
        oar.wait_job(job, {"Running"})
    predicted = oar.wait_prediction(waiting)
    shot = adapter.snapshot()
    alpha, beta = shot.clusters["alpha"], shot.clusters["beta"]
    jobs = {j.id: j for j in (*alpha.jobs, *beta.jobs)}
    assert jobs[str(running)].state is JobState.RUNNING
    assert jobs[str(running)].hosts == 3
    assert jobs[str(running)].walltime == 1200
    assert jobs[str(running)].start == oar.job(running)["startTime"]
    assert jobs[str(one_core)].hosts == 1  # one core of a host: the host is not free
    assert jobs[str(filling)].host_names == tuple(sorted(oar.nodes["beta"]))
    assert jobs[str(waiting)].state is JobState.PENDING
    assert jobs[str(waiting)].start == predicted
    assert jobs[str(waiting)].hosts == 5
    assert not set(jobs[str(running)].host_names) & set(oar.nodes["beta"])
    # Both back-ends see the same occupation.
    other = adapter_for(
        oar, "rest" if adapter.backend.__class__.__name__ == "OarCliBackend" else "cli"
    )
    try:
        again = other.snapshot()
        for name in oar.clusters:
            assert busy(again.clusters[name]) == busy(shot.clusters[name])
        rest = other if isinstance(other.backend, OarRestBackend) else adapter
        assert rest.backend.sql  # the Gantt read with the API's read-only queries
    finally:
        other.close()


def test_a_host_down_in_oar_is_down_for_the_bridge(site) -> None:  # type: ignore[no-untyped-def]
    oar, adapter = site
    host = oar.nodes["alpha"][0]
    oar.set_state(host, "Absent")
    try:
        nodes = {n.name: n.state for n in adapter.snapshot().clusters["alpha"].nodes}
        assert nodes[host] == "down"
        assert sum(state == "up" for state in nodes.values()) == len(oar.nodes["alpha"]) - 1
    finally:
        oar.set_state(host, "Alive")


def test_placeholders_are_held_refused_with_oars_suggestion_moved_shrunk_and_deleted(sites) -> None:  # type: ignore[no-untyped-def]
    oar, adapters = sites

    def scenario(backend: str, adapter: OarAdapter) -> None:
        cluster = CLUSTER[backend]
        user = oar.users[0]
        now = adapter.now()
        spec = ReservationSpec(
            name=f"coorm-t1{backend}-{cluster}",
            start=now + 600,
            end=now + 1800,
            hosts=6,
            users=(user,),
        )
        made = adapter.create_reservation(cluster, spec)
        assert (made.start, made.end, len(made.host_names)) == (spec.start, spec.end, 6)
        job = oar.active_jobs()
        (container,) = [j for j in job.values() if j["name"] == spec.name]
        assert container["owner"] == user
        assert "container" in container["types"]

        # Refused: OAR says when it could be held, and the adapter passes it on.
        clash = ReservationSpec(
            name=f"coorm-t2{backend}-{cluster}",
            start=now + 900,
            end=now + 1500,
            hosts=4,
            users=(user,),
        )
        with pytest.raises(Refused) as refused:
            adapter.create_reservation(cluster, clash)
        assert refused.value.retry_after is not None
        assert spec.end <= refused.value.retry_after <= spec.end + 120
        assert adapter.reservation(cluster, clash.name) is None

        # Moved to where OAR can hold both for a moment: a new one first, then the old one goes.
        later = spec.model_copy(update={"start": now + 3600, "end": now + 4800})
        moved = adapter.update_reservation(cluster, later)
        assert (moved.start, moved.end) == (later.start, later.end)
        # Moved onto its own hosts: the old one must go first (the benchmark measures the gap).
        overlapping = spec.model_copy(update={"start": now + 3900, "end": now + 5100})
        moved = adapter.update_reservation(cluster, overlapping)
        assert (moved.start, moved.end, len(moved.host_names)) == (
            overlapping.start,
            overlapping.end,
            6,
        )
        names = [j["name"] for j in oar.active_jobs().values()]
        assert names.count(spec.name) == 1

        adapter.delete_reservation(cluster, spec.name)
        wait(lambda: adapter.reservation(cluster, spec.name) is None)
        adapter.delete_reservation(cluster, spec.name)  # already gone: no error

    side_by_side(scenario, adapters)


def test_a_begun_placeholder_keeps_its_hosts_when_shrunk_to_a_ghost(sites) -> None:  # type: ignore[no-untyped-def]
    oar, adapters = sites

    def scenario(backend: str, adapter: OarAdapter) -> None:
        cluster = CLUSTER[backend]
        user = oar.users[0]
        lead = adapter.reservation_lead()
        now = adapter.now()
        spec = ReservationSpec(
            name=f"coorm-t3{backend}-{cluster}",
            start=now + lead,
            end=now + lead + 900,
            hosts=2,
            users=(user,),
        )
        made = adapter.create_reservation(cluster, spec)
        assert made.start == spec.start
        wait(lambda: adapter.now() > spec.start + 1, timeout=lead + 10)
        ghost = spec.model_copy(update={"end": adapter.now() + 60})
        kept = adapter.update_reservation(cluster, ghost)
        assert kept.host_names == made.host_names
        assert kept.start == made.start
        assert kept.end >= ghost.end
        with pytest.raises(Refused):  # a begun reservation cannot move
            adapter.update_reservation(cluster, spec.model_copy(update={"start": spec.start + 600}))
        with pytest.raises(AdapterError):  # nor be given to someone else in place
            adapter.update_reservation(cluster, ghost.model_copy(update={"users": (oar.users[1],)}))

    side_by_side(scenario, adapters)


def test_a_users_job_submitted_into_a_placeholder_runs_there(sites) -> None:  # type: ignore[no-untyped-def]
    """Submitted once the container runs (as coorm-launch does), the job starts at once: its
    oarsub asks for a scheduler pass. The container's own start waits for one: the bridge's
    poll asks for it through the commands (oarnotify); through the REST API it comes with
    Almighty's own pass, at most 60 s later, which this test asks for as root (oarnotify) once
    the start has come rather than wait up to a minute for it."""
    oar, adapters = sites

    def scenario(backend: str, adapter: OarAdapter) -> None:
        cluster = CLUSTER[backend]
        user = oar.users[1]  # not the placeholder's owner: OAR lets anyone into a container
        owner = oar.users[0]
        lead = adapter.reservation_lead()
        now = adapter.now()
        spec = ReservationSpec(
            name=f"coorm-t4{backend}-{cluster}",
            start=now + lead,
            end=now + lead + 600,
            hosts=3,
            users=(owner,),
        )
        made = adapter.create_reservation(cluster, spec)

        def begun() -> bool:
            adapter.snapshot()  # the bridge's poll, which asks OAR for the passes it is late with
            if adapter.now() > spec.start + 2:
                oar.run("oarnotify", "Scheduling")  # what the REST API cannot ask
            return any(
                j["name"] == spec.name and j["state"] == "Running"
                for j in oar.active_jobs().values()
            )

        wait(begun, timeout=lead + 75, step=0.5)
        late = adapter.now() - spec.start
        workdir = oar.workdir(user)
        began = time.monotonic()
        job_id = adapter.submit(
            cluster,
            JobSpec(
                name=f"inside-{backend}",
                user=user,
                argv=("sh", "-c", f'sort -u "$OAR_NODEFILE" > inside-{backend}.hosts'),
                hosts=3,
                walltime=120,
                reservation=spec.name,
                workdir=str(workdir),
            ),
        )
        wait(lambda: adapter.job_state(cluster, job_id).finished, timeout=30)
        print(
            f"container began {late} s after its start; "
            f"its job done {time.monotonic() - began:.1f} s after submission"
        )
        assert adapter.job_state(cluster, job_id) is JobState.COMPLETED
        record = oar.job(int(job_id))
        assert record["owner"] == user
        assert record["types"] == [f"inner={oar_id(oar, spec.name)}"]
        assert (workdir / f"inside-{backend}.hosts").read_text().split() == sorted(made.host_names)

    side_by_side(scenario, adapters)


def oar_id(oar: OarInstance, name: str) -> str:
    (found,) = [k for k, j in oar.active_jobs().items() if j["name"] == name]
    return found
