"""The slurmrestd back-end on answers recorded from Slurm 22.05.8's slurmrestd (``responses``).

tests/data/slurm/rest/ holds, from one slurmctld with partitions alpha, beta and gamma of 8 nodes:
``openapi_v3.json`` (GET /openapi/v3, trimmed from 150 KB to its paths), and the v0.0.38 answers
``jobs.json`` (alpha: 14 running on 6 hosts, 15 pending with a predicted start; beta: 16 and 17
cancelled), ``job_15.json``, ``nodes.json``, ``reservations.json`` (coorm-test-alpha in alpha,
rec-gamma in gamma for root and nobody), ``reservation_rec-gamma.json`` and two HTTP 500 answers
with an ``errors`` array: ``reservation_missing.json`` and ``job_missing.json``.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import requests
import responses

from coorm_bridge.adapters.batch.backend import Backend
from coorm_bridge.adapters.batch.backend import BatchFailure as SlurmFailure
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.binding import SlurmBinding
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.plugin import make_backend
from coorm_bridge.adapters.slurm.rest_backend import DIALECTS, RestBackend, parse_reservations
from coorm_bridge.adapters.slurm.settings import RestSettings, SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import JobSpec, JobState, NodeState, ReservationSpec, Unavailable

DATA = Path(__file__).parent.parent / "data" / "slurm" / "rest"
NOW = 1795249800  # between job 14's start and job 15's predicted start
SOCKET = "/run/slurm/slurmrestd.sock"
UNIX = "http+unix://%2Frun%2Fslurm%2Fslurmrestd.sock"
TCP = "http://rest.example:6820"
V38 = "slurm/v0.0.38"


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def jwt(user: str) -> str:
    """A token shaped like Slurm's (the signature is not checked here)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'exp': 1, 'iat': 0, 'sun': user})}.sig"


class FakeCli(Backend):
    """Records what reaches the commands; reads must not come here."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.closed = False

    def hardware(self, binding):
        raise AssertionError("hardware must be read through slurmrestd")

    def read(self, binding, now):
        raise AssertionError("read must go through slurmrestd")

    def reservation(self, binding, name):
        raise AssertionError("reservation must be read through slurmrestd")

    def create_reservation(self, binding, spec):
        self.calls.append(("create", binding.name, spec.name))

    def update_reservation(self, binding, spec, *, begun=False):
        self.calls.append(("update", binding.name, spec.name))

    def delete_reservation(self, binding, name):
        self.calls.append(("delete", binding.name, name))

    def submit(self, binding, job):
        self.calls.append(("submit", binding.name, job.name))
        return "42"

    def cancel(self, binding, job_id):
        self.calls.append(("cancel", binding.name, job_id))

    def job_state(self, binding, job_id):
        self.calls.append(("job_state", binding.name, job_id))
        return JobState.RUNNING

    def close(self):
        self.closed = True


@pytest.fixture
def mocked():
    """Every request must match a registered answer (others raise ConnectionError)."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


def serve(rsps: responses.RequestsMock, base: str = UNIX) -> None:
    """The recorded answers, at ``base``."""
    rsps.get(f"{base}/openapi/v3", json=load("openapi_v3.json"))
    for name in ("jobs", "nodes", "reservations"):
        rsps.get(f"{base}/{V38}/{name}", json=load(f"{name}.json"))
    rsps.get(f"{base}/{V38}/reservation/rec-gamma", json=load("reservation_rec-gamma.json"))
    rsps.get(f"{base}/{V38}/reservation/nope", json=load("reservation_missing.json"), status=500)
    rsps.get(f"{base}/{V38}/job/15", json=load("job_15.json"))
    rsps.get(f"{base}/{V38}/job/999999", json=load("job_missing.json"), status=500)


def backend(url: str = f"unix://{SOCKET}", cli: Backend | None = None, **rest: Any) -> RestBackend:
    return RestBackend(RestSettings(url=url, **rest), cli=cli or FakeCli(), timeout=5)


def binding(partition: str | None = None, cluster: str | None = None) -> SlurmBinding:
    return SlurmBinding(partition or "all", cluster=cluster, partition=partition)


# --- version detection ---------------------------------------------------------------------------


def test_the_highest_supported_version_is_chosen_once(mocked):
    serve(mocked)
    rest = backend()
    assert rest.dialect().version == "v0.0.38"
    rest.read(binding("alpha"), NOW)
    rest.read(binding("beta"), NOW)
    detections = [c for c in mocked.calls if c.request.url.endswith("/openapi/v3")]
    assert len(detections) == 1


def test_the_recorded_server_offers_37_and_38():
    paths = load("openapi_v3.json")["paths"]
    offered = {p.split("/")[2] for p in paths if p.startswith("/slurm/")}
    assert offered == {"v0.0.37", "v0.0.38"}
    assert {d.version for d in DIALECTS.values()} >= offered


def test_an_older_server_is_read_with_its_version(mocked):
    document = load("openapi_v3.json")
    document["paths"] = {p: v for p, v in document["paths"].items() if "v0.0.38" not in p}
    mocked.get(f"{UNIX}/openapi/v3", json=document)
    mocked.get(f"{UNIX}/slurm/v0.0.37/nodes", json=load("nodes.json"))
    rest = backend()
    assert rest.dialect().version == "v0.0.37"
    assert rest.hardware(binding("gamma")).hosts == 8


def test_a_server_without_a_supported_version_is_refused_clearly(mocked):
    paths = {f"/slurm/v0.0.{n}/jobs": {} for n in (40, 41)}
    mocked.get(f"{UNIX}/openapi/v3", json={"paths": {**paths, "/openapi/v3": {}}})
    with pytest.raises(SlurmFailure, match=r"offers v0\.0\.40, v0\.0\.41; this bridge reads") as e:
        backend().dialect()
    assert e.value.kind == "other"


def test_a_failed_detection_is_tried_again(mocked):
    mocked.get(f"{UNIX}/openapi/v3", body=requests.ConnectionError("refused"))
    rest = backend()
    with pytest.raises(SlurmFailure) as e:
        rest.dialect()
    assert e.value.kind == "unreachable"
    mocked.replace(responses.GET, f"{UNIX}/openapi/v3", json=load("openapi_v3.json"))
    assert rest.dialect().version == "v0.0.38"


# --- reading -------------------------------------------------------------------------------------


def test_read_filters_nodes_jobs_and_reservations_by_partition(mocked):
    serve(mocked)
    rest = backend()
    nodes, jobs, reservations = rest.read(binding("alpha"), NOW)
    assert [n.name for n in nodes] == [f"a0{i}" for i in range(1, 9)]
    assert {n.name for n in nodes if n.state is NodeState.UP} == {n.name for n in nodes}
    running, pending = sorted(jobs, key=lambda j: j.id)
    assert (running.id, running.state, running.hosts) == ("14", JobState.RUNNING, 6)
    assert running.host_names == tuple(f"a0{i}" for i in range(1, 7))
    assert (running.start, running.walltime) == (1795249734, 1200)
    assert (pending.id, pending.state, pending.hosts) == ("15", JobState.PENDING, 4)
    assert (pending.start, pending.walltime) == (1795250934, 600)  # backfill's prediction
    (reservation,) = reservations
    assert (reservation.name, reservation.hosts, reservation.users) == (
        "coorm-test-alpha",
        2,
        ("root",),
    )
    assert reservation.host_names == ("a01", "a02")
    assert reservation.end - reservation.start == 1800


def test_finished_jobs_are_dropped_and_other_partitions_left_out(mocked):
    serve(mocked)
    nodes, jobs, reservations = backend().read(binding("beta"), NOW)
    assert len(nodes) == 8
    assert all(n.name.startswith("b") for n in nodes)
    assert (jobs, reservations) == ([], [])  # 16 and 17 were cancelled


def test_the_whole_controller_without_partition(mocked):
    serve(mocked)
    nodes, jobs, reservations = backend().read(binding(), NOW)
    assert len(nodes) == 24
    assert {j.id for j in jobs} == {"14", "15"}
    assert {r.name: r.users for r in reservations} == {
        "coorm-test-alpha": ("root",),
        "rec-gamma": ("root", "nobody"),
    }


def test_reservations_holding_a_partitions_nodes_count_there():
    document = copy.deepcopy(load("reservations.json"))
    document["reservations"][1]["partition"] = ""
    document["reservations"][1]["node_list"] = "b[01-03]"
    beta = [f"b0{i}" for i in range(1, 9)]
    assert [r.name for r in parse_reservations(document, "beta", beta)] == ["rec-gamma"]
    assert parse_reservations(document, "gamma", ["c01"]) == []
    document["reservations"][0].update(node_count=0, node_list="")  # licenses only: no host
    assert [r.name for r in parse_reservations(document)] == ["rec-gamma"]


def test_a_malformed_reservation_is_a_failure(mocked):
    serve(mocked)
    document = load("reservations.json")
    document["reservations"][0]["node_list"] = "a[01-"
    mocked.replace(responses.GET, f"{UNIX}/{V38}/reservations", json=document)
    with pytest.raises(SlurmFailure, match=r"coorm-test-alpha: .*bad host list") as e:
        backend().read(binding("alpha"), NOW)
    assert e.value.kind == "other"


def test_hardware_comes_from_the_nodes(mocked):
    serve(mocked)
    rest = backend()
    hardware = rest.hardware(binding("gamma"))
    assert (hardware.hosts, hardware.cores_per_host, hardware.ram_per_host_mib) == (8, 2, 1000)
    assert rest.hardware(binding()).hosts == 24
    with pytest.raises(SlurmFailure, match=r"no partition 'delta'.*: alpha, beta, gamma$") as e:
        rest.hardware(binding("delta"))
    assert (e.value.kind, e.value.key) == ("misconfigured", "partition")  # the daemon stops
    with pytest.raises(SlurmFailure, match="case-sensitive: did you mean 'gamma'"):
        rest.hardware(binding("GAMMA"))


def test_one_reservation_is_read_by_name(mocked):
    serve(mocked)
    rest = backend()
    made = rest.reservation(binding("gamma"), "rec-gamma")
    assert made is not None
    assert (made.hosts, made.host_names, made.users) == (
        3,
        ("c01", "c02", "c03"),
        ("root", "nobody"),
    )
    assert rest.reservation(binding("gamma"), "nope") is None  # HTTP 500 "reservation is invalid"


def test_job_states_are_read_and_array_tasks_asked_to_the_commands(mocked):
    serve(mocked)
    cli = FakeCli()
    rest = backend(cli=cli)
    assert rest.job_state(binding("alpha"), "15") is JobState.PENDING
    assert rest.job_state(binding("alpha"), "999999") is JobState.UNKNOWN  # forgotten
    assert rest.job_state(binding("beta"), "16_1") is JobState.RUNNING
    assert cli.calls == [("job_state", "beta", "16_1")]


# --- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error", [requests.ConnectionError("refused"), requests.Timeout("too slow")]
)
def test_no_answer_is_unreachable(mocked, error):
    serve(mocked)
    mocked.replace(responses.GET, f"{UNIX}/{V38}/jobs", body=error)
    with pytest.raises(SlurmFailure, match="no answer") as e:
        backend().read(binding("alpha"), NOW)
    assert e.value.kind == "unreachable"


def test_a_missing_socket_is_unreachable(tmp_path):
    with pytest.raises(SlurmFailure) as e:
        backend(url=f"unix://{tmp_path}/none.sock").dialect()
    assert e.value.kind == "unreachable"


def test_a_proxy_error_is_unreachable(mocked):
    serve(mocked)
    mocked.replace(responses.GET, f"{UNIX}/{V38}/nodes", body="Bad Gateway", status=502)
    with pytest.raises(SlurmFailure, match="HTTP 502") as e:
        backend().hardware(binding("alpha"))
    assert e.value.kind == "unreachable"


def test_401_speaks_of_the_token(mocked, tmp_path):
    mocked.get(f"{TCP}/openapi/v3", body="Authentication failure", status=401)
    token = tmp_path / "jwt"
    token.write_text(jwt("root"))
    with pytest.raises(SlurmFailure, match=rf"HTTP 401.*JWT in {token}.*scontrol token") as e:
        backend(TCP, token_file=token).dialect()
    assert e.value.kind == "other"
    with pytest.raises(SlurmFailure, match=r"HTTP 401.*no token_file"):
        backend(TCP).dialect()


def test_an_errors_array_is_a_failure_with_slurms_message(mocked):
    serve(mocked)
    answer = {"errors": [{"error": "Unable to contact slurm controller (connect failure)",
                          "error_number": 1001}], "jobs": []}  # fmt: skip
    mocked.replace(responses.GET, f"{UNIX}/{V38}/jobs", json=answer, status=500)
    with pytest.raises(SlurmFailure, match="Unable to contact slurm controller") as e:
        backend().read(binding("alpha"), NOW)
    assert e.value.kind == "unreachable"
    answer = {"errors": [{"description": "Failed while looking for jobs", "error": "Unspecified"}]}
    mocked.replace(responses.GET, f"{UNIX}/{V38}/jobs", json={**answer, "jobs": []})
    with pytest.raises(SlurmFailure, match=r"jobs: .*Failed while looking for jobs") as e:
        backend().read(binding("alpha"), NOW)  # errors in an HTTP 200 answer too
    assert e.value.kind == "other"


def test_unspecified_errors_over_tcp_mention_the_token(mocked, tmp_path):
    serve(mocked, TCP)
    answer = {"errors": [{"description": "slurmctld config is unable to load",
                          "error_number": -1, "error": "Unspecified error"}]}  # fmt: skip
    mocked.replace(responses.GET, f"{TCP}/{V38}/nodes", json=answer, status=500)
    token = tmp_path / "jwt"
    token.write_text(jwt("root"))
    with pytest.raises(SlurmFailure, match="bad or expired JWT"):
        backend(TCP, token_file=token).hardware(binding("alpha"))


def test_an_answer_that_is_not_json_is_a_failure(mocked):
    serve(mocked)
    mocked.replace(responses.GET, f"{UNIX}/{V38}/reservations", body="<html>oops</html>")
    with pytest.raises(SlurmFailure, match="reservations") as e:
        backend().read(binding("alpha"), NOW)
    assert e.value.kind == "other"


def test_the_adapter_turns_a_failed_read_into_unavailable(mocked):
    mocked.get(f"{UNIX}/openapi/v3", body=requests.ConnectionError("refused"))
    settings = SlurmSettings(
        backend="rest",
        rest=RestSettings(url=f"unix://{SOCKET}"),
        clusters=(SlurmCluster(name="alpha", partition="alpha"),),
    )
    adapter = SlurmAdapter(settings, backend())
    with pytest.raises(Unavailable, match="alpha: slurmrestd"):
        adapter.snapshot()


# --- tokens --------------------------------------------------------------------------------------


def test_over_tcp_the_token_file_is_sent_and_read_at_every_request(mocked, tmp_path):
    serve(mocked, TCP)
    token = tmp_path / "jwt"
    token.write_text(f"SLURM_JWT={jwt('alice')}\n")  # scontrol token's output as it is
    rest = backend(TCP, token_file=token)
    rest.hardware(binding("alpha"))
    for call in mocked.calls:
        assert call.request.headers["X-SLURM-USER-TOKEN"] == jwt("alice")
        assert call.request.headers["X-SLURM-USER-NAME"] == "alice"  # the token's "sun"
    token.write_text(jwt("bob"))  # renewed
    rest.hardware(binding("alpha"))
    assert mocked.calls[-1].request.headers["X-SLURM-USER-TOKEN"] == jwt("bob")


def test_the_configured_user_wins_over_the_tokens(mocked, tmp_path):
    serve(mocked, TCP)
    token = tmp_path / "jwt"
    token.write_text("not-a-jwt")
    backend(TCP, token_file=token, user="slurm").dialect()
    headers = mocked.calls[0].request.headers
    assert (headers["X-SLURM-USER-NAME"], headers["X-SLURM-USER-TOKEN"]) == ("slurm", "not-a-jwt")


def test_no_token_goes_over_the_socket(mocked, tmp_path):
    serve(mocked)
    token = tmp_path / "jwt"
    token.write_text(jwt("alice"))
    backend(token_file=token).dialect()
    assert "X-SLURM-USER-TOKEN" not in mocked.calls[0].request.headers


def test_an_unreadable_token_file_is_a_failure(tmp_path):
    with pytest.raises(SlurmFailure, match="token_file") as e:
        backend(TCP, token_file=tmp_path / "missing").dialect()
    assert e.value.kind == "other"


# --- writes and clusters -------------------------------------------------------------------------


def test_writes_go_to_the_commands(mocked):
    cli = FakeCli()
    rest = backend(cli=cli)  # nothing served: any HTTP request would fail
    spec = ReservationSpec(name="coorm-1", start=NOW + 60, end=NOW + 600, hosts=2, users=("root",))
    job = JobSpec(name="sleeper", user="root", argv=("sleep", "1"), hosts=1, walltime=60)
    rest.create_reservation(binding("alpha"), spec)
    rest.update_reservation(binding("alpha"), spec)
    rest.delete_reservation(binding("alpha"), "coorm-1")
    assert rest.submit(binding("alpha"), job) == "42"
    rest.cancel(binding("alpha"), "42")
    assert cli.calls == [
        ("create", "alpha", "coorm-1"),
        ("update", "alpha", "coorm-1"),
        ("delete", "alpha", "coorm-1"),
        ("submit", "alpha", "sleeper"),
        ("cancel", "alpha", "42"),
    ]
    assert len(mocked.calls) == 0
    rest.close()
    assert cli.closed


def test_a_binding_with_a_slurm_cluster_is_refused(mocked):
    serve(mocked)
    cli = FakeCli()
    rest = backend(cli=cli)
    other = binding("alpha", cluster="elsewhere")
    with pytest.raises(SlurmFailure, match=r"'elsewhere' \(-M\).*backend = 'cli'") as e:
        rest.read(other, NOW)
    assert e.value.kind == "other"
    with pytest.raises(SlurmFailure, match="-M"):
        rest.cancel(other, "42")
    assert cli.calls == []


def test_the_factory_makes_a_rest_backend_writing_with_the_commands():
    settings = SlurmSettings(
        backend="rest",
        rest=RestSettings(url="http://rest.example:6820"),
        timeout=12,
        clusters=(SlurmCluster(name="alpha", partition="alpha"),),
    )
    made = make_backend(settings)
    assert isinstance(made, RestBackend)
    assert isinstance(made.cli, SlurmCliBackend)
    assert (made.timeout, made.cli.timeout) == (12, 12)
    made.close()
