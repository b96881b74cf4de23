"""Parse a real 10,000-job ``squeue --json`` (Slurm 22.05.8, 31.6 MB) with the Slurm parser.

Prints ``slurm_snapshot jobs=N seconds=S``: the best of 3 runs of
:func:`coorm_bridge.adapters.slurm.parse.parse_squeue` on the decompressed answer (decompression
is not timed: squeue's output arrives as plain bytes). Goal: under 0.5 s.
"""

from __future__ import annotations

import gzip
import time
from pathlib import Path

from coorm_bridge.adapters.slurm.parse import parse_squeue

SAMPLE = (
    Path(__file__).resolve().parent.parent / "tests" / "data" / "slurm" / "squeue_10000.json.gz"
)
NOW = 1795248800  # when the sample was recorded
RUNS = 3


def main() -> None:
    raw = gzip.decompress(SAMPLE.read_bytes())
    best = float("inf")
    jobs = 0
    for _ in range(RUNS):
        began = time.perf_counter()
        jobs = len(parse_squeue(raw, now=NOW))
        best = min(best, time.perf_counter() - began)
    print(f"slurm_snapshot jobs={jobs} seconds={best:.3f}")


if __name__ == "__main__":
    main()
