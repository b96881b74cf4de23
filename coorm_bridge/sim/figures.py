"""Shared pieces of the experiments' reports: statistics over runs, CSV tables, matplotlib setup.

matplotlib is imported only when a figure is drawn (it is the ``sim`` extra), with the Agg
backend: reports are written on machines without a screen, CI included.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from coorm_bridge.sim.experiment import Row, Value


class MissingPlotting(RuntimeError):
    """matplotlib is not installed."""


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend; a clear error when the extra is missing."""
    try:
        import matplotlib  # noqa: PLC0415 - only when drawing

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as error:
        raise MissingPlotting(
            "coorm-sim draws its figures with matplotlib: pip install 'coorm-bridge[sim]'"
        ) from error
    return plt


def save(figure: Any, path: Path) -> Path:
    """Lay out, write as PNG and free a figure (pyplot keeps every open one otherwise)."""
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    pyplot().close(figure)
    return path


def five(values: Sequence[float]) -> tuple[float, float, float, float, float]:
    """Minimum, quartiles and maximum (the paper's Fig. 6 statistics)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        v = ordered[0]
        return v, v, v, v, v
    q1, q2, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    return ordered[0], q1, q2, q3, ordered[-1]


def number(row: Row, key: str) -> float:
    value = row[key]
    assert isinstance(value, int | float), f"{key} is not a number: {value!r}"
    return float(value)


def group(rows: Iterable[Row], *keys: str) -> dict[tuple[Value, ...], list[Row]]:
    """Rows by the values of ``keys``, groups in sorted order: numbers by value (2 s before
    10 s), then everything else by its text."""
    found: dict[tuple[Value, ...], list[Row]] = {}
    for row in rows:
        found.setdefault(tuple(row[k] for k in keys), []).append(row)
    return dict(sorted(found.items(), key=lambda item: tuple(_order(v) for v in item[0])))


def _order(value: Value) -> tuple[int, float, str]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def write_csv(path: Path, rows: Sequence[Row]) -> Path:
    """``rows`` as CSV, columns in first-seen order."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)
    return path


def summarize(
    rows: Sequence[Row], keys: Sequence[str], metrics: Sequence[str], rounding: int = 4
) -> list[Row]:
    """Per group of ``keys``: count, then min, q1, median, q3, max of each metric."""
    table: list[Row] = []
    for values, members in group(rows, *keys).items():
        line: Row = dict(zip(keys, values, strict=True)) | {"runs": len(members)}
        for metric in metrics:
            low, q1, median, q3, high = five([number(r, metric) for r in members])
            for name, v in zip(
                ("min", "q1", "median", "q3", "max"), (low, q1, median, q3, high), strict=True
            ):
                line[f"{metric}_{name}"] = round(v, rounding)
        table.append(line)
    return table


#: One box of a box plot: minimum, first quartile, median, third quartile, maximum.
Five = tuple[float, float, float, float, float]

#: How a median is drawn on every figure: a white-filled marker with a dark edge above the box,
#: its whiskers and any other series, so that a box whose quartiles meet (all runs alike) or a
#: median that falls on a quartile still shows its median.
MEDIAN_STYLE: dict[str, Any] = {"facecolor": "white", "edgecolor": "black", "zorder": 5}


def mark_medians(
    axis: Any,
    positions: Sequence[float],
    medians: Sequence[float],
    *,
    marker: str = "D",
    size: float = 22,
    labels: bool = False,
) -> None:
    """Each median as a marker in :data:`MEDIAN_STYLE` (``labels``: its value written beside)."""
    axis.scatter(positions, medians, marker=marker, s=size, linewidths=0.9, **MEDIAN_STYLE)
    if not labels:
        return
    for x, median in zip(positions, medians, strict=True):
        axis.annotate(
            median_text(median),
            (x, median),
            xytext=(7, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
            zorder=6,
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.8, "lw": 0},
        )


def median_text(value: float) -> str:
    """A median as a label: thousands grouped from 100 on, three significant digits below."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def boxes(
    axis: Any,
    series: dict[str, dict[int, Five]],
    *,
    title: str,
    ylabel: str,
    log: bool = False,
) -> None:
    """One panel of Fig. 6: per series, min-quartiles-max boxes at each x (cluster count), each
    median a white marker (:func:`mark_medians`) so that it shows on a flat box too."""
    width = 0.8 / max(1, len(series))
    for k, (label, by_x) in enumerate(series.items()):
        xs = sorted(by_x)
        positions = [x - 0.4 + width * (k + 0.5) for x in xs]
        stats = [
            dict(zip(("whislo", "q1", "med", "q3", "whishi"), by_x[x], strict=True)) for x in xs
        ]
        parts = axis.bxp(
            stats,
            positions=positions,
            widths=width * 0.9,
            patch_artist=True,
            showfliers=False,
            medianprops={"color": "black", "linewidth": 1.2},
        )
        colour = f"C{k}"
        for patch in parts["boxes"]:
            patch.set_facecolor(colour)
            patch.set_alpha(0.6)
        mark_medians(axis, positions, [box["med"] for box in stats], marker="o", size=14)
        axis.plot([], [], color=colour, linewidth=6, alpha=0.6, label=label)
    xs = sorted({x for by_x in series.values() for x in by_x})
    axis.set_xticks(xs, [str(x) for x in xs])
    axis.set_xlabel("clusters")
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    if log:
        axis.set_yscale("log")
    axis.grid(True, alpha=0.3)


def read_csv(path: Path) -> list[Row]:
    """A table written by :func:`write_csv` read back: numbers as int or float, empty cells as
    None, anything else as text (to redraw a figure from a shipped summary)."""
    with path.open(newline="") as file:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(file)]


def _parse(text: str) -> Value:
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text
