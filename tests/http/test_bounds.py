"""Every number that enters is bounded: 4xx answers naming the field and the limit, never a 500,
never a stored value that later breaks a policy pass (docs/design.md §9).

The API runs in-process with FastAPI's TestClient over a real bridge and store on the mock
platform; the loop is not started, so that nothing but the requests under test touches the store.
"""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coorm_bridge.adapters.batch.estimate import estimate_starts
from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import WallClock, parse_platform
from coorm_bridge.core.batch import ClusterSnapshot, Job, JobState, Node
from coorm_bridge.core.model import (
    MAX_COUNT,
    MAX_DURATION,
    MAX_MIB,
    MAX_SEQ,
    MAX_TIME,
    Request,
)
from coorm_bridge.core.policy import Application, Policy
from coorm_bridge.core.profile import FOREVER, Profile
from coorm_bridge.core.states import AppState
from coorm_bridge.http.app import create_app
from coorm_bridge.protocol import MAX_BODY
from coorm_bridge.service.config import Config, ConfigError, LimitSettings, parse_config
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

TOKEN = "alice-token-0123456789"
PLATFORM = '[[cluster]]\nname = "c1"\nhosts = 8\n[[cluster]]\nname = "c2"\nhosts = 4\n'
HOSTILE = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def service(tmp_path):
    store = Store(tmp_path / "bridge.sqlite")
    # The API's bounds, not the site's limits: the longest duration is allowed (default: a week).
    config = Config(limits=LimitSettings(duration=MAX_DURATION))
    yield assemble(config, MockAdapter(parse_platform(PLATFORM), WallClock()), store)
    store.close()


@pytest.fixture
def bridge(service):
    return service.bridge


@pytest.fixture
def client(service):
    with TestClient(create_app(service, tokens={TOKEN: "alice"})) as client:
        yield client


@pytest.fixture
def sid(client):
    answer = client.post("/v1/sessions", json={"filter": {"clusters": ["c1"]}}, headers=AUTH)
    assert answer.status_code == 201, answer.text
    return answer.json()["session"]


AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {**AUTH, "Content-Type": "application/json"}


def stored(bridge):
    """Everything the store holds, to compare before and after a refused call."""
    store = bridge.store
    sessions = store.sessions()
    return (
        [row.model_dump() for row in sessions],
        {row.id: store.events(row.id) for row in sessions},
        store.placeholders(),
    )


def assert_refused(answer, *words):
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text)
    body = answer.json()
    assert set(body) == {"error", "detail"}, body
    for word in words:
        assert word in body["detail"], body


# -- the reproduced cases -----------------------------------------------------------------------


@pytest.mark.parametrize("duration", [2**62, 2**63, 10**30, MAX_DURATION + 1])
def test_a_duration_past_ten_years_is_refused_with_the_limit(client, bridge, sid, duration):
    before = stored(bridge)
    answer = client.put(
        f"/v1/sessions/{sid}/request", json={"nodes": {"c1": 1}, "duration": duration}, headers=AUTH
    )
    assert_refused(answer, "duration", str(MAX_DURATION))
    assert answer.status_code == 422
    assert stored(bridge) == before


def test_the_longest_duration_is_accepted_and_passes_run(client, bridge, service, sid):
    bridge.put_request("alice", sid, {"c1": 1}, MAX_DURATION)
    for cluster in ("c1", "c2"):
        service.loop.poll(cluster)
    assert service.loop.tick()
    assert bridge.store.session(sid).estimated_start is not None


@pytest.mark.parametrize("count", [MAX_COUNT + 1, 2**63, 10**30])
def test_a_host_count_past_a_million_is_refused_with_the_limit(client, bridge, sid, count):
    before = stored(bridge)
    answer = client.put(
        f"/v1/sessions/{sid}/request", json={"nodes": {"c1": count}, "duration": 60}, headers=AUTH
    )
    assert_refused(answer, "nodes.c1", str(MAX_COUNT))
    assert stored(bridge) == before


@pytest.mark.parametrize("after", [2**63, 2**64, 10**30, MAX_SEQ + 1])
def test_events_after_past_the_last_number_is_refused(client, sid, after):
    answer = client.get(f"/v1/sessions/{sid}/events", params={"after": str(after)}, headers=AUTH)
    assert_refused(answer, "after", str(MAX_SEQ))


def test_events_after_the_largest_number_is_an_empty_page(client, sid):
    answer = client.get(f"/v1/sessions/{sid}/events", params={"after": MAX_SEQ}, headers=AUTH)
    assert answer.status_code == 200
    assert answer.json() == {"events": []}


@pytest.mark.parametrize(
    ("key", "limit"),
    [("min_hosts", MAX_COUNT), ("min_ram_per_host_mib", MAX_MIB), ("min_total_ram_mib", MAX_MIB)],
)
def test_filter_numbers_are_bounded(client, bridge, key, limit):
    before = stored(bridge)
    answer = client.post("/v1/sessions", json={"filter": {key: limit + 1}}, headers=AUTH)
    assert_refused(answer, f"filter.{key}", str(limit))
    assert stored(bridge) == before


@pytest.mark.parametrize(
    ("table", "key", "value"),
    [
        ("policy", "fair_start", 10**30),
        ("policy", "fair_start", 86_401),
        ("policy", "interval", 1e300),
        ("placement", "horizon", 2**62),
        ("placement", "poll_interval", 3601.0),
    ],
)
def test_configuration_numbers_are_bounded(table, key, value):
    with pytest.raises(ConfigError, match=rf"site\.toml: {table}\.{key}: .*less than or equal"):
        parse_config(f"[{table}]\n{key} = {value}\n", source="site.toml")


# -- what the bounds guarantee --------------------------------------------------------------------


def test_no_sum_of_bounded_numbers_reaches_forever():
    assert MAX_TIME + MAX_DURATION < FOREVER
    assert FOREVER + MAX_DURATION < 2**63  # fitting_starts computes it in int64
    lows, highs = Profile(4).fitting_starts(4, MAX_DURATION, MAX_TIME)
    assert (lows.tolist(), highs.tolist()) == ([MAX_TIME], [FOREVER])


def test_a_start_that_would_end_after_year_9999_is_never():
    """A queue of ten-year requests pushes starts ever later: past the last one that can end
    by MAX_TIME, a request never fits, and no time the pass hands out is out of bounds."""
    now = MAX_TIME - 3 * MAX_DURATION - 10
    apps = [
        Application(
            id=f"a{k}",
            order=k + 1,
            clusters=("c1",),
            state=AppState.REQUEST_SENT,
            request=Request(nodes={"c1": 4}, duration=MAX_DURATION),
        )
        for k in range(5)
    ]
    plan = Policy().plan({"c1": Profile(4)}, apps, now)
    starts = [plan.outcomes[app.id].estimated_start for app in apps]
    assert starts == [now, now + MAX_DURATION, now + 2 * MAX_DURATION, None, None]
    for profile in plan.left.values():
        assert all(t <= MAX_TIME for t in profile.breakpoints)


def test_estimated_batch_starts_never_pass_year_9999():
    now = MAX_TIME - 2 * MAX_DURATION
    jobs = tuple(
        Job(id=str(k), state=JobState.PENDING, hosts=2, walltime=MAX_DURATION) for k in range(4)
    )
    shot = ClusterSnapshot(
        cluster="c", time=now, nodes=(Node(name="n0"), Node(name="n1")), jobs=jobs
    )
    got = [job.start for job in estimate_starts(shot).jobs]
    assert got == [now, now + MAX_DURATION, None, None]


def test_a_batch_job_ending_after_year_9999_is_refused():
    with pytest.raises(ValueError, match="9999"):
        Job(id="1", state=JobState.RUNNING, hosts=1, walltime=60, start=MAX_TIME - 59)


# -- hostile bodies, at random --------------------------------------------------------------------

JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
ANY_JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


#: Anything but a whole number in [low, high]: what a bounded integer field must refuse.
def not_between(low: int, high: int) -> st.SearchStrategy[object]:
    numbers = st.integers(max_value=low - 1) | st.integers(min_value=high + 1)
    edges = st.sampled_from([low - 1, high + 1, 2**62, 2**63, 2**64, 10**30, -(2**63)])
    others = ANY_JSON.filter(lambda v: isinstance(v, bool) or not isinstance(v, int))
    return numbers | edges | others | st.sampled_from([float(high), 1.5, math.nan, math.inf])


BAD_DURATION = not_between(1, MAX_DURATION)
BAD_COUNT = not_between(0, MAX_COUNT)
GOOD_DURATION = st.integers(1, MAX_DURATION)
GOOD_COUNT = st.integers(1, MAX_COUNT)
UNKNOWN_CLUSTER = st.text(max_size=70).filter(lambda name: name != "c1")


@st.composite
def hostile_requests(draw: st.DrawFn) -> dict[str, object]:
    """A request body with at least one thing wrong (the rest may be right)."""
    nodes: object = {"c1": draw(GOOD_COUNT)}
    body: dict[str, object] = {"nodes": nodes, "duration": draw(GOOD_DURATION)}
    flaw = draw(st.sampled_from(["duration", "count", "cluster", "many", "shape", "extra", "zero"]))
    if flaw == "duration":
        body["duration"] = draw(BAD_DURATION)
    elif flaw == "count":
        body["nodes"] = {"c1": draw(BAD_COUNT)}
    elif flaw == "cluster":
        body["nodes"] = {**body["nodes"], draw(UNKNOWN_CLUSTER): draw(GOOD_COUNT)}  # type: ignore[dict-item]
    elif flaw == "many":
        body["nodes"] = {f"x{k}": k for k in range(draw(st.integers(1000, 20000)))}
    elif flaw == "shape":
        key = draw(st.sampled_from(["nodes", "duration"]))
        body[key] = draw(ANY_JSON.filter(lambda v: not isinstance(v, int | dict)))
        if draw(st.booleans()):
            del body[key]
    elif flaw == "extra":
        body[draw(st.text(max_size=8).filter(lambda k: k not in body))] = draw(ANY_JSON)
    else:
        body["nodes"] = {"c1": 0}
    return body


NUMBER_KEYS = {
    "min_hosts": MAX_COUNT,
    "min_cores_per_host": MAX_COUNT,
    "min_ram_per_host_mib": MAX_MIB,
    "min_total_ram_mib": MAX_MIB,
    "min_scratch_per_host_mib": MAX_MIB,
}
BAD_NAME = (
    st.text(max_size=20).map(lambda s: s + "\x1b[2J")
    | st.sampled_from(["a\x00b", "\u202eevil", "x\u2066y", "tab\there", "\x7f", "\ud800"])
    | st.text(min_size=257, max_size=300)
) | ANY_JSON.filter(lambda v: v is not None and not isinstance(v, str))


@st.composite
def hostile_subscriptions(draw: st.DrawFn) -> dict[str, object]:
    body: dict[str, object] = {}
    if draw(st.booleans()):
        body["name"] = draw(st.text(st.characters(categories=("L", "N", "P")), max_size=20))
    flaw = draw(st.sampled_from(["number", "name", "clusters", "filter", "extra"]))
    if flaw == "number":
        key = draw(st.sampled_from(sorted(NUMBER_KEYS)))
        body["filter"] = {key: draw(not_between(0, NUMBER_KEYS[key]))}
    elif flaw == "name":
        body["name"] = draw(BAD_NAME)
    elif flaw == "clusters":
        bad = st.text(max_size=80).filter(lambda n: n not in ("c1", "c2"))
        body["filter"] = {"clusters": draw(st.lists(bad, min_size=1, max_size=5))}
    elif flaw == "filter":
        body["filter"] = draw(ANY_JSON.filter(lambda v: not isinstance(v, dict) and v is not None))
    else:
        body["filter"] = {draw(st.text(max_size=8).filter(lambda k: k not in NUMBER_KEYS)): 1}
    return body


def send(client, method, path, body):
    data = json.dumps(body, allow_nan=True).encode()  # NaN and Infinity: Python's JSON reads them
    if len(data) > MAX_BODY:
        data = data[: MAX_BODY + 1]
    return client.request(method, path, content=data, headers=JSON)


@HOSTILE
@given(body=hostile_requests())
def test_hostile_requests_are_refused_and_change_nothing(client, bridge, sid, body):
    before = stored(bridge)
    assert_refused(send(client, "PUT", f"/v1/sessions/{sid}/request", body))
    assert stored(bridge) == before


@HOSTILE
@given(body=hostile_subscriptions())
def test_hostile_subscriptions_are_refused_and_change_nothing(client, bridge, body):
    before = stored(bridge)
    assert_refused(send(client, "POST", "/v1/sessions", body))
    assert stored(bridge) == before


RAW = st.sampled_from(
    [
        b"[" * 30000,
        b'{"nodes": {"c1": 1}, "duration": 1e400}',
        b'{"nodes": {"c1": 1}, "duration": -1e400}',
        b'{"nodes": {"c1": 1e400}, "duration": 60}',
        b'{"nodes": {"c1": 1}, "duration": 9' + b"9" * 5000 + b"}",
        b'{"nodes": {"c1": 1}, "duration": "\\ud800"}',
        b'{"name": "\xff\xfe"}',
        b"\x00",
    ]
) | st.binary(max_size=64).filter(lambda data: not isinstance(_parsed(data), dict))


def _parsed(data: bytes) -> object:
    try:
        return json.loads(data)
    except ValueError:
        return None


@HOSTILE
@given(data=RAW, put=st.booleans())
def test_hostile_bytes_are_refused_and_change_nothing(client, bridge, sid, data, put):
    before = stored(bridge)
    path = f"/v1/sessions/{sid}/request" if put else "/v1/sessions"
    assert_refused(client.request("PUT" if put else "POST", path, content=data, headers=JSON))
    assert stored(bridge) == before


NOT_A_NUMBER = st.text("abxyz;!/[]{}", min_size=1, max_size=10)
BAD_QUERY = st.one_of(
    st.tuples(st.just("after"), st.integers(max_value=-1).map(str)),
    st.tuples(st.just("after"), st.integers(min_value=MAX_SEQ + 1).map(str)),
    st.tuples(st.just("after"), st.sampled_from(["1.5", "nan", "1e3", "true", "0x10"])),
    st.tuples(st.just("wait"), st.sampled_from(["nan", "inf", "-inf", "1e400", "61", "-0.5"])),
    st.tuples(st.sampled_from(["after", "wait"]), NOT_A_NUMBER),
)


@HOSTILE
@given(query=BAD_QUERY)
def test_hostile_event_queries_are_refused(client, sid, query):
    key, value = query
    answer = client.get(f"/v1/sessions/{sid}/events", params={key: value}, headers=AUTH)
    assert_refused(answer, key)
