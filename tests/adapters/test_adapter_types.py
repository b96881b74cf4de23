"""The adapter interface's data types and errors: what every adapter hands the bridge."""

import time

import pytest
from pydantic import ValidationError

from coorm_bridge.adapters import (
    Adapter,
    AdapterError,
    Job,
    JobSpec,
    JobState,
    Refused,
    Reservation,
    ReservationSpec,
    Unavailable,
)


def test_errors_are_typed_and_carry_context():
    refused = Refused("Requested nodes are busy", cluster="c1", retry_after=1234)
    assert isinstance(refused, AdapterError)
    assert refused.cluster == "c1"
    assert refused.retry_after == 1234
    assert isinstance(Unavailable("timeout", cluster="c2"), AdapterError)
    assert not isinstance(Unavailable("x"), Refused)


def test_an_adapter_must_implement_the_whole_interface():
    class Partial(Adapter):
        def clusters(self):  # type: ignore[no-untyped-def]
            return []

    with pytest.raises(TypeError, match="abstract"):
        Partial()  # type: ignore[abstract]


def test_default_now_is_the_hosts_clock_in_whole_seconds(monkeypatch):
    class Site(Adapter):
        pass

    Site.__abstractmethods__ = frozenset()  # only the concrete now() is under test
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.9)
    assert Site().now() == 1_700_000_000


def test_running_job_needs_a_start():
    with pytest.raises(ValidationError, match="running job has a start"):
        Job(id="1", state=JobState.RUNNING, hosts=1, walltime=10)
    job = Job(id="1", state=JobState.RUNNING, hosts=1, walltime=10, start=100)
    assert job.end == 110


def test_reservation_must_end_after_it_starts():
    with pytest.raises(ValidationError, match="ends"):
        Reservation(name="r", start=10, end=10, hosts=1)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"hosts": 0}, "at least one host"),
        ({"end": 5}, "end after it starts"),
        ({"host_names": ("a", "b"), "hosts": 3}, "agreeing"),
        ({"users": ()}, "at least 1"),
        ({"users": ("-rf",)}, "not a usable user name"),
        ({"name": "bad name; rm"}, "not a valid name"),
    ],
)
def test_reservation_spec_refuses_what_cannot_be_meant(fields, message):
    base = {"name": "coorm-1-c1", "start": 10, "end": 20, "hosts": 2, "users": ("alice",)}
    with pytest.raises(ValidationError, match=message):
        ReservationSpec(**(base | fields))


def test_reservation_spec_size_from_hosts_or_list():
    spec = ReservationSpec(name="r", start=1, end=2, host_names=("a", "b"), users=("u",))
    assert spec.size == 2
    assert ReservationSpec(name="r", start=1, end=2, hosts=3, users=("u",)).size == 3


def test_job_spec_is_an_argument_vector():
    spec = JobSpec(
        name="solver",
        user="alice",
        argv=("mpirun", "-n", "4", "a b"),
        hosts=2,
        walltime=60,
        reservation="coorm-1-c1",
    )
    assert spec.argv[-1] == "a b"
    with pytest.raises(ValidationError):
        JobSpec(name="x", user="alice", argv=(), hosts=1, walltime=60)


def test_job_state_finished():
    assert JobState.COMPLETED.finished
    assert JobState.CANCELLED.finished
    assert not JobState.RUNNING.finished
    assert not JobState.UNKNOWN.finished
