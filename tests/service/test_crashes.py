"""Random crashes during random sessions never give one host to two applications.

In-process, on the mock platform with a virtual clock: the platform stands for a real batch
system (it outlives the bridge), the store is the bridge's file. A crash drops the bridge and
everything it had in memory, at a random moment: between two steps, or in the middle of one, just
before a state change was written (after the batch system was called). A new bridge on the same
store and platform reconciles, as the daemon does at start, and goes on.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import VirtualClock, parse_platform
from coorm_bridge.core.model import Filter
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.core.states import AppState
from coorm_bridge.service.config import Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store
from tests.profiles import fewer

T0 = 1_000_000
PLATFORM = (
    f'start = {T0}\n[[cluster]]\nname = "c1"\nhosts = 6\n[[cluster]]\nname = "c2"\nhosts = 4\n'
)
CONFIG = Config(
    policy=PolicyConfig(interval=1.0, fair_start=3),
    placement=PlacementSettings(horizon=60, poll_interval=5.0, hold_first=1),
    limits=LimitSettings(held_share=1.0),  # one user may hold every host (default: half)
)


class Crash(BaseException):
    """The process dies here (nothing catches a BaseException the bridge does not expect)."""


apps = st.lists(
    st.tuples(
        st.sampled_from([{"c1": 1}, {"c1": 3}, {"c2": 2}, {"c1": 2, "c2": 1}, {"c1": 4, "c2": 4}]),
        st.integers(5, 40),  # duration
        st.integers(1, 30),  # runs this long before done (longer: killed at its end)
        st.integers(0, 20),  # arrives at this step
    ),
    min_size=2,
    max_size=8,
)
crashes = st.lists(
    st.tuples(
        st.integers(1, 80),
        st.booleans(),  # in the middle of a step
        st.integers(0, 3),  # how many placeholders the batch system lost meanwhile
    ),
    max_size=6,
)


@settings(  # each example runs a bridge and its store for 100 steps, crashing it
    max_examples=fewer(30), suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(apps=apps, crashes=crashes)
def test_random_crashes_never_give_a_host_to_two_applications(tmp_path_factory, apps, crashes):
    folder = tmp_path_factory.mktemp("crash")
    adapter = MockAdapter(parse_platform(PLATFORM), VirtualClock(T0))
    store = Store(folder / "bridge.sqlite")
    service = assemble(CONFIG, adapter, store)
    bridge, loop = service.bridge, service.loop
    when = {step: midway for step, midway, _ in crashes}
    lose = {step: lost for step, _, lost in crashes}
    sessions: dict[str, tuple[int, int]] = {}  # session -> (duration, runs)
    try:
        for step in range(1, 100):
            now = T0 + step
            for index, (nodes, duration, runs, arrives) in enumerate(apps):
                if arrives == step:
                    sid = bridge.subscribe(f"u{index}", Filter(), None).session
                    bridge.put_request(f"u{index}", sid, nodes, duration)
                    sessions[sid] = (duration, runs)
            for sid, (_, runs) in sessions.items():
                row = store.session(sid)
                if row.state is AppState.STARTED and row.started_at + runs <= now:
                    bridge.done(row.owner, sid)
            adapter.run_until(now)
            midway = when.get(step)
            try:
                if midway:
                    store.update_session = _dies(store.update_session)  # type: ignore[method-assign]
                for cluster in ("c1", "c2"):
                    loop.poll(cluster)
                loop.tick()
            except Crash:
                pass
            if step in when:  # the process died: a new one starts on the same store
                for placeholder in store.placeholders()[: lose[step]]:
                    # ...and the batch system lost some reservations (a controller's restart)
                    adapter.delete_reservation(placeholder.cluster, placeholder.name)
                store.close()
                store = Store(folder / "bridge.sqlite")
                service = assemble(CONFIG, adapter, store)
                bridge, loop = service.bridge, service.loop
                for cluster in ("c1", "c2"):
                    loop.poll(cluster)
                loop.reconcile()
            assert_no_host_is_given_twice(store)
    finally:
        store.close()


def _dies(update):
    """Store.update_session that kills the process the first time a session starts."""

    def update_or_die(session_id, **fields):
        if fields.get("state") is AppState.STARTED:
            raise Crash
        return update(session_id, **fields)

    return update_or_die


def assert_no_host_is_given_twice(store: Store) -> None:
    """Every host of every start event, held from its start to its ghost's or allocation's end:
    two applications never overlap on one host."""
    spans: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
    for row in store.sessions():
        starts = [e for e in store.events(row.id) if e.type == "start"]
        assert len(starts) <= 1, f"{row.id} started twice"
        if not starts:
            continue
        (start,) = starts
        end = start.end
        if row.done_at is not None:
            end = min(end, row.done_at + CONFIG.policy.fair_start)
        killed = [e for e in store.events(row.id) if e.type == "killed"]
        if killed:
            end = min(end, killed[0].time)
        for cluster, allocation in start.allocations.items():
            for host in allocation.hosts:
                spans.setdefault((cluster, host), []).append((start.time, end, row.id))
    for (cluster, host), held in spans.items():
        reach, holder = 0, ""
        for begin, end, sid in sorted(held):
            assert begin >= reach, f"{cluster}/{host}: {sid} from {begin}, {holder} until {reach}"
            if end > reach:
                reach, holder = end, sid
