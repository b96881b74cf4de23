"""An evolving MPI code, like adaptive mesh refinement: the hosts it needs change as it runs, in a
way it learns only by running (the CooRMv2 slides' AMR curve: the normalized data size rises to
about 3.8 times its start, then falls back).

The mesh covers [0, 1] with coarse cells that split (up to three levels) near a feature that
travels across it and grows then fades; a split or a merge happens where a pseudo-random function
of (seed, iteration, cell) lets it, so the mesh lags its target unpredictably. Every iteration
each rank updates its cells (a diffusion on the cells' chain, with halo values from its
neighbours, plus a source at the feature), refines and coarsens them, and the ranks sum their
cells; the ranks hold contiguous shares, rebalanced when one holds too many.

The launcher runs it in steps, each one ``mpirun`` on N ranks (one a host), with ``COORM_STEP``,
``COORM_STATE_DIR`` (kept across steps: the checkpoint), ``COORM_REPORT`` and ``COORM_RUN_DIR``.
A step resumes from the checkpoint (rank 0 loads it and spreads the cells over the N ranks, any
N) and runs at least one iteration, then until either:

- the mesh needs ceil(cells / cells_per_host) hosts, neither N nor what it needed when the step
  began (a launcher may give fewer hosts than asked): rank 0 writes the checkpoint and
  the report ``{"data_size": cells / cells_per_host, "cells": ..., "iteration": ...}``;
- the last iteration is done: rank 0 redoes the whole computation serially from the start,
  compares it cell by cell (``check``), writes ``amr.json`` (the checksum, the steps' history,
  the check) in the run directory and the report ``{"done": true, "check": "ok"|"failed"}``.

It exits 0 unless the check failed. Without a launcher: ``mpirun -np 1 python3 amr.py`` writes
in the current folder; run it again with ``-np`` ceil(data_size) until the report says done.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from mpi4py import MPI

Cell = tuple[int, int, float]  # level, index at that level, value
MASK = (1 << 64) - 1
MAX_LEVEL = 3
COARSE = 0.95  # coarse cells, as a fraction of --cells-per-host: the run starts on one host
WIDTH = 0.35  # the refined zone's half width when the feature is strongest
CHANCE = 0.5  # how often a cell may split or merge when the feature wants it to
DIFFUSION = 0.25
SOURCE, SOURCE_WIDTH = 0.02, 0.05
IMBALANCE = 1.2  # rebalance when a rank holds this many times the mean


def chance(seed: int, iteration: int, level: int, index: int) -> float:
    """A number in [0, 1) for this cell at this iteration (splitmix64): every process, any
    partition, agrees on it."""
    z = seed * 0x9E3779B97F4A7C15 + iteration * 0xBF58476D1CE4E5B9 + level * 0x94D049BB133111EB
    z = (z + index) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) / 2.0**64


def centre(progress: float) -> float:
    return 0.15 + 0.7 * progress


def target(x: float, progress: float) -> int:
    """The level the feature wants at x: deepest at its centre, deeper as it strengthens."""
    r = (x - centre(progress)) / WIDTH
    return math.floor(MAX_LEVEL * math.sin(math.pi * progress) * max(0.0, 1.0 - r * r) + 0.5)


def position(level: int, index: int, coarse: int) -> float:
    return (index + 0.5) / (coarse << level)


def advance(
    cells: list[Cell], left: float, right: float, progress: float, coarse: int
) -> list[Cell]:
    """One diffusion update of contiguous cells, ``left`` and ``right`` the halo values."""
    out: list[Cell] = []
    before = left
    for i, (level, index, u) in enumerate(cells):
        after = cells[i + 1][2] if i + 1 < len(cells) else right
        r = (position(level, index, coarse) - centre(progress)) / SOURCE_WIDTH
        heat = SOURCE * max(0.0, 1.0 - r * r)
        out.append((level, index, u + DIFFUSION * (before - 2.0 * u + after) + heat))
        before = u
    return out


def adapt(cells: list[Cell], seed: int, iteration: int, progress: float, coarse: int) -> list[Cell]:
    """Split cells below the feature's level, merge sibling pairs above it, one level at most,
    where chance() allows: a coarse cell's tree is always on one rank, so this is local."""
    out: list[Cell] = []
    i = 0
    while i < len(cells):
        level, index, u = cells[i]
        if level > 0 and index % 2 == 0 and i + 1 < len(cells) and cells[i + 1][:2] == (
            level, index + 1
        ):  # fmt: skip
            parent = (level - 1, index // 2)
            wanted = target(position(*parent, coarse), progress)
            if wanted < level and chance(seed, iteration, *parent) < CHANCE:
                out.append((*parent, (u + cells[i + 1][2]) / 2.0))
                i += 2
                continue
        wanted = target(position(level, index, coarse), progress)
        if level < MAX_LEVEL and wanted > level and chance(seed, iteration, level, index) < CHANCE:
            out += [(level + 1, 2 * index, u), (level + 1, 2 * index + 1, u)]
        else:
            out.append((level, index, u))
        i += 1
    return out


def initial(coarse: int) -> list[Cell]:
    """The coarse mesh, with a parabola on it."""
    cells = []
    for i in range(coarse):
        x = position(0, i, coarse)
        cells.append((0, i, 4.0 * x * (1.0 - x)))
    return cells


def iterate(cells: list[Cell], left: float, right: float, it: int, args: Any) -> list[Cell]:
    coarse = math.floor(COARSE * args.cells_per_host)
    progress = it / args.iterations
    return adapt(advance(cells, left, right, progress, coarse), args.seed, it, progress, coarse)


def partition(cells: list[Cell], ranks: int) -> list[list[Cell]]:
    """Contiguous shares of about equal size, cut between coarse cells' trees."""
    parts, start = [], 0
    for k in range(1, ranks):
        cut = max(start, round(k * len(cells) / ranks))
        while 0 < cut < len(cells) and cells[cut - 1][1] >> cells[cut - 1][0] == (
            cells[cut][1] >> cells[cut][0]
        ):
            cut += 1
        parts.append(cells[start:cut])
        start = cut
    return [*parts, cells[start:]]


def spread(comm: MPI.Comm, everything: list[Cell] | None) -> list[Cell]:
    """Rank 0's cells, shared out over the ranks."""
    parts = partition(everything, comm.Get_size()) if everything is not None else None
    return comm.scatter(parts, root=0)


def write_json(path: Path, data: object) -> None:
    """Write ``path`` atomically: a reader sees the old file or the whole new one."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(data))
    os.replace(temp, path)


def resume(checkpoint: Path, params: dict[str, int]) -> tuple[str | None, dict[str, Any]]:
    """Rank 0: the checkpoint's state (the initial one when there is none), or what is wrong."""
    if not checkpoint.exists():
        cells = initial(math.floor(COARSE * params["cells_per_host"]))
        return None, {"params": params, "iteration": 0, "history": [], "cells": cells}
    saved = json.loads(checkpoint.read_text())
    saved["cells"] = [(int(c[0]), int(c[1]), float(c[2])) for c in saved["cells"]]
    if saved["params"] != params:
        return f"amr: the checkpoint was made with {saved['params']}, not {params}", saved
    return None, saved


def run(comm: MPI.Comm, cells: list[Cell], it: int, args: Any) -> tuple[list[Cell], int, int]:
    """Iterate from ``it`` until the end or until the mesh needs another number of hosts; the
    cells, the iteration reached and the cells of all ranks."""
    rank, ranks = comm.Get_rank(), comm.Get_size()
    left_rank = rank - 1 if rank > 0 else MPI.PROC_NULL
    right_rank = rank + 1 if rank < ranks - 1 else MPI.PROC_NULL
    total = comm.allreduce(len(cells))
    # A step given fewer (or more) hosts than the mesh needed goes on while that need holds:
    # it stops when the need changes, not at every iteration.
    given_need = math.ceil(total / args.cells_per_host)
    while it < args.iterations:
        it += 1
        left = comm.sendrecv(cells[-1][2], dest=right_rank, source=left_rank)
        right = comm.sendrecv(cells[0][2], dest=left_rank, source=right_rank)
        cells = iterate(cells, left or 0.0, right or 0.0, it, args)  # None: no neighbour
        time.sleep(args.work * len(cells) / args.cells_per_host)
        counts = comm.allgather(len(cells))
        total = sum(counts)
        need = math.ceil(total / args.cells_per_host)
        if it < args.iterations and need not in (ranks, given_need):
            break
        if max(counts) > IMBALANCE * total / ranks:
            gathered = comm.gather(cells, root=0)
            cells = spread(comm, [c for part in gathered for c in part] if rank == 0 else None)
    return cells, it, total


def finish(everything: list[Cell], saved: dict[str, Any], args: Any) -> dict[str, Any]:
    """The results: the whole run redone serially from the start and compared cell by cell."""
    serial = initial(math.floor(COARSE * args.cells_per_host))
    for i in range(1, args.iterations + 1):
        serial = iterate(serial, 0.0, 0.0, i, args)
    same = len(serial) == len(everything) and all(
        a[:2] == b[:2] and math.isclose(a[2], b[2], rel_tol=1e-12, abs_tol=0.0)
        for a, b in zip(serial, everything, strict=True)
    )
    return {
        **saved["params"],
        "cells": len(everything),
        "checksum": math.fsum(c[2] for c in everything),
        "serial_checksum": math.fsum(c[2] for c in serial),
        "history": saved["history"],
        "check": "ok" if same else "failed",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cells-per-host", type=int, default=2000, help="the data one host holds")
    parser.add_argument("--work", type=float, default=0.1, help="seconds an iteration takes a "
                        "host holding --cells-per-host cells (slept, in proportion)")  # fmt: skip
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    step = int(os.environ.get("COORM_STEP", "1"))
    checkpoint = Path(os.environ.get("COORM_STATE_DIR", "amr-state")) / "checkpoint.json"
    params = {
        "iterations": args.iterations,
        "seed": args.seed,
        "cells_per_host": args.cells_per_host,
    }
    if math.floor(COARSE * args.cells_per_host) < 16 * ranks:
        too_many = f"amr: {ranks} ranks are too many for --cells-per-host {args.cells_per_host}"
        sys.exit(too_many if rank == 0 else 2)
    problem, saved = resume(checkpoint, params) if rank == 0 else (None, {"iteration": 0})
    problem, first = comm.bcast((problem, saved["iteration"]), root=0)
    if problem:
        sys.exit(problem if rank == 0 else 2)
    cells, it, total = run(comm, spread(comm, saved.get("cells")), first, args)
    gathered = comm.gather(cells, root=0)
    if rank != 0:
        return 0
    need = math.ceil(total / args.cells_per_host)
    print(f"amr step {step}: {ranks} ranks, iterations {first + 1}-{it}, {total} cells "
          f"({need} hosts' worth)", flush=True)  # fmt: skip
    entry = {"step": step, "ranks": ranks, "first": first + 1, "last": it, "cells": total}
    saved["history"].append(entry)
    saved["cells"] = [c for part in gathered for c in part]
    saved["iteration"] = it
    report = Path(os.environ.get("COORM_REPORT", "amr-report.json"))
    if it < args.iterations:
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        write_json(checkpoint, saved)
        data_size = total / args.cells_per_host
        write_json(report, {"data_size": data_size, "cells": total, "iteration": it})
        return 0
    results = finish(saved["cells"], saved, args)
    write_json(Path(os.environ.get("COORM_RUN_DIR", ".")) / "amr.json", results)
    write_json(report, {"done": True, "check": results["check"]})
    print(f"amr: done, checksum {results['checksum']!r}, check {results['check']}", flush=True)
    return 0 if results["check"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
