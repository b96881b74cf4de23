"""A moldable solver: its work divides over however many MPI ranks it is started with, one per
host the bridge granted, so that the same case takes less time on more hosts (what the moldable
selector's Amdahl model in moldable.toml says of it).

The case (``case.json``) is an integral with a known value: f(x) = 4 / (1 + x^2) over [0, 1] is
exactly pi. It is computed with the midpoint rule on the case's intervals; each rank takes one
contiguous share of them (shares differ by at most one interval), sums it, and rank 0 adds the
shares (an MPI reduction). The result is checked against pi within the rule's error bound
(h^2 / 3 here: |f''| <= 8 on [0, 1]), and the shares against the case (every interval counted
once): a share lost, doubled or wrong fails the run. Rank 0 writes ``<component>.json`` in the
run directory with every rank's share, host and time, the result and the check, and exits
non-zero when the check fails.

Run alone: ``mpirun -np 4 python3 solver.py --input case.json`` (``--intervals N`` overrides the
case's).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from mpi4py import MPI

#: Rounding the sum may add, beyond the midpoint rule's own error.
ROUNDING = 1e-13


def f(x: float) -> float:
    return 4.0 / (1.0 + x * x)


def share(intervals: int, rank: int, ranks: int) -> tuple[int, int]:
    """The first interval and the count of ``rank``'s share: contiguous, sizes within one."""
    base, extra = divmod(intervals, ranks)
    first = rank * base + min(rank, extra)
    return first, base + (1 if rank < extra else 0)


def partial(first: int, count: int, intervals: int) -> float:
    """The midpoint rule over intervals ``[first, first + count)`` of ``intervals``."""
    h = 1.0 / intervals
    return math.fsum(f((i + 0.5) * h) for i in range(first, first + count)) * h


def verify(
    shares: list[dict[str, float]], total: float, intervals: int
) -> tuple[bool, float, float]:
    """Whether the shares cover every interval exactly once and ``total`` is pi within the
    midpoint rule's bound; with the error and the bound."""
    covered = sorted((int(s["first"]), int(s["count"])) for s in shares)
    end = 0
    for first, count in covered:
        if first != end:
            return False, math.inf, 0.0
        end += count
    error = abs(total - math.pi)
    bound = 1.0 / (3.0 * intervals * intervals) + ROUNDING
    return end == intervals and error <= bound, error, bound


def granted_hosts() -> list[str]:
    """The hosts the bridge granted this job (coorm-launch's hostfile), if any."""
    hostfile = os.environ.get("COORM_HOSTFILE")
    if not hostfile:
        return []
    return [line.split()[0] for line in Path(hostfile).read_text().splitlines() if line.strip()]


def main() -> int:
    started = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=Path(__file__).with_name("case.json"))
    parser.add_argument("--intervals", type=int, default=None, help="instead of the case's")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    case = json.loads(args.input.read_text())
    intervals = int(args.intervals if args.intervals is not None else case["intervals"])
    first, count = share(intervals, rank, ranks)
    began = time.perf_counter()
    mine = partial(first, count, intervals)
    seconds = time.perf_counter() - began
    total = comm.reduce(mine, op=MPI.SUM, root=0)
    shares = comm.gather(
        {
            "rank": rank,
            "host": MPI.Get_processor_name(),
            "first": first,
            "count": count,
            "sum": mine,
            "seconds": seconds,
        },
        root=0,
    )
    if rank != 0:
        return 0
    ok, error, bound = verify(shares, total, intervals)
    me = os.environ.get("COORM_COMPONENT", "solver")
    report = {
        "component": me,
        "case": str(args.input),
        "started": started,
        "ranks": ranks,
        "hosts": granted_hosts(),
        "intervals": intervals,
        "shares": shares,
        "result": total,
        "error": error,
        "bound": bound,
        "ok": ok,
    }
    folder = Path(os.environ.get("COORM_RUN_DIR", "."))
    (folder / f"{me}.json").write_text(json.dumps(report, indent=1))
    slowest = max(s["seconds"] for s in shares)
    print(
        f"{me}: {intervals} intervals over {ranks} ranks ({slowest:.2f} s the slowest): "
        f"pi ~ {total:.15f}, error {error:.1e} (bound {bound:.1e}): "
        f"{'ok' if report['ok'] else 'WRONG'}"
    )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
