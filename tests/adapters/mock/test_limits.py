"""Every number that enters the mock platform is bounded, so none can overflow the bridge's int64
times: in the settings, in the platform file (errors name file and key), in traces and calls."""

import gzip
import logging
import time

import pytest
from pydantic import ValidationError

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.adapters.mock.plugin import MockSettings
from coorm_bridge.batchsim import (
    MAX_DURATION,
    MAX_SPEEDUP,
    MAX_TIME,
    RUNTIME_KEY,
    VirtualClock,
    WallClock,
    load_platform,
    parse_platform,
)
from coorm_bridge.core.batch import AdapterError, JobSpec, ReservationSpec
from coorm_bridge.core.model import describe
from coorm_bridge.core.profile import FOREVER

T0 = 1_700_000_000
CLUSTER = '[[cluster]]\nname = "c"\nhosts = 4\n'


def test_the_limits_leave_room_below_the_bridges_forever():
    assert MAX_TIME + 10 * MAX_DURATION < FOREVER < 2**63
    assert time.gmtime(MAX_TIME).tm_year == 9999
    assert MAX_TIME + 1 == 253_402_300_800  # 10000-01-01T00:00:00Z


@pytest.mark.parametrize("speedup", [1e300, MAX_SPEEDUP * 1.5])
def test_a_speedup_beyond_the_limit_names_the_key_and_the_limit(speedup):
    with pytest.raises(ValidationError) as caught:
        MockSettings(speedup=speedup)
    assert describe(caught.value) == (
        f"speedup: must be at most 10000 (simulated seconds per real second), got {speedup}"
    )
    assert MockSettings(speedup=MAX_SPEEDUP).speedup == MAX_SPEEDUP


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (f"start = {MAX_TIME + 1}\n{CLUSTER}", "start: must be at most 253402300799 (the end of"),
        ("start = 1e300\n" + CLUSTER, "start: Input should be a valid integer"),
        ('[[cluster]]\nname = "c"\nhosts = 100001\n', "cluster.0.hosts: must be at most 100000"),
        (
            '[[cluster]]\nname = "c"\nhosts = 1\nram_per_host_mib = 9223372036854775807\n',
            "cluster.0.ram_per_host_mib: must be at most",
        ),
        (
            CLUSTER + '[[load]]\nkind = "synthetic"\ncluster = "c"\ncount = 1000000000\n',
            "load.0.synthetic.count: must be at most 1000000",
        ),
        (
            CLUSTER + '[[load]]\nkind = "synthetic"\ncluster = "c"\nmean_runtime = 1e300\n',
            "load.0.synthetic.mean_runtime: must be at most 3153600000 (100 years)",
        ),
        (
            CLUSTER + '[[load]]\nkind = "swf"\ncluster = "c"\npath = "t.swf"\ntime_scale = 1e9\n',
            "load.0.swf.time_scale: must be at most 1000",
        ),
        (
            CLUSTER + '[[load]]\nkind = "swf"\ncluster = "c"\npath = "t.swf"\n'
            "offset = 99999999999\n",
            "load.0.swf.offset: must be at most 3153600000",
        ),
        (
            CLUSTER + '[[outage]]\ncluster = "c"\nstart = 0\nend = 10000000000\n',
            "outage.0.end: must be at most 3153600000",
        ),
    ],
)
def test_platform_numbers_out_of_range_name_the_file_and_the_key(tmp_path, text, where):
    path = tmp_path / "site.toml"
    path.write_text(text)
    with pytest.raises(AdapterError) as caught:
        load_platform(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert where in str(caught.value)
    assert "\n" not in str(caught.value)


def test_clocks_stop_at_the_end_of_year_9999():
    with pytest.raises(ValueError, match="past 253402300799"):
        VirtualClock(MAX_TIME - 5).advance_to(MAX_TIME + 1)
    with pytest.raises(ValueError, match="starts within"):
        VirtualClock(MAX_TIME + 1)
    with pytest.raises(ValueError, match="speedup"):
        WallClock(speedup=1e300)
    with WallClock(speedup=MAX_SPEEDUP, origin=MAX_TIME - 1) as clock:
        deadline = time.monotonic() + 30
        while clock.now() < MAX_TIME and time.monotonic() < deadline:
            time.sleep(0.01)
        assert clock.now() == MAX_TIME
        time.sleep(0.01)
        assert clock.now() == MAX_TIME
        with pytest.raises(ValueError, match="never reaches"):
            clock.sleep_until(MAX_TIME + 1)


def small() -> MockAdapter:
    return MockAdapter(parse_platform(CLUSTER), VirtualClock(T0))


def test_calls_with_times_out_of_range_are_refused_and_change_nothing():
    platform = small()
    # The model refuses such times before any platform sees them (bounds shared by the bridge).
    with pytest.raises(ValidationError, match="less than or equal to 253402300799"):
        ReservationSpec(name="r", start=MAX_TIME - 10, end=MAX_TIME + 10, hosts=1, users=("u",))
    with pytest.raises(ValidationError, match="less than or equal to"):
        JobSpec(name="j", user="u", argv=("x",), hosts=1, walltime=MAX_DURATION + 1)
    runs = JobSpec(
        name="j",
        user="u",
        argv=("x",),
        hosts=1,
        walltime=60,
        environment={RUNTIME_KEY: str(10**30)},
    )
    with pytest.raises(AdapterError, match="at most 3153600000"):
        platform.submit("c", runs)
    with pytest.raises(ValueError, match="within"):
        platform.outage("c", T0, MAX_TIME + 1)
    shot = platform.snapshot().clusters["c"]
    assert (shot.reservations, shot.jobs) == ((), ())
    ok = JobSpec(name="j", user="u", argv=("x",), hosts=1, walltime=60)
    assert platform.submit("c", ok) == "c.1"  # refused submissions used no job number


def test_trace_records_out_of_range_are_left_out_and_counted(tmp_path, caplog):
    fields = "{n} {submit} 0 {run} 1 -1 -1 1 {run} -1 1 1 1 -1 -1 -1 -1 -1"
    records = [
        fields.format(n=1, submit=10, run=100),
        fields.format(n=2, submit=20, run=10**12),  # runs for 30,000 years
        fields.format(n=3, submit=10**13, run=100),  # arrives in year 300,000 or so
        fields.format(n=4, submit=30, run=100),
    ]
    with gzip.open(tmp_path / "t.swf.gz", "wt") as trace:
        trace.write("\n".join(records) + "\n")
    text = CLUSTER + '[[load]]\nkind = "swf"\ncluster = "c"\npath = "t.swf.gz"\n'
    with caplog.at_level(logging.WARNING):
        platform = MockAdapter(parse_platform(text, base_dir=tmp_path), VirtualClock(T0))
    assert [r.id for r in platform.schedulers["c"].records()] == ["load1-1", "load1-4"]
    assert "2 jobs left out" in caplog.text


def test_a_malformed_trace_is_an_adapter_error_naming_it(tmp_path):
    (tmp_path / "t.swf").write_text("1 2 3\n")
    text = CLUSTER + '[[load]]\nkind = "swf"\ncluster = "c"\npath = "t.swf"\n'
    with pytest.raises(AdapterError, match=r"cannot use trace .*t\.swf, line 1: expected 18"):
        MockAdapter(parse_platform(text, base_dir=tmp_path), VirtualClock(T0))
