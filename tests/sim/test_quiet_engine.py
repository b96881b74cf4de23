"""The quiet protocol over whole simulated runs: the launchers choose exactly what they choose
with the whole stream, for fewer bytes; and the reservation calls a run would cost are counted."""

from __future__ import annotations

import pytest

from coorm_bridge.sim.engine import Engine, RunResult
from coorm_bridge.sim.resources import paper_platform
from coorm_bridge.sim.scalability import FAIR_START, HOSTS, INTERVAL
from coorm_bridge.sim.workload import Workload, workload


def run(name: str, clusters: int, count: int, *, quiet: bool) -> RunResult:
    apps = workload(Workload(name), "nasa", 1, HOSTS)[:count]
    platform = paper_platform(clusters, HOSTS)
    return Engine(platform, apps, fair_start=FAIR_START, interval=INTERVAL, quiet=quiet).run()


@pytest.mark.parametrize(("name", "clusters", "count"), [("W0", 8, 50), ("W2", 4, 40)])
def test_every_choice_is_the_same_for_fewer_bytes(name, clusters, count):
    full, quiet = (run(name, clusters, count, quiet=q) for q in (False, True))

    def lives(result: RunResult) -> list[tuple[object, ...]]:
        return [(o.id, o.requests, o.start, o.end, o.request) for o in result.outcomes]

    assert lives(quiet) == lives(full)
    assert quiet.unheeded > 0
    assert full.unheeded == 0
    assert quiet.message_bytes < full.message_bytes
    # Each view change left unsent is an event less, unless it came with a new estimate.
    assert quiet.change_events == full.change_events - quiet.unheeded + quiet.estimates_alone
    assert quiet.reservation_calls == full.reservation_calls  # the same placements


def test_every_placeholder_is_created_and_deleted_once_settled():
    result = run("W0", 8, 60, quiet=True)
    calls = result.reservation_calls
    # Every application started, so every placeholder made was deleted at its ghost's end.
    assert all(o.end is not None for o in result.outcomes)
    assert calls["create"] == calls["delete"] > 0
    assert calls["create"] >= sum(len(o.request.nodes) for o in result.outcomes if o.request)
