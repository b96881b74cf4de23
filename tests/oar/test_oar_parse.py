"""OAR's answers as hosts, jobs and reservations of one cluster, on recordings of OAR 2.5.9
(tests/data/oar/README.md) and changed copies of them."""

from __future__ import annotations

from typing import Any

import pytest

from coorm_bridge.adapters.batch.backend import Hardware
from coorm_bridge.adapters.oar import parse
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.core.batch import Job, JobState, Node, NodeState, Reservation
from tests.oar.samples import ALPHA, BETA, DETAILS_NOW, GANTT_NOW, gantt, load

CONTAINER_NOW = Reservation(
    name="container_now",
    start=1795502929,
    end=1795502929 + 3596,
    hosts=4,
    host_names=("beta-3", "beta-4", "beta-5", "beta-6"),
    users=("coorm_alice",),
    launched=True,  # OAR launched it: jobs go in at once
)
CONTAINER_LATER = Reservation(
    name="container_later",
    start=1795510123,
    end=1795510123 + 3600,
    hosts=3,
    host_names=("beta-1", "beta-2", "beta-3"),
    users=("coorm_alice",),
    launched=False,
)
BETA_JOBS = [
    Job(id="15", user="coorm_alice", state=JobState.RUNNING, hosts=2,
        host_names=("beta-1", "beta-2"), walltime=3600, start=1795502925),
    Job(id="19", user="coorm_alice", state=JobState.RUNNING, hosts=2,
        host_names=("beta-3", "beta-4"), walltime=1800, start=1795502930,
        reservation="container_now"),
    Job(id="20", user="coorm_bob", state=JobState.RUNNING, hosts=1, host_names=("beta-5",),
        walltime=1800, start=1795502931, reservation="container_now"),
    Job(id="22", user="coorm_bob", state=JobState.PENDING, hosts=2,
        host_names=("beta-1", "beta-2"), walltime=1200, start=1795510123,
        reservation="container_later"),
]  # fmt: skip


def read_gantt(binding: OarBinding, data: dict[str, Any] | None = None, now: int = GANTT_NOW):
    resources, records = parse.gantt(gantt() if data is None else data, binding)
    return parse.cluster_read(binding, resources, records, now)


def rest_records(name: str = "rest_jobs_details.json") -> list[parse.OarJob]:
    return [parse.record(item) for item in load(name)["items"]]


def gantt_resources(binding: OarBinding) -> list[parse.Resource]:
    return parse.gantt(gantt(), binding)[0]


def by_id(jobs: list[Job]) -> dict[str, Job]:
    return {job.id: job for job in jobs}


# --- the gantt -----------------------------------------------------------------------------------


def test_gantt_resources_and_records() -> None:
    resources, records = parse.gantt(gantt(), BETA)
    assert len(resources) == 32
    first = next(r for r in resources if r.id == 17)
    assert first == parse.Resource(
        id=17, host="beta-1", address="beta-1", state="Alive", drain=False, cluster="beta",
        available_upto=2147483647,
    )  # fmt: skip
    assert [r.id for r in records] == ["15", "16", "17", "18", "19", "20", "21", "22", "24", "25"]
    later = next(r for r in records if r.id == "21")
    # its lists come once per (resource, type) row: 2 types x 3 hosts x 2 cores
    assert len(gantt()["jobs"]["21"]["network_address"]) == 12
    assert later == parse.OarJob(
        id="21", name="container_later", owner="coorm_alice", state="Waiting",
        types=("container", "noop"), reservation="None", start=1795510123, walltime=3600,
        addresses=("beta-1", "beta-2", "beta-3"),
    )  # fmt: skip
    batch = next(r for r in records if r.id == "15")
    assert (batch.types, batch.start, batch.walltime) == ((), 1795502925, 3600)  # no "types" key
    assert next(r for r in records if r.id == "22").container == "21"


def test_one_cluster_of_the_gantt() -> None:
    nodes, jobs, reservations = read_gantt(BETA)
    assert nodes == [Node(name=f"beta-{i}") for i in range(1, 9)]
    assert jobs == BETA_JOBS
    assert reservations == [CONTAINER_NOW, CONTAINER_LATER]


def test_the_other_cluster_of_the_same_gantt() -> None:
    nodes, jobs, reservations = read_gantt(ALPHA)
    assert [n.name for n in nodes] == [f"alpha-{i}" for i in range(1, 9)]
    assert reservations == []  # the gantt has no reservation flag: carol's are jobs here
    assert [(j.id, j.state, j.hosts, j.start) for j in jobs] == [
        ("16", JobState.RUNNING, 8, 1795502925),
        ("17", JobState.PENDING, 4, 1795506586),
        ("24", JobState.PENDING, 1, 1795517323),
        ("25", JobState.PENDING, 1, 1795520923),
    ]


def test_a_job_on_one_core_of_a_host_occupies_the_host() -> None:
    data = gantt()
    batch = data["jobs"]["15"]
    batch["network_address"], batch["resource_id"] = ["beta-1"], [17]  # one core of beta-1
    assert by_id(read_gantt(BETA, data)[1])["15"].host_names == ("beta-1",)
    # recorded: job 9 ran on one core of alpha-5 and one of alpha-6
    resources = parse.resources_of_nodes(load("oarnodes_J.json"), ALPHA)
    _, jobs, _ = parse.cluster_read(
        ALPHA, resources, rest_records("jobs_details.json"), DETAILS_NOW
    )
    assert (by_id(jobs)["9"].hosts, by_id(jobs)["9"].host_names) == (2, ("alpha-5", "alpha-6"))


def test_containers_are_named_by_their_job_name_when_it_is_a_valid_name() -> None:
    data = gantt()
    data["jobs"]["21"]["job_name"] = "later resa"
    data["jobs"]["18"]["job_name"] = None
    _, jobs, reservations = read_gantt(BETA, data)
    assert [r.name for r in reservations] == ["oar-18", "oar-21"]
    # the jobs inside follow their container
    assert [(j.id, j.reservation) for j in jobs if j.reservation] == [
        ("19", "oar-18"), ("20", "oar-18"), ("22", "oar-21"),
    ]  # fmt: skip


def test_a_begun_placeholder_holds_its_hosts_from_the_start_asked() -> None:
    """OAR reports a reservation from when it launched it (seconds after the start asked, its
    walltime cut to keep the end); the bridge's placeholders record the start asked."""
    data = gantt()
    launched = data["jobs"]["18"]  # container_now: asked at 1795502925, launched 4 s later
    launched["command"] = "coorm-placeholder start=1795502925"
    made = read_gantt(BETA, data)[2][0]
    assert (made.name, made.start, made.end) == ("container_now", 1795502925, 1795506525)
    for other in ("coorm-placeholder start=1795502935", "sleep 3600", "coorm-placeholder"):
        launched["command"] = other  # asked after it began, or not one of ours: as OAR says
        assert read_gantt(BETA, data)[2][0].start == 1795502929


def test_an_inner_job_whose_container_is_not_live_keeps_its_id() -> None:
    data = gantt()
    del data["jobs"]["21"]
    assert by_id(read_gantt(BETA, data)[1])["22"].reservation == "oar-21"


def test_besteffort_and_finished_jobs_hold_nothing() -> None:
    data = gantt()
    data["jobs"]["15"]["queue_name"] = "besteffort"
    data["jobs"]["15"]["types"] = ["besteffort"]
    assert "15" not in by_id(read_gantt(BETA, data)[1])
    past = load("oarstat_J_gantt_past.json")  # the same jobs, ended (Terminated, Error)
    for binding in (ALPHA, BETA):
        _, jobs, reservations = read_gantt(binding, past)
        assert (jobs, reservations) == ([], [])


def test_a_waiting_job_without_a_prediction_is_left_out() -> None:
    data = gantt()
    data["jobs"]["17"]["start_time"] = 0
    assert "17" not in by_id(read_gantt(ALPHA, data)[1])
    records = rest_records()
    waiting = next(i for i, r in enumerate(records) if r.id == "17")
    records[waiting] = parse.OarJob(**{**records[waiting].__dict__, "start": None, "addresses": ()})
    _, jobs, _ = parse.cluster_read(ALPHA, gantt_resources(ALPHA), records, GANTT_NOW)
    assert "17" not in by_id(jobs)
    assert "16" in by_id(jobs)


def test_jobs_are_split_between_clusters_by_their_hosts() -> None:
    """Job 5 of the first recording waits for all 16 hosts of alpha and beta."""
    records = rest_records("jobs_details.json")
    reads = {}
    for binding in (ALPHA, BETA):
        resources = parse.resources_of_nodes(load("oarnodes_J.json"), binding)
        reads[binding.name] = by_id(parse.cluster_read(binding, resources, records, DETAILS_NOW)[1])
    for cluster in ("alpha", "beta"):
        both = reads[cluster]["5"]
        assert both.host_names == tuple(f"{cluster}-{i}" for i in range(1, 9))
        assert (both.state, both.start, both.walltime) == (JobState.PENDING, 1795237646, 1200)
    assert "3" in reads["beta"]
    assert "3" not in reads["alpha"]
    assert "1" in reads["alpha"]
    assert "1" not in reads["beta"]


# --- host states ---------------------------------------------------------------------------------


def host(*states: str, drain: str = "NO", upto: int = 2147483647) -> list[parse.Resource]:
    rows = [
        {"resource_id": i, "host": "h", "network_address": "h", "state": state, "drain": drain,
         "cluster": "alpha", "available_upto": upto}
        for i, state in enumerate(states)
    ]  # fmt: skip
    return [parse.resource(row, ALPHA) for row in rows]


@pytest.mark.parametrize(
    ("resources", "state"),
    [
        (host("Alive", "Alive"), NodeState.UP),
        # OAR runs nothing on an Absent host (energy saving may wake it: views are then
        # pessimistic), whatever its available_upto (2^31-1 unless an admin set it)
        (host("Alive", "Absent"), NodeState.DOWN),
        (host("Absent", upto=GANTT_NOW + 1), NodeState.DOWN),
        (host("Absent", upto=0), NodeState.DOWN),
        (host("Alive", "Suspected"), NodeState.DOWN),
        (host("Dead", "Alive"), NodeState.DOWN),
        (host("Alive", "Alive", drain="YES"), NodeState.DRAINED),
        (host("Dead", drain="YES"), NodeState.DRAINED),
    ],
)
def test_a_host_is_up_only_when_all_its_resources_are(
    resources: list[parse.Resource], state: NodeState
) -> None:
    assert parse.nodes(resources, GANTT_NOW) == [Node(name="h", state=state)]


def test_recorded_absent_suspected_and_dead_hosts_are_down() -> None:
    data = load("oarstat_J_gantt_nodes_down.json")
    nodes = {n.name: n.state for n in read_gantt(ALPHA, data)[0]}
    assert [nodes[f"alpha-{i}"] for i in (6, 7, 8)] == [NodeState.DOWN] * 3
    assert all(nodes[f"alpha-{i}"] is NodeState.UP for i in range(1, 6))
    from_oarnodes = parse.resources_of_nodes(load("oarnodes_J_absent_dead_suspected.json"), ALPHA)
    mine = parse.in_cluster(from_oarnodes, ALPHA)
    assert parse.nodes(mine, GANTT_NOW) == read_gantt(ALPHA, data)[0]


# --- the REST API and oarstat -f -----------------------------------------------------------------


def test_rest_records_take_a_waiting_jobs_predicted_start() -> None:
    records = {r.id: r for r in rest_records()}
    assert records["17"].start == 1795506586  # scheduled_start; its start_time is 0
    assert sorted(records["17"].addresses) == ["alpha-1", "alpha-2", "alpha-3", "alpha-4"]
    assert records["18"].reservation == "Scheduled"
    assert (records["18"].start, records["18"].walltime) == (1795502929, 3596)
    assert records["22"].container == "21"
    assert records["15"].types == ()


def test_rest_and_gantt_give_one_cluster_the_same_view() -> None:
    resources = gantt_resources(BETA)
    from_rest = parse.cluster_read(BETA, resources, rest_records(), GANTT_NOW)
    assert from_rest == read_gantt(BETA)


def test_rest_knows_reservations_that_are_not_containers() -> None:
    _, jobs, reservations = parse.cluster_read(
        ALPHA, gantt_resources(ALPHA), rest_records(), GANTT_NOW
    )
    assert [j.id for j in jobs] == ["16", "17"]
    assert reservations == [
        Reservation(name="oar-24", start=1795517323, end=1795517923, hosts=1,
                    host_names=("alpha-1",), users=("coorm_carol",), launched=False),
        Reservation(name="oar-25", start=1795520923, end=1795521523, hosts=1,
                    host_names=("alpha-1",), users=("coorm_carol",), launched=False),
    ]  # fmt: skip


def test_oarstat_full_records() -> None:
    waiting = parse.record(load("oarstat_J_f_job2.json")["2"])
    assert (waiting.id, waiting.state, waiting.start, waiting.walltime) == (
        "2", "Waiting", 1795231181, 3600,
    )  # fmt: skip
    records = {k: parse.record(v) for k, v in load("oarstat_J_f.json").items()}
    assert records["16"].addresses == tuple(f"alpha-{i}" for i in range(1, 9))
    assert (records["16"].owner, records["16"].start) == ("coorm_alice", 1795502925)
    failed = parse.record(load("oarstat_J_f_job_on_suspected_node.json")["27"])
    assert (failed.state, failed.exit_code) == ("Error", None)


def test_walltimes_from_the_message_or_the_times() -> None:
    assert parse.walltime_of({"message": "R=6,W=1:0:0,J=R,N=resa_beta,T=noop"}) == 3600
    assert parse.walltime_of({"message": "R=2,W=25:01:01,J=B"}) == 90061
    assert parse.walltime_of({"start_time": 100, "stop_time": 700}) == 600
    assert parse.walltime_of({"walltime": 0, "moldable_walltime": 60}) == 60
    with pytest.raises(ValueError, match="no walltime"):
        parse.walltime_of({"id": 4})


def test_answers_that_are_not_oars_are_refused() -> None:
    with pytest.raises(ValueError, match="not an object"):
        parse.gantt([], ALPHA)
    with pytest.raises(ValueError, match="not a list"):
        parse.gantt({"resources": {"1": {}}, "jobs": {}}, ALPHA)
    with pytest.raises(ValueError, match="without an id"):
        parse.gantt({"resources": [], "jobs": {"x": {"job_id": "x", "walltime": 60}}}, ALPHA)
    with pytest.raises(ValueError, match="without an id"):
        parse.record({"id": None, "walltime": 60})
    with pytest.raises(ValueError, match="not resources"):
        parse.resources_of_nodes("oops", ALPHA)


# --- hardware ------------------------------------------------------------------------------------


def test_hardware_of_a_cluster() -> None:
    resources = parse.resources_of_nodes(load("oarnodes_J.json"), BETA)
    assert parse.hardware(parse.in_cluster(resources, BETA)) == Hardware(8, 2, 0)


def test_cores_per_host_are_the_smallest_hosts() -> None:
    rows = [
        {"resource_id": i, "host": f"n{i % 3}", "cluster": "alpha", "memnode": 4096}
        for i in range(7)  # n0: 3 resources, n1 and n2: 2
    ]
    rows.append({"resource_id": 9, "host": "elsewhere", "cluster": "beta", "memnode": 1})
    resources = parse.in_cluster(parse.resources_of_nodes(rows, ALPHA), ALPHA)
    assert parse.hardware(resources) == Hardware(hosts=3, cores_per_host=2, ram_per_host_mib=4096)
    with pytest.raises(ValueError, match="no resource"):
        parse.hardware(parse.in_cluster(resources, OarBinding("x", value="gamma")))
