"""CooRMv2's model and policy, rule by rule (the slides' "Scheduling Algorithm" and "High Level
Operations"): CBF in subscription order, equi-partitioning, announced and spontaneous updates,
co-allocation and preemptions. The brute-force twin is in test_policy_v2_twin.py."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from coorm_bridge.core.equipartition import equipartition, water_fill
from coorm_bridge.core.policy_v2 import Preemption, RequestDecision, plan
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.typed import EvolvingApplication, RequestRow, TypedRequest

NOW = 1_000


def row(rid: str, hosts: int, duration: int, kind: str = "non-preemptible", **kw) -> RequestRow:
    """A request row; ``kw`` may hold the request's cluster and relation and the row's fields."""
    request = {k: kw.pop(k) for k in ("cluster", "related_to", "related_how") if k in kw}
    request.setdefault("cluster", "c")
    return RequestRow(
        request=TypedRequest(id=rid, hosts=hosts, duration=duration, type=kind, **request),
        **kw,
    )


def started(rid: str, hosts: int, duration: int, kind: str = "non-preemptible", **kw):
    return row(rid, hosts, duration, kind, status="started", started_at=kw.pop("at", NOW),
               held=kw.pop("held", hosts), **kw)  # fmt: skip


def app(aid: str, order: int, *rows: RequestRow, clusters=("c",)) -> EvolvingApplication:
    return EvolvingApplication(id=aid, order=order, clusters=clusters, requests=rows)


def free(hosts: int, **more: int) -> dict[str, Profile]:
    return {"c": Profile.constant(hosts), **{c: Profile.constant(n) for c, n in more.items()}}


# -- the model ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        ((row("a", 1, 10), row("a", 2, 10)), "used twice"),
        ((row("a", 1, 10, related_to="b", related_how="next"),), "not an earlier request"),
        (
            (row("a", 1, 10), row("b", 1, 10, cluster="d", related_to="a", related_how="next")),
            "on another cluster",
        ),
        ((row("a", 1, 10, cluster="elsewhere"),), "does not see"),
        ((started("p", 4, 10), started("a", 1, 10, inside="p")), "not an earlier pre-allocation"),
    ],
)
def test_bad_applications_are_refused_with_the_reason(rows, why):
    with pytest.raises(ValidationError, match=why):
        app("x", 0, *rows, clusters=("c", "d"))


def test_bad_requests_are_refused_with_the_reason():
    with pytest.raises(ValidationError, match="both or neither"):
        TypedRequest(id="a", cluster="c", hosts=1, duration=1, related_to="b")
    with pytest.raises(ValidationError, match="itself"):
        TypedRequest(id="a", cluster="c", hosts=1, duration=1, related_to="a", related_how="next")
    with pytest.raises(ValidationError):
        TypedRequest(id="a", cluster="c", hosts=0, duration=1)
    with pytest.raises(ValidationError):
        TypedRequest(id="a", cluster="c", hosts=1, duration=10**12)
    with pytest.raises(ValidationError, match="start time"):
        RequestRow(request=TypedRequest(id="a", cluster="c", hosts=1, duration=1), status="started")
    with pytest.raises(ValidationError, match="holds 3 hosts but asked for 2"):
        started("a", 2, 10, held=3)


# -- equi-partitioning -------------------------------------------------------------------------


def test_equal_shares_with_remainder_to_the_earliest_subscribers():
    shares = water_fill(np.array([10]), np.array([[9], [9], [9]]))
    assert shares[:, 0].tolist() == [4, 3, 3]


def test_what_an_application_asking_less_leaves_goes_to_the_others():
    shares = water_fill(np.array([10]), np.array([[1], [9], [9]]))
    assert shares[:, 0].tolist() == [1, 5, 4]
    assert water_fill(np.array([10]), np.array([[2], [3]]))[:, 0].tolist() == [2, 3]


def test_shares_follow_each_time_segment():
    pool = Profile(10, [50], [4])
    shares = equipartition(pool, {"a": Profile.constant(8), "b": Profile(0, [20], [8])})
    assert shares["a"] == Profile(8, [20, 50], [5, 2])
    assert shares["b"] == Profile(0, [20, 50], [5, 2])


# -- conservative backfilling ----------------------------------------------------------------


def test_cbf_places_by_subscription_order_and_backfills():
    apps = [
        app("late", 5, row("l", 2, 10)),
        app("early", 1, row("e", 4, 100)),
        app("small", 9, row("s", 1, 50)),
    ]
    result = plan(free(5), apps, NOW, 30)
    assert result.decisions["early"]["e"] == RequestDecision(NOW, True)
    assert result.decisions["late"]["l"].estimated_start == NOW + 100
    assert result.decisions["small"]["s"] == RequestDecision(NOW, True)  # backfilled
    assert result.views["late"].non_preemptible["c"].truncated(NOW) == Profile(1, [NOW + 100], [5])
    assert result.to_start == (("early", "e"), ("small", "s"))


def test_coalloc_requests_start_together_at_their_earliest_common_start():
    capacity = {"c": Profile(4, [NOW + 50], [0]), "d": Profile(0, [NOW + 20], [4])}
    capacity["c"] = Profile(4, [NOW + 50, NOW + 80], [0, 4])
    a = app(
        "a", 0, row("x", 2, 10), row("y", 2, 10, cluster="d", related_to="x",
                                     related_how="coalloc"), clusters=("c", "d")
    )  # fmt: skip
    result = plan(capacity, [a], NOW, 0)
    assert result.decisions["a"]["x"].estimated_start == NOW + 20
    assert result.decisions["a"]["y"].estimated_start == NOW + 20


def test_a_ghost_holds_a_done_requests_hosts_for_fair_start():
    done = row("r", 4, 100, status="done", started_at=NOW - 10, held=4, done_at=NOW - 5)
    result = plan(free(4), [app("a", 0, done), app("b", 1, row("s", 4, 10))], NOW, 30)
    assert result.decisions["b"]["s"].estimated_start == NOW + 25


# -- announced updates (NEXT) ------------------------------------------------------------------


def test_next_request_is_guaranteed_against_an_earlier_applications_later_request():
    """The AMR announces it grows from 4 to 6 hosts when its running request ends; an earlier
    subscriber's request sent after the announcement does not take the hosts."""
    amr = app("amr", 5, started("r", 4, 100), row("n", 6, 50, related_to="r", related_how="next"))
    earlier = app("early", 1, row("e", 6, 200))
    result = plan(free(8), [amr, earlier], NOW, 30)
    assert result.decisions["amr"]["n"] == RequestDecision(NOW + 100, False)
    assert result.decisions["early"]["e"].estimated_start == NOW + 150
    without = plan(free(8), [amr.model_copy(update={"requests": amr.requests[:1]}), earlier],
                   NOW, 30)  # fmt: skip
    assert without.decisions["early"]["e"].estimated_start == NOW + 100  # the 4 hosts freed


def test_next_request_takes_over_a_done_requests_ghost():
    done = row("r", 4, 100, status="done", started_at=NOW - 10, held=4, done_at=NOW)
    amr = app("amr", 0, done, row("n", 4, 50, related_to="r", related_how="next"))
    result = plan(free(4), [amr], NOW, 30)
    assert result.decisions["amr"]["n"] == RequestDecision(NOW, True)


def test_next_request_that_cannot_fit_at_the_end_is_backfilled():
    amr = app("amr", 0, started("r", 2, 100), row("n", 6, 50, related_to="r", related_how="next"))
    capacity = {"c": Profile(8, [NOW + 120], [0])}
    capacity["c"] = Profile(8, [NOW + 90, NOW + 200], [4, 8])
    result = plan(capacity, [amr], NOW, 0)
    assert result.decisions["amr"]["n"].estimated_start == NOW + 200


# -- spontaneous updates -----------------------------------------------------------------------


def test_spontaneous_update_starts_at_once_inside_a_started_pre_allocation():
    amr = app(
        "amr", 1, started("pa", 6, 1000, "pre-allocation"),
        started("np", 2, 1000, inside="pa"), row("grow", 4, 100)
    )  # fmt: skip
    other = app("other", 0, row("o", 10, 500))
    result = plan(free(10), [other, amr], NOW, 30)
    assert result.decisions["amr"]["grow"] == RequestDecision(NOW, True, "pa")
    without = plan(free(10), [other, amr.model_copy(update={"requests": amr.requests[:2]})],
                   NOW, 30)  # fmt: skip
    assert result.left == without.left  # it took nothing more


def test_spontaneous_update_past_the_pre_allocation_is_only_backfilled():
    amr = app(
        "amr", 1, started("pa", 6, 1000, "pre-allocation"),
        started("np", 2, 1000, inside="pa"), row("grow", 5, 100)
    )  # fmt: skip
    result = plan(free(8), [app("other", 0, row("o", 2, 500)), amr], NOW, 30)
    assert result.decisions["amr"]["grow"] == RequestDecision(NOW + 1000, False)


def test_no_spontaneous_update_without_a_started_pre_allocation():
    amr = app("amr", 1, row("pa", 6, 1000, "pre-allocation"), row("grow", 2, 100))
    result = plan(free(6), [amr], NOW, 30)
    assert result.decisions["amr"]["pa"] == RequestDecision(NOW, True)
    assert result.decisions["amr"]["grow"] == RequestDecision(NOW + 1000, False)


# -- the preemptible view ----------------------------------------------------------------------


def test_preemptible_requests_share_idle_hosts_and_unused_pre_allocations():
    amr = app("amr", 0, started("pa", 6, 1000, "pre-allocation"), started("np", 2, 1000,
              inside="pa"), row("p", 8, 100, "preemptible"))  # fmt: skip
    psa = app("psa", 1, row("q", 8, 100, "preemptible"))
    result = plan(free(10), [amr, psa], NOW, 30)
    assert result.pool["c"].value_at(NOW) == 8  # 4 idle + 4 unused in the pre-allocation
    assert result.views["amr"].preemptible["c"].value_at(NOW) == 4
    assert result.views["psa"].preemptible["c"].value_at(NOW) == 4
    assert result.decisions["psa"]["q"].starts_now is False


def test_preemption_deadline_when_a_local_jobs_predicted_start_closes_a_hole():
    capacity = {"c": Profile(10, [NOW + 50], [2])}  # a local job is predicted at NOW + 50
    psa = app("psa", 0, started("a", 3, 500, "preemptible", at=NOW - 10),
              started("b", 5, 500, "preemptible", at=NOW - 5))  # fmt: skip
    result = plan(capacity, [psa], NOW, 30)
    assert result.preemptions["psa"] == (Preemption("b", 5, NOW + 50), Preemption("a", 1, NOW + 50))


def test_waiting_preemptible_request_starts_when_its_share_covers_it():
    psa = app("psa", 0, row("a", 3, 100, "preemptible"), row("b", 6, 100, "preemptible"))
    result = plan({"c": Profile(8, [NOW + 300], [20])}, [psa], NOW, 30)
    assert result.decisions["psa"]["a"] == RequestDecision(NOW, True)
    assert result.decisions["psa"]["b"] == RequestDecision(NOW + 100, False)  # a gave them
    assert result.to_start == (("psa", "a"),)


def test_changed_names_only_applications_whose_views_changed():
    apps = [
        app("a", 0, row("x", 2, 10)),
        app("b", 1, row("y", 2, 10, cluster="d"), clusters=("d",)),
    ]
    first = plan(free(4, d=4), apps, NOW, 30)
    assert first.changed == ("a", "b")
    again = plan(free(4, d=4), apps, NOW, 30, previous=first)
    assert again.changed == ()
    moved = plan(free(4, d=3), apps, NOW, 30, previous=first)
    assert moved.changed == ("b",)
