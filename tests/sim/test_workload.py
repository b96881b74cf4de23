"""The paper's workloads W0-W3 from packs of a shipped trace."""

from collections import Counter

import pytest

from coorm_bridge.sim.workload import Kind, Workload, packs, trace_jobs, workload


def kinds(w: Workload, size: int = 200) -> dict[str, Kind]:
    return {app.id: app.kind for app in workload(w, "nasa", 2, 128, size)}


def test_w0_is_the_pack_with_a_fifth_moldable_arriving_one_per_second():
    apps = workload(Workload.W0, "nasa", 2, 128)
    assert [a.arrival for a in apps] == list(range(200))
    count = Counter(a.kind for a in apps)
    assert count[Kind.CEM] == 0
    assert 25 <= count[Kind.MOLDABLE] <= 55  # 20% of 200, drawn
    jobs = trace_jobs("nasa", 128)[400:600]
    rigid = [a for a in apps if a.kind is Kind.RIGID]
    # A rigid job asks for the trace's host count, whatever the cluster.
    for app in rigid[:20]:
        job = jobs[int(app.id[1:])]
        assert app.selector.params.min_hosts == app.selector.params.max_hosts == job.hosts  # type: ignore[attr-defined]


def test_w1_adds_one_cem_w2_replaces_half_w3_all_and_the_rest_stays_w0s():
    w0, w1, w2, w3 = (kinds(w) for w in Workload)
    assert len(w1) == 201
    assert Counter(w1.values())[Kind.CEM] == 1
    assert {k: v for k, v in w1.items() if v is not Kind.CEM} == w0
    assert Counter(w2.values())[Kind.CEM] == 100
    assert all(w0[k] is v for k, v in w2.items() if v is not Kind.CEM)
    assert set(w3.values()) == {Kind.CEM}


def test_applications_ask_for_more_time_than_they_run():
    apps = workload(Workload.W0, "nasa", 0, 128)
    margins = [a.margin for a in apps]
    assert min(margins) >= 1.0
    assert max(margins) > 1.5
    assert all(a.run_time(3000) <= 3000 for a in apps)


def test_packs_are_bounded_by_the_trace():
    assert packs("nasa", 128) == len(trace_jobs("nasa", 128)) // 200
    with pytest.raises(ValueError, match="packs 0 to"):
        workload(Workload.W0, "lublin", packs("lublin", 128), 128)
