"""One task of a parameter sweep (a malleable application: the launcher runs one task per host it
has, as many at once as it has hosts, and a task its hosts are taken from is run again later).

The task estimates the integral of u^x over [0, 1] (exactly 1 / (1 + x)) by Monte Carlo, with
``random.Random(seed)``: the same parameters give the same value. It works in slices spread over
``--seconds``, so a SIGTERM (a preemption) ends it promptly, with status 143 and no result. Only a
completed task writes its result, atomically, to ``$COORM_TASK_RESULT``.

Environment: ``COORM_TASK`` (the id), ``COORM_TASK_PARAMS`` (``{"x": 0.5, "seed": 3}``; optional
``samples``), ``COORM_TASK_RESULT``. It prints ``started`` once it can be stopped cleanly.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

SLICES = 40


def stop(signum: int, frame: FrameType | None) -> None:
    sys.exit(143)  # 128 + SIGTERM, as a shell reports a process it terminated


def main() -> int:
    signal.signal(signal.SIGTERM, stop)
    started = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="how long the task computes")
    args = parser.parse_args()
    task = os.environ["COORM_TASK"]
    params = json.loads(os.environ["COORM_TASK_PARAMS"])
    result = Path(os.environ["COORM_TASK_RESULT"])
    x, samples = float(params["x"]), int(params.get("samples", 200_000))
    if x <= -1:
        sys.exit(f"task {task}: x must be above -1, not {x}")
    print("started", flush=True)
    rng = random.Random(int(params.get("seed", 0)))  # noqa: S311 - a simulation, not a secret
    total = squares = 0.0
    for k in range(SLICES):
        for _ in range(samples // SLICES + (k < samples % SLICES)):
            value = (1.0 - rng.random()) ** x  # u in (0, 1]
            total += value
            squares += value * value
        time.sleep(max(0.0, started + args.seconds * (k + 1) / SLICES - time.time()))
    mean = total / samples
    error = math.sqrt(max(0.0, squares / samples - mean * mean) / samples)
    record = {
        "task": task,
        "params": params,
        "value": mean,
        "exact": 1.0 / (1.0 + x),
        "error": error,  # the estimate's standard error
        "samples": samples,
        "started": started,
        "ended": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    temp = result.with_name(f".{result.name}.{os.getpid()}.tmp")
    try:
        temp.write_text(json.dumps(record, indent=1))
        os.replace(temp, result)
    finally:
        temp.unlink(missing_ok=True)
    print(f"task {task}: {mean:.6f} (exact {record['exact']:.6f}, +- {error:.1e})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
