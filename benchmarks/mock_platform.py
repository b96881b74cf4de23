"""Mock platform replay cost (issue goal: 10,000 trace jobs over 4 clusters in under 10 s).

Four clusters, each replaying 2,500 jobs of a real trace (the NASA iPSC/860 log on 128 hosts and
the Lublin model on 256, each at two time scales so the four loads differ), run to completion on
a virtual clock. Prints:

    mock_replay jobs=N clusters=C seconds=S

with S the CPU time of the replay alone (building the platform excluded), and the simulated span.
"""

from __future__ import annotations

import argparse
import time

from coorm_bridge.batchsim import Site, VirtualClock, parse_platform, trace_path

DATA = trace_path("nasa").parent
START = 1_700_000_000

PLATFORM = """
start = {start}

[[cluster]]
name = "nasa1"
hosts = 128
[[cluster]]
name = "nasa2"
hosts = 128
[[cluster]]
name = "lublin1"
hosts = 256
[[cluster]]
name = "lublin2"
hosts = 256

[[load]]
kind = "swf"
cluster = "nasa1"
path = "NASA-iPSC-1993-3.1-cln.swf.gz"
max_jobs = {per}
[[load]]
kind = "swf"
cluster = "nasa2"
path = "NASA-iPSC-1993-3.1-cln.swf.gz"
time_scale = 0.8
max_jobs = {per}
[[load]]
kind = "swf"
cluster = "lublin1"
path = "lublin_256.swf.gz"
max_jobs = {per}
[[load]]
kind = "swf"
cluster = "lublin2"
path = "lublin_256.swf.gz"
time_scale = 0.8
max_jobs = {per}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="in all, over the 4 clusters")
    args = parser.parse_args()
    per = args.jobs // 4
    spec = parse_platform(PLATFORM.format(start=START, per=per), base_dir=DATA)
    clock = VirtualClock(START)
    site = Site(spec, clock)
    jobs = sum(len(s.records()) for s in site.schedulers.values())

    begin = time.process_time()
    events = 0
    while (due := site.controls.next_event_time()) is not None:
        site.controls.run_until(due)
        events += 1
    seconds = time.process_time() - begin

    records = [r for s in site.schedulers.values() for r in s.records()]
    finished = sum(r.end is not None for r in records)
    assert finished == jobs, (finished, jobs)
    span_days = (clock.now() - START) / 86_400
    print(
        f"mock_replay jobs={jobs} clusters={len(site.schedulers)} seconds={seconds:.2f} "
        f"events={events} simulated_days={span_days:.0f}"
    )


if __name__ == "__main__":
    main()
