"""Smoke tests of the local Slurm fixtures (tests/slurm/conftest.py): the instances that
tests/slurm/slurm-local.sh starts are usable for the adapter's integration tests."""

import http.client
import json
import socket
import time
import urllib.request

import pytest

pytestmark = pytest.mark.slurm


def _job(instance, job_id, cluster=None, args=()):
    jobs = instance.json("squeue", "-j", str(job_id), *args, cluster=cluster)["jobs"]
    return next((j for j in jobs if j["job_id"] == job_id), None)


def _wait_job(instance, job_id, states, timeout=30, cluster=None, args=()):
    deadline = time.monotonic() + timeout
    job = None
    while time.monotonic() < deadline:
        job = _job(instance, job_id, cluster, args)
        if job is not None and job["job_state"] in states:
            return job
        time.sleep(0.2)
    pytest.fail(f"job {job_id} not in {states} after {timeout} s: {job}")


def _sbatch(instance, *args, cluster=None):
    out = instance.run("sbatch", "--parsable", "-o", "/dev/null", *args, cluster=cluster).stdout
    return int(out.strip().split(";")[0])  # "<id>;<cluster>" with -M


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


# ------------------------------------------------------------------ MODE=partitions, REST=1
def test_partitions_nodes_idle(slurm_partitions):
    s = slurm_partitions
    s.reset()
    assert s.clusters == ["alpha", "beta", "gamma"]
    nodes = s.json("sinfo")["nodes"]
    for partition in s.clusters:
        mine = {n["name"]: n["state"] for n in nodes if partition in n["partitions"]}
        assert sorted(mine) == s.nodes[partition]
        assert len(mine) == 8
        assert set(mine.values()) == {"idle"}, mine


def test_partitions_job_runs(slurm_partitions):
    s = slurm_partitions
    job_id = _sbatch(s, "-p", "beta", "-N", "2", "-t", "5", "--wrap", "sleep 120")
    try:
        job = _wait_job(s, job_id, {"RUNNING"})
        assert job["partition"] == "beta"
        hosts = s.run("scontrol", "show", "hostnames", job["nodes"]).stdout.split()
        assert len(hosts) == 2
        assert set(hosts) <= set(s.nodes["beta"])
    finally:
        s.run("scancel", str(job_id))


def test_partitions_pending_job_gets_predicted_start(slurm_partitions):
    s = slurm_partitions
    s.reset()
    blocker = _sbatch(s, "-p", "alpha", "-N", "8", "-t", "10", "--wrap", "sleep 600")
    try:
        _wait_job(s, blocker, {"RUNNING"})
        waiting = _sbatch(s, "-p", "alpha", "-N", "4", "-t", "5", "--wrap", "sleep 60")
        deadline = time.monotonic() + 20  # bf_interval=2
        job = None
        while time.monotonic() < deadline:
            job = _job(s, waiting)
            if job is not None and job["job_state"] == "PENDING" and job["start_time"] > 0:
                break
            time.sleep(0.5)
        assert job is not None
        assert job["job_state"] == "PENDING"
        # the blocker ends at the latest 10 minutes after it started: the prediction follows it
        blocker_end = _job(s, blocker)["end_time"]
        assert job["start_time"] >= blocker_end - 60, (job["start_time"], blocker_end)
        assert job["start_time"] <= blocker_end + 120, (job["start_time"], blocker_end)
    finally:
        s.run("scancel", str(blocker), check=False)
        s.reset()


def test_partitions_reservation(slurm_partitions):
    s = slurm_partitions
    s.run(
        "scontrol",
        "create",
        "reservation",
        "reservationname=smoke",
        "starttime=now+3600",
        "duration=30",
        "nodecnt=2",
        "users=root",
        "partition=beta",
    )
    try:
        shown = s.run("scontrol", "-o", "show", "reservation", "smoke").stdout
        fields = dict(f.split("=", 1) for f in shown.split() if "=" in f)
        hosts = s.run("scontrol", "show", "hostnames", fields["Nodes"]).stdout.split()
        assert len(hosts) == 2
        assert set(hosts) <= set(s.nodes["beta"])
    finally:
        s.run("scontrol", "delete", "reservationname=smoke")


def test_partitions_rest(slurm_partitions):
    s = slurm_partitions
    conn = _UnixHTTPConnection(s.rest_socket())
    conn.request("GET", "/slurm/v0.0.38/partitions")
    reply = conn.getresponse()
    assert reply.status == 200
    names = {p["name"] for p in json.loads(reply.read())["partitions"]}
    assert names == {"alpha", "beta", "gamma"}
    request = urllib.request.Request(
        s.rest_url() + "/slurm/v0.0.38/ping",
        headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": s.token()},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
        assert json.loads(answer.read())["pings"][0]["ping"] == "UP"


# ------------------------------------------------------------------ MODE=clusters, DBD=1
def test_clusters_squeue_per_cluster(slurm_clusters):
    s = slurm_clusters
    assert s.clusters == ["alpha", "beta"]
    job_id = _sbatch(s, "-M", "beta", "-N", "3", "-t", "5", "--wrap", "sleep 120")
    try:
        _wait_job(s, job_id, {"RUNNING"}, args=("-M", "beta"))
        for cluster in s.clusters:
            answer = s.json("squeue", "-M", cluster)
            assert answer["errors"] == []
            ids = {j["job_id"] for j in answer["jobs"]}
            assert (job_id in ids) == (cluster == "beta")
        # each cluster can also be reached through its own slurm.conf
        assert _job(s, job_id, cluster="beta") is not None
        assert s.json("sinfo", cluster="alpha")["nodes"][0]["name"].startswith("alpha")
    finally:
        s.run("scancel", "-M", "beta", str(job_id))


def test_clusters_registered_in_slurmdbd(slurm_clusters):
    s = slurm_clusters
    out = s.run("sacctmgr", "-n", "-P", "list", "cluster", "format=cluster,controlport").stdout
    ports = dict(line.split("|") for line in out.split())
    assert set(ports) == {"alpha", "beta"}
    assert all(int(port) > 0 for port in ports.values())
