"""How the experiments' tables and figures order their groups: numbers by value, so that a
legend reads delay 2, 5, 10, 30, 60 s and a box plot 1 to 12 clusters in order; tables read
back; medians drawn so that each one shows."""

from __future__ import annotations

from coorm_bridge.sim import scalability
from coorm_bridge.sim.figures import (
    boxes,
    group,
    mark_medians,
    pyplot,
    read_csv,
    summarize,
    write_csv,
)


def test_groups_come_in_numeric_order_then_text():
    rows = [{"delay": d, "series": s} for d in (60, 10, 2, 5, 30) for s in ("oar", "coorm")]
    assert list(group(rows, "delay")) == [(2,), (5,), (10,), (30,), (60,)]
    pairs = list(group(rows, "series", "delay"))
    assert pairs[:2] == [("coorm", 2), ("coorm", 5)]
    assert pairs[-1] == ("oar", 60)
    assert len(group(rows, "delay")[(10,)]) == 2


def test_a_table_read_back_has_its_numbers_and_empty_cells(tmp_path):
    rows = [{"name": "W0", "clusters": 8, "cpu": 3.5279, "share": None}]
    write_csv(tmp_path / "t.csv", rows)
    assert read_csv(tmp_path / "t.csv") == rows


def test_every_box_shows_its_median_as_a_marker_even_when_flat():
    plt = pyplot()
    figure, axis = plt.subplots()
    series = {"spread": {1: (1.0, 2.0, 3.0, 4.0, 5.0)}, "flat": {1: (7.0, 7.0, 7.0, 7.0, 7.0)}}
    boxes(axis, series, title="t", ylabel="y")
    marks = [c for c in axis.collections if len(c.get_offsets())]
    assert sorted(float(y) for c in marks for _, y in c.get_offsets()) == [3.0, 7.0]
    assert all(c.get_zorder() > 2 for c in marks)  # above the boxes and whiskers
    plt.close(figure)


def test_labelled_medians_write_their_values():
    plt = pyplot()
    figure, axis = plt.subplots()
    mark_medians(axis, [1, 2], [5.358, 3068.2], labels=True)
    assert [text.get_text() for text in axis.texts] == ["5.36", "3,068"]
    plt.close(figure)


def test_the_scalability_figure_is_drawn_from_its_summary_alone(tmp_path):
    rows = [
        {"scheduler": s, "workload": "W0", "clusters": n, "computed_configurations": c,
         "cpu_schedule_s": 0.5 * c, "message_bytes": 1000 * c}
        for s in ("coorm", "oar") for n in (1, 2) for c in (10, 20, 40)
    ]  # fmt: skip
    metrics = ["computed_configurations", "cpu_schedule_s", "message_bytes"]
    write_csv(
        tmp_path / "summary.csv", summarize(rows, ["scheduler", "workload", "clusters"], metrics)
    )
    drawn = scalability.figure(read_csv(tmp_path / "summary.csv"), tmp_path / "scalability.png")
    assert drawn.read_bytes().startswith(b"\x89PNG")
