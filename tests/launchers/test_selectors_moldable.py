"""``moldable``: Amdahl run times, and the cluster and host count that end first."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coorm_bridge.core.model import MAX_COUNT, Interconnect, Request
from coorm_bridge.core.profile import Profile
from coorm_bridge.launchers.selectors import (
    SelectorParamsError,
    create_selector,
    installed,
    load_selector,
)
from coorm_bridge.launchers.selectors.moldable import Moldable
from tests.launchers.platforms import HOUR, NOW, infos, steps

NONE = Interconnect()


def moldable(**params: object) -> Moldable:
    return Moldable(Moldable.Params.model_validate(params))


def test_moldable_is_registered_under_its_name():
    assert "moldable" in installed()
    assert load_selector("moldable") is Moldable


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"work": math.nan, "serial_fraction": 0.1}, r"selector\.work: "),
        ({"work": 1e30, "serial_fraction": 0.1}, r"selector\.work: .*less than"),
        ({"work": 10.0, "serial_fraction": 1.5}, r"selector\.serial_fraction: "),
        (
            {"work": 10.0, "serial_fraction": 0.1, "min_hosts": 8, "max_hosts": 4},
            r"selector\.max_hosts: .*below min_hosts",
        ),
        (
            {"work": 10.0, "serial_fraction": 0.1, "max_hosts": MAX_COUNT + 1},
            r"selector\.max_hosts: .*less than or equal",
        ),
    ],
)
def test_bad_parameters_name_the_key(params, message):
    with pytest.raises(SelectorParamsError, match=message):
        create_selector("moldable", params)


def test_run_time_is_amdahl_on_the_cluster_speed():
    selector = moldable(work=1000.0, serial_fraction=0.1, margin=1.5)
    fast = infos({"c1": 2.0}, c1=8)["c1"]
    assert math.isclose(selector.run_time(fast, 4), 1000 / 2 * (0.1 + 0.9 / 4))
    assert selector.duration(fast, 4) == math.ceil(1000 / 2 * (0.1 + 0.9 / 4) * 1.5)


def test_fewer_hosts_now_beat_more_hosts_much_later():
    # 10 h of work, 5% serial: 4 hosts end in about 2.9 h, 16 hosts in 1.1 h but only in 10 h.
    selector = moldable(work=10 * HOUR, serial_fraction=0.05)
    view = {"c1": steps((0, 4), (10 * HOUR, 16))}
    request = selector.select(infos(c1=16), NONE, view, NOW)
    assert request == Request(nodes={"c1": 4}, duration=math.ceil(10 * HOUR * (0.05 + 0.95 / 4)))


def test_more_hosts_soon_beat_fewer_hosts_now():
    selector = moldable(work=10 * HOUR, serial_fraction=0.05)
    view = {"c1": steps((0, 4), (600, 16))}
    request = selector.select(infos(c1=16), NONE, view, NOW)
    assert request is not None
    assert dict(request.nodes) == {"c1": 16}


def test_hosts_taken_in_the_middle_of_the_run_are_not_counted_on():
    # 8 hosts are free now, but only 2 from the 30th minute: a long run cannot use 8.
    selector = moldable(work=8 * HOUR, serial_fraction=0.0)
    view = {"c1": steps((0, 8), (1800, 2), (20 * HOUR, 8))}
    request = selector.select(infos(c1=8), NONE, view, NOW)
    assert request == Request(nodes={"c1": 2}, duration=4 * HOUR)


def test_the_faster_cluster_wins_and_the_allowed_list_is_obeyed():
    clusters = infos({"fast": 2.0}, fast=8, slow=8)
    view = {"fast": Profile.constant(8), "slow": Profile.constant(8)}
    chosen = moldable(work=HOUR, serial_fraction=0.1).select(clusters, NONE, view, NOW)
    assert chosen is not None
    assert list(chosen.nodes) == ["fast"]
    only_slow = moldable(work=HOUR, serial_fraction=0.1, clusters=["slow"])
    chosen = only_slow.select(clusters, NONE, view, NOW)
    assert chosen is not None
    assert list(chosen.nodes) == ["slow"]


def test_host_bounds_are_obeyed_and_ties_go_to_fewer_hosts():
    clusters = infos(c1=64)
    view = {"c1": Profile.constant(64)}
    bounded = moldable(work=HOUR, serial_fraction=0.0, max_hosts=10)
    assert bounded.select(clusters, NONE, view, NOW) == Request(nodes={"c1": 10}, duration=360)
    serial = moldable(work=HOUR, serial_fraction=1.0, min_hosts=3)
    assert serial.select(clusters, NONE, view, NOW) == Request(nodes={"c1": 3}, duration=HOUR)


@st.composite
def views(draw: st.DrawFn) -> tuple[dict, dict]:
    names = [f"c{i}" for i in range(draw(st.integers(1, 3)))]
    hosts = {name: draw(st.integers(1, 12)) for name in names}
    speeds = {name: draw(st.sampled_from([0.5, 1.0, 1.7])) for name in names}
    view = {}
    for name in names:
        t = NOW - draw(st.integers(0, 100))
        pairs = []
        for _ in range(draw(st.integers(1, 8))):
            pairs.append((t, draw(st.integers(0, hosts[name]))))
            t += draw(st.integers(1, 3 * HOUR))
        view[name] = Profile.from_steps(pairs)
    return infos(speeds, **hosts), view


@given(
    views(),
    st.floats(60, 100 * HOUR),
    st.floats(0, 1),
    st.integers(1, 6),
    st.integers(0, 6),
)
def test_the_choice_ends_first_of_every_cluster_and_host_count(case, work, f, low, extra):
    """Only the profile's levels are tried; every count on every cluster is, here."""
    clusters, view = case
    selector = moldable(work=work, serial_fraction=f, min_hosts=low, max_hosts=low + extra)
    best = None
    for name, info in clusters.items():
        for hosts in range(low, min(info.hosts, low + extra) + 1):
            duration = selector.duration(info, hosts)
            start = view[name].earliest_fit(hosts, duration, NOW)
            if start is not None and (best is None or start + duration < best):
                best = start + duration
    request = selector.select(clusters, NONE, view, NOW)
    if best is None:
        assert request is None
        return
    assert request is not None
    ((name, hosts),) = request.nodes.items()
    assert request.duration == selector.duration(clusters[name], hosts)
    assert view[name].earliest_fit(hosts, request.duration, NOW) + request.duration == best


def test_a_view_with_nothing_usable_is_none():
    selector = moldable(work=10.0, serial_fraction=0.0, min_hosts=3)
    clusters = infos(c1=2, c2=8)
    view = {"c1": Profile.constant(2), "c2": Profile.constant(2)}
    assert selector.select(clusters, NONE, view, NOW) is None
    assert selector.select(clusters, NONE, {"c3": Profile.constant(8)}, NOW) is None
    # A cluster in the view the launcher knows nothing about is not used either.
    assert selector.select({}, NONE, {"c2": Profile.constant(8)}, NOW) is None
