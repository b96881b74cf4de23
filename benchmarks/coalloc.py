"""Co-allocation over 3 clusters: the bridge's placeholders against WaitForAll, WTTE and VIOLA.

Runs ``coorm-sim coalloc``'s plan, every run and its report without the sweep (runs spread over
``--jobs`` processes; rows are merged in plan order, so the output does not depend on them) and
prints the medians per strategy. Takes the experiment's own options (``--seeds``, ``--hosts``,
``--duration``, ``--threshold``, ``--slack``, ``--horizon``, ``--lead``, ``--load``) and
``--quick``; figures and the summary CSV go to ``--out``.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from coorm_bridge.sim.experiment import Row, RunSpec, execute, experiment


def main() -> None:
    coalloc = experiment("coalloc")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    coalloc.add_arguments(parser)
    parser.add_argument("--quick", action="store_true", help="CI sizes")
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    parser.add_argument("--out", type=Path, default=Path("coalloc-out"))
    args = parser.parse_args()
    specs: list[RunSpec] = coalloc.plan(args)
    began = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows: list[Row] = [row for rows in pool.map(execute, specs) for row in rows]
    seconds = time.perf_counter() - began
    report = coalloc.report(rows, args.out)
    print("\n".join(report.summary))
    print(f"runs {len(specs)} seconds {seconds:.1f} files {' '.join(map(str, report.files))}")


if __name__ == "__main__":
    main()
