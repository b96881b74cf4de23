"""The REST back-end reads OAR's Gantt with two read-only queries (``/select_all``) and gets
what ``oarstat -J --gantt`` and ``/jobs/details`` say of the same server at the same moment
(tests/data/oar/sql_*: one recording of the test OAR read the three ways; see
tests/oar/record_samples.py ``sql``)."""

from __future__ import annotations

from typing import Any

import pytest
import responses
from responses import matchers

from coorm_bridge.adapters.oar import gantt_sql, parse
from coorm_bridge.adapters.oar.rest_backend import OarRestBackend
from coorm_bridge.adapters.oar.settings import OarRest
from tests.oar.samples import ALPHA, BETA, load

URL = "http://oar.example/oarapi"
WINDOW = load("sql_window.json")
NOW = WINDOW["begin"] + 1


@pytest.fixture
def mocked() -> Any:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


def serve(rsps: responses.RequestsMock, *, sql: bool = True) -> None:
    rsps.get(f"{URL}/resources/details.json", json=load("sql_resources_details.json"))
    query = gantt_sql.query(WINDOW["begin"], WINDOW["end"])
    if sql:
        rsps.get(
            f"{URL}/select_all.json",
            json=load("sql_select_all.json"),
            match=[matchers.query_param_matcher({"query": query}, strict_match=False)],
        )
    else:
        rsps.get(f"{URL}/select_all.json", status=500, json={"code": 500, "message": "SQL error"})
    rsps.get(
        f"{URL}/jobs/details.json",
        json=load("sql_jobs_details.json"),
        match=[matchers.query_param_matcher(
            {"from": str(WINDOW["begin"]), "to": str(WINDOW["end"])}, strict_match=False
        )],
    )  # fmt: skip


def backend() -> OarRestBackend:
    return OarRestBackend(
        OarRest(url=URL), timeout=5, horizon=WINDOW["end"] - NOW, clock=lambda: NOW
    )


def by_gantt(binding: Any) -> Any:
    data = load("sql_oarstat_J_gantt.json")
    resources, jobs = parse.gantt(data, binding)
    return parse.cluster_read(binding, resources, jobs, NOW)


@pytest.mark.parametrize("binding", [ALPHA, BETA], ids=["alpha", "beta"])
def test_one_query_reads_what_oarstat_gantt_reads(mocked, binding) -> None:
    serve(mocked)
    rest = backend()
    resources, jobs = rest.whole(binding, NOW)
    assert parse.cluster_read(binding, resources, jobs, NOW) == by_gantt(binding)
    assert rest.sql
    paths = [c.request.path_url.split("?")[0] for c in mocked.calls]
    assert paths == ["/oarapi/resources/details.json", "/oarapi/select_all.json"]


@pytest.mark.parametrize("binding", [ALPHA, BETA], ids=["alpha", "beta"])
def test_a_refused_query_falls_back_on_the_details_of_the_window(mocked, binding) -> None:
    serve(mocked, sql=False)
    rest = backend()
    resources, jobs = rest.whole(binding, NOW)
    assert parse.cluster_read(binding, resources, jobs, NOW) == by_gantt(binding)
    assert not rest.sql  # not asked again
    rest.whole(binding, NOW)
    assert sum(c.request.path_url.startswith("/oarapi/select_all") for c in mocked.calls) == 1


def test_the_recording_holds_every_kind_of_job() -> None:
    """Running, predicted, a running container with an inner job, a future one with a waiting
    inner job: what the comparisons above are worth."""
    _, jobs = parse.gantt(load("sql_oarstat_J_gantt.json"), BETA)
    states = {(j.name, j.state) for j in jobs}
    assert {("fill_alpha", "Running"), ("queued_alpha", "Waiting"), ("container_now", "Running"),
            ("inner_now", "Running"), ("container_later", "Waiting"),
            ("inner_later", "Waiting")} <= states  # fmt: skip


def test_the_window_is_whole_seconds_in_order() -> None:
    with pytest.raises(ValueError, match="invalid Gantt window"):
        gantt_sql.query(10, 5)
    with pytest.raises(ValueError, match="invalid Gantt window"):
        gantt_sql.query(True, 5)  # type: ignore[arg-type]
    query = gantt_sql.query(100, 200)
    assert query.count("< 200") == 2
    assert query.count(">= 100") == 2


def test_a_planned_job_is_read_from_the_gantt_not_from_its_assignment() -> None:
    """As oarstat --gantt: a running job that OAR also placed in its Gantt is its Gantt row."""
    row = {"job_id": 7, "job_name": "j", "state": "Running", "job_user": "u", "command": "",
           "queue_name": "default", "reservation": "None", "exit_code": None, "walltime": 600,
           "network_address": "alpha-1", "type": "noop"}  # fmt: skip
    (job,) = gantt_sql.records([
        {**row, "start_time": 1000, "planned": 1},
        {**row, "start_time": 990, "network_address": "alpha-2", "planned": 0},
        {**row, "start_time": 1000, "network_address": "alpha-3", "planned": 1},
    ])  # fmt: skip
    assert (job.start, job.addresses, job.types) == (1000, ("alpha-1", "alpha-3"), ("noop",))
