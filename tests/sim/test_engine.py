"""CooRM in virtual time: starts, ghosts and the fairness the paper's Fig. 7 is about, on
hand-built platforms whose schedules can be worked out by hand; and the equivalence with the
OAR-style baseline the paper's Fig. 6 relies on."""

import statistics

import pytest

from coorm_bridge.batchsim import ClusterSpec, PlatformSpec
from coorm_bridge.launchers.selectors.moldable import Moldable, MoldableParams
from coorm_bridge.sim.engine import Engine
from coorm_bridge.sim.oarsim import OarSim
from coorm_bridge.sim.resources import paper_platform
from coorm_bridge.sim.wire import Wire
from coorm_bridge.sim.workload import Kind, SimApp, Workload, workload


def one_cluster(hosts: int = 8) -> PlatformSpec:
    return PlatformSpec(start=0, cluster=(ClusterSpec(name="c1", hosts=hosts),))


def rigid(name: str, arrival: int, hosts: int, walltime: int, runs: int) -> SimApp:
    margin = walltime / runs
    params = MoldableParams(
        work=float(runs * hosts), serial_fraction=0.0, min_hosts=hosts, max_hosts=hosts,
        margin=margin,
    )  # fmt: skip
    return SimApp(name, arrival, Kind.RIGID, Moldable(params), margin)


def moldable(name: str, arrival: int, work: float) -> SimApp:
    params = MoldableParams(work=work, serial_fraction=0.0)
    return SimApp(name, arrival, Kind.MOLDABLE, Moldable(params), 1.0)


def test_requests_start_one_pass_after_they_are_sent_and_ghosts_hold_for_fair_start():
    apps = [rigid("a", 0, 8, 1000, 400), rigid("b", 1, 8, 100, 100)]
    result = Engine(one_cluster(), apps, fair_start=30).run()
    a, b = result.outcomes
    # a subscribes at 0, is shown its view and requests at once; the next pass (1 s later)
    # places and starts it.
    assert (a.start, a.end) == (1, 401)
    # b waits behind a's walltime, then behind its ghost once a is done early.
    assert b.start == 401 + 30
    assert result.ghost_host_seconds == 8 * 30
    assert result.used_host_seconds == 8 * 400 + 8 * 100
    assert result.computed_configurations >= 2
    assert result.message_bytes > 0


def test_a_ghost_never_outlives_the_allocation():
    apps = [rigid("a", 0, 8, 100, 95)]
    result = Engine(one_cluster(), apps, fair_start=60).run()
    assert result.ghost_host_seconds == 8 * 5  # held until its walltime's end, not 60 s


def fairness_case(fair_start: int, delay: int) -> dict[str, tuple[int | None, int | None]]:
    """An older moldable application m that would rather take 4 hosts freed early than wait for
    8, and a younger rigid one y that fits in those 4 hosts: the hosts go to whoever asks first
    once the ghost is gone."""
    apps = [
        rigid("r0", 0, 4, 3000, 300),  # done at about 301: its 4 hosts free 2,700 s early
        rigid("r1", 0, 4, 3000, 3000),
        moldable("m", 2, 8000.0),  # 8 hosts at 3000 (ends 4000) rather than 4 (5000)
        rigid("y", 3, 4, 1000, 1000),
    ]
    outcomes = Engine(one_cluster(), apps, fair_start=fair_start, delays={"m": delay}).run()
    return {o.id: (o.start, o.end) for o in outcomes.outcomes}


def test_an_adaptation_delay_longer_than_fair_start_lets_a_younger_application_take_the_hosts():
    quick = fairness_case(fair_start=5, delay=0)
    slow = fairness_case(fair_start=5, delay=60)
    m_quick, m_slow = quick["m"], slow["m"]
    # Without delay, m takes the 4 freed hosts as soon as the ghost is gone (before y).
    assert m_quick[0] == 301 + 5
    assert m_quick[0] < quick["y"][0]  # type: ignore[operator]
    # With a delay beyond fair-start, y (younger) backfilled into them when the ghost ended
    # (306), before m's new request came (361): m waits for y's end and ends 1,000 s later.
    assert slow["y"] == (306, 1306)
    assert m_slow == (1306, 3306)
    assert m_quick == (306, 2306)


def test_a_fair_start_longer_than_the_adaptation_delay_keeps_the_older_application_first():
    quick = fairness_case(fair_start=100, delay=0)
    slow = fairness_case(fair_start=100, delay=60)
    assert slow["m"] == quick["m"] == (401, 2401)
    assert slow["y"] == (2401, 3401)


@pytest.mark.parametrize("clusters", [1, 2])
def test_coorm_and_the_moldable_baseline_give_equivalent_schedules(clusters):
    """The paper compares CooRM with OAR because they schedule the same (FCFS, conservative
    backfilling, each job in the configuration that ends first): mean response times agree,
    while OAR is handed every configuration and CooRM's launchers compute far fewer."""
    apps = workload(Workload.W0, "nasa", 0, 128, size=60)
    platform = paper_platform(clusters)
    coorm = Engine(platform, apps).run()
    oar = OarSim(platform, apps).run()
    assert all(o.end is not None for o in coorm.outcomes + oar.outcomes)

    def response(outcomes):
        return statistics.fmean(o.end - o.arrival for o in outcomes)

    assert response(coorm.outcomes) == pytest.approx(response(oar.outcomes), rel=0.05)
    assert oar.computed_configurations > 10 * coorm.computed_configurations


def test_a_run_is_deterministic():
    apps = workload(Workload.W2, "nasa", 1, 128, size=30)
    first = Engine(paper_platform(2), apps).run()
    again = Engine(paper_platform(2), apps).run()
    assert first.outcomes == again.outcomes
    assert (first.message_bytes, first.computed_configurations) == (
        again.message_bytes,
        again.computed_configurations,
    )


def test_min_gain_cuts_the_cascade_of_requests_without_hurting_responses():
    """Launchers that re-request only for a real gain (``min_gain``, as ``coorm-launch``'s
    ``[selector] min_gain``) send far fewer requests on a loaded W2 platform, and so fewer
    bytes; every application still runs, and the mean response stays within 10%."""
    apps = workload(Workload.W2, "nasa", 0, 128, size=60)
    every = Engine(paper_platform(8), apps).run()
    sticky = Engine(paper_platform(8), apps, min_gain=600).run()
    assert all(o.end is not None for o in sticky.outcomes)

    def requests(result):
        return sum(o.requests for o in result.outcomes)

    def response(result):
        return statistics.fmean(o.end - o.arrival for o in result.outcomes)

    assert requests(sticky) < requests(every) / 2
    assert sticky.message_bytes < every.message_bytes * 0.7
    assert response(sticky) <= response(every) * 1.10


def test_change_events_are_counted_per_application_and_in_all(monkeypatch):
    """Every change event the engine sends (a view change, or a new estimate alone) is one
    call of ``Wire.change``: the run's count, the applications' counts and the calls agree,
    and those events' bytes are a part of the run's bytes."""
    calls = []
    original = Wire.change

    def counted(self, *args, **kwargs):
        calls.append(args)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Wire, "change", counted)
    apps = workload(Workload.W0, "nasa", 0, 128, size=30)
    result = Engine(paper_platform(2), apps).run()
    assert result.change_events == len(calls) > 0
    assert sum(o.change_events for o in result.outcomes) == result.change_events
    assert any(not changes for _, _, changes, _ in calls)  # estimates told alone are counted
    assert 0 < result.change_bytes < result.message_bytes
    assert result.change_events < result.messages
