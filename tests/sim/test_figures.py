"""How the experiments' tables and figures order their groups: numbers by value, so that a
legend reads delay 2, 5, 10, 30, 60 s and a box plot 1 to 12 clusters in order."""

from __future__ import annotations

from coorm_bridge.sim.figures import group


def test_groups_come_in_numeric_order_then_text():
    rows = [{"delay": d, "series": s} for d in (60, 10, 2, 5, 30) for s in ("oar", "coorm")]
    assert list(group(rows, "delay")) == [(2,), (5,), (10,), (30,), (60,)]
    pairs = list(group(rows, "series", "delay"))
    assert pairs[:2] == [("coorm", 2), ("coorm", 5)]
    assert pairs[-1] == ("oar", 60)
    assert len(group(rows, "delay")[(10,)]) == 2
