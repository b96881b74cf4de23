"""Mock platform restart cost: what a daemon on the mock pays at start to resume its platform.

The default platform (three clusters and their synthetic load) runs 7 simulated days with 1,000
journaled reservation operations (creations, updates, deletions, spread over the week, as the
bridge's placeholders would be); then the platform is resumed as the daemon's plug-in does it
(read the platform, check its identity, replay the journal up to the saved time). Prints:

    mock_restart days=D calls=N seconds=S

with S the wall-clock time of the resume alone, and for comparison the time to start the same
platform with nothing saved.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from coorm_bridge.adapters.mock.plugin import resume
from coorm_bridge.batchsim import FILE_NAME, Anchor, Journal, Site, VirtualClock, load_platform
from coorm_bridge.core.batch import Refused, ReservationSpec

START = 1_700_000_000


def record(path: Path, days: int, calls: int) -> int:
    """Run the default platform for ``days`` with ``calls`` journaled reservation operations;
    returns the simulated time it ends at."""
    site = Site(load_platform(), VirtualClock(START), journal=Journal(path))
    rng = random.Random(1)
    clusters = [c.name for c in site.clusters()]
    end = START + days * 86_400
    step = (end - START) // calls
    held: list[tuple[str, str, int, int]] = []
    made = 0
    while site.journal is not None and len(site.journal) < calls:
        site.controls.run_until(min(end - 1, START + made * step))
        now = site.now()
        held = [h for h in held if h[3] > now]
        try:
            if held and rng.random() < 0.3:
                cluster, name, start, stop = held.pop(rng.randrange(len(held)))
                site.delete_reservation(cluster, name)
            elif held and rng.random() < 0.4:
                cluster, name, start, stop = rng.choice(held)
                spec = ReservationSpec(
                    name=name, start=start, end=stop + 600, hosts=2, users=("alice",)
                )
                site.update_reservation(cluster, spec)
                held = [h if h[1] != name else (cluster, name, start, stop + 600) for h in held]
            else:
                cluster = rng.choice(clusters)
                start = now + rng.randint(60, 3600)
                stop = start + rng.randint(600, 4 * 3600)
                name = f"coorm-{made}-{cluster}"
                spec = ReservationSpec(
                    name=name, start=start, end=stop, hosts=rng.randint(1, 4), users=("alice",)
                )
                site.create_reservation(cluster, spec)
                held.append((cluster, name, start, stop))
        except Refused:
            pass
        made += 1
    site.controls.run_until(end)
    site.close()
    return end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / FILE_NAME
        end = record(path, args.days, args.calls)
        with Journal(path) as journal:  # as if the daemon had just stopped at the week's end
            journal.set_anchor(Anchor(time=end, wall=time.time(), speedup=1.0))
            calls = len(journal)

        begin = time.perf_counter()
        platform = resume(load_platform(), path, 1.0)
        seconds = time.perf_counter() - begin
        assert platform.now() >= end
        held = sum(len(s.reservations) for s in platform.snapshot().clusters.values())
        platform.close()

        begin = time.perf_counter()
        resume(load_platform(), Path(folder) / "fresh.sqlite", 1.0).close()
        fresh = time.perf_counter() - begin
    print(
        f"mock_restart days={args.days} calls={calls} seconds={seconds:.2f} "
        f"reservations_held={held} fresh_start_seconds={fresh:.2f}"
    )


if __name__ == "__main__":
    main()
