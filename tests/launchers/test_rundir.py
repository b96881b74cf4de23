"""Deployment pieces without a bridge: components laid out on clusters, the run directory
(hostfiles, run.json, rendezvous ports), the MPI launcher's words."""

from __future__ import annotations

import json

import pytest

from coorm_bridge.core.messages import Allocation, StartEvent
from coorm_bridge.core.model import ClusterInfo
from coorm_bridge.launchers.app import Component, parse_app
from coorm_bridge.launchers.layout import LayoutError, layout
from coorm_bridge.launchers.rundir import prepare, rendezvous_ports

APP = """
[selector]
params = {{ nodes = {{ alpha = 2, beta = 1 }}, duration = 60 }}
[deployment]
mpi = "{mpi}"
ports = [42000, 42009]
[[component]]
name = "solver"
command = ["/opt/solver", "in put"]
clusters = ["alpha"]
processes_per_host = 4
environment = {{ OMP_NUM_THREADS = "2" }}
[[component]]
name = "coupler"
command = ["coupler"]
"""
CLUSTERS = {
    "alpha": ClusterInfo(name="alpha", hosts=8, cores_per_host=16),
    "beta": ClusterInfo(name="beta", hosts=4, cores_per_host=8),
}


def start_event() -> StartEvent:
    return StartEvent(
        seq=7,
        time=1_800_000_000,
        end=1_800_000_600,
        allocations={
            "alpha": Allocation(hosts=["alpha03", "alpha04"], reservation="coorm-x-s1-alpha"),
            "beta": Allocation(hosts=["beta01"], reservation="coorm-x-s1-beta"),
        },
    )


def component(name: str, **fields) -> Component:
    return Component(name=name, command=("x",), **fields)


def test_layout_follows_constraints_and_the_files_order():
    a, b = component("a", clusters=("c2",)), component("b")
    parts = layout([a, b], {"c1": 3, "c2": 1})
    assert [(p.component.name, p.cluster, p.hosts) for p in parts] == [
        ("a", "c2", 1),
        ("b", "c1", 3),
    ]
    # unconstrained: the first component gets the first cluster by name
    parts = layout([component("x"), component("y")], {"b": 1, "a": 2})
    assert [(p.component.name, p.cluster) for p in parts] == [("x", "a"), ("y", "b")]


def test_a_component_may_span_clusters_within_its_host_bounds():
    solver = component("solver", max_clusters=3, min_hosts=4)
    parts = layout([solver], {"c1": 2, "c2": 2, "c3": 1})
    assert [p.cluster for p in parts] == ["c1", "c2", "c3"]
    with pytest.raises(LayoutError, match="solver wants 4\\+ hosts"):
        layout([solver], {"c1": 3})
    with pytest.raises(LayoutError, match="at least 2 clusters"):
        layout([component("a"), component("b")], {"c1": 8})
    with pytest.raises(LayoutError, match="cannot share"):
        layout([component("a", max_hosts=2), component("b")], {"c1": 3, "c2": 3})


def test_ports_are_distinct_in_the_range_and_the_same_for_a_session():
    ports = rendezvous_ports("s1", 5, (42000, 42004))
    assert sorted(ports) == list(range(42000, 42005))
    assert rendezvous_ports("s1", 5, (42000, 42004)) == ports
    assert rendezvous_ports("s1", 2, (42000, 49999)) != rendezvous_ports("s2", 2, (42000, 49999))
    with pytest.raises(ValueError, match="range has 2"):
        rendezvous_ports("s1", 3, (42000, 42001))


def test_the_run_directory_describes_every_component(tmp_path):
    app = parse_app(APP.format(mpi="mpirun"))
    run = prepare(
        app,
        "s1",
        start_event(),
        CLUSTERS,
        {"alpha": "slurm", "beta": "slurm"},
        address=lambda cluster, host: f"{host}.ib",
        root=tmp_path,
    )
    folder = tmp_path / "s1"
    assert run.path == folder
    assert (folder / "alpha.hosts").read_text() == "alpha03 slots=4\nalpha04 slots=4\n"
    # processes per host: the cluster's cores when the component does not say
    assert (folder / "beta.hosts").read_text() == "beta01 slots=8\n"
    document = json.loads((folder / "run.json").read_text())
    assert document["session"] == "s1"
    assert (document["start"], document["end"]) == (1_800_000_000, 1_800_000_600)
    assert list(document["components"]) == ["solver", "coupler"]
    solver = document["components"]["solver"]
    assert solver["clusters"] == ["alpha"]
    assert solver["processes"] == 8
    port = solver["rendezvous"]["port"]
    assert solver["rendezvous"] == {"host": "alpha03.ib", "port": port}
    assert 42000 <= port <= 42009
    assert solver["parts"][0]["hosts"] == ["alpha03", "alpha04"]
    assert solver["parts"][0]["reservation"] == "coorm-x-s1-alpha"
    assert document["components"]["coupler"]["rendezvous"]["port"] != port
    solver_job, coupler_job = run.plans
    assert solver_job.argv == (
        "mpirun", "--hostfile", str(folder / "alpha.hosts"), "-np", "8", "/opt/solver", "in put",
    )  # fmt: skip
    assert solver_job.hosts == ("alpha03", "alpha04")
    assert solver_job.reservation == "coorm-x-s1-alpha"
    assert solver_job.environment == {
        "OMP_NUM_THREADS": "2",
        "COORM_RUN_JSON": str(folder / "run.json"),
        "COORM_COMPONENT": "solver",
        "COORM_CLUSTER": "alpha",
        "COORM_HOSTFILE": str(folder / "alpha.hosts"),
        "COORM_SESSION": "s1",
        "COORM_RUN_DIR": str(folder),
    }
    assert (solver_job.stdout, solver_job.stderr) == (folder / "alpha.out", folder / "alpha.err")
    assert coupler_job.argv[-1] == "coupler"
    run.record("alpha", job="17", state="running")
    jobs = json.loads((folder / "jobs.json").read_text())
    assert jobs["alpha"]["job"] == "17"
    assert jobs["alpha"]["stdout"] == str(folder / "alpha.out")
    assert jobs["beta"]["state"] == "unsubmitted"


@pytest.mark.parametrize(
    ("mpi", "kind", "words", "hostfile"),
    [
        ("auto", "slurm", ["srun", "--nodes=2", "--ntasks=8", "--ntasks-per-node=4"], "alpha03\n"),
        ("auto", "mock", [], "alpha03\n"),
        ("none", "slurm", [], "alpha03\n"),
    ],
)
def test_mpi_launchers_by_kind(tmp_path, mpi, kind, words, hostfile):
    app = parse_app(APP.format(mpi=mpi))
    run = prepare(app, "s2", start_event(), CLUSTERS, {"alpha": kind, "beta": kind}, root=tmp_path)
    hosts = tmp_path / "s2" / "alpha.hosts"
    assert list(run.plans[0].argv[:-2]) == [w.replace("HOSTFILE", str(hosts)) for w in words]
    assert hosts.read_text().startswith(hostfile)


def test_a_start_the_components_cannot_use_is_refused(tmp_path):
    app = parse_app(APP.format(mpi="none"))
    start = start_event().model_copy(
        update={"allocations": {"beta": Allocation(hosts=["beta01"], reservation="r")}}
    )
    with pytest.raises(LayoutError):
        prepare(app, "s3", start, CLUSTERS, {"beta": "mock"}, root=tmp_path)


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("slurm", ["mpirun", "--hostfile", "HOSTFILE", "-np", "8"]),
        ("mock", ["mpirun", "--oversubscribe", "-np", "8"]),
    ],
)
def test_one_file_names_the_mpi_launcher_per_kind_of_cluster(tmp_path, kind, words):
    text = APP.format(mpi="X").replace('mpi = "X"', 'mpi = { slurm = "mpirun", mock = "local" }')
    app = parse_app(text)
    run = prepare(app, "s3", start_event(), CLUSTERS, {"alpha": kind, "beta": kind}, root=tmp_path)
    hosts = tmp_path / "s3" / "alpha.hosts"
    assert list(run.plans[0].argv[:-2]) == [w.replace("HOSTFILE", str(hosts)) for w in words]
