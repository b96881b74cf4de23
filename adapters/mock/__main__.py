"""``python -m coorm_bridge.adapters.mock STATE_DIR``: what the simulated batch system holds now.

The mock's answer to ``scontrol show reservation`` and ``squeue``: the platform saved in a
daemon's state folder, replayed read-only up to its current time, printed as the JSON snapshot
the bridge would get (nodes, running and pending jobs, reservations with their hosts). It reads
while the daemon runs and never writes, so it shows what the platform holds without going
through the bridge that is being checked.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from coorm_bridge.batchsim import FILE_NAME, Journal, Site, VirtualClock, load_platform
from coorm_bridge.core.batch import AdapterError, Unavailable


def show(state_dir: Path, platform: Path | None) -> dict[str, object]:
    """The saved platform at its current time, as JSON-ready data."""
    with Journal(state_dir / FILE_NAME, readonly=True) as journal:
        now = journal.resume_time(time.time())
        if now is None:
            raise AdapterError(f"{journal.path}: no saved platform state here")
        site = Site(load_platform(platform), VirtualClock(now), journal=journal)
        clusters: dict[str, object] = {}
        for name in site.schedulers:
            try:
                clusters[name] = site.snapshot([name]).clusters[name].model_dump(mode="json")
            except Unavailable as error:
                clusters[name] = {"unavailable": str(error)}
        return {"time": now, "start": site.start, "calls": len(journal), "clusters": clusters}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m coorm_bridge.adapters.mock",
        description="Print what the simulated platform saved in a state folder holds now.",
    )
    parser.add_argument("state_dir", type=Path, help="the daemon's state folder")
    parser.add_argument(
        "--platform", type=Path, default=None, help="platform file (default: the packaged one)"
    )
    args = parser.parse_args(argv)
    try:
        data = show(args.state_dir, args.platform)
    except AdapterError as error:
        print(f"coorm-bridge mock: {error}", file=sys.stderr)
        return 1
    json.dump(data, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
