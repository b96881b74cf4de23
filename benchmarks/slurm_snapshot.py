"""Slurm snapshots of a 10,000-job queue: parsing alone, and end to end on a real Slurm.

Always prints ``slurm_snapshot jobs=N seconds=S``: the best of 3 runs of
:func:`coorm_bridge.adapters.slurm.parse.parse_squeue` on a real 10,000-job ``squeue --json``
(Slurm 22.05.8, 31.6 MB; decompression is not timed: squeue's output arrives as plain bytes),
and ``slurm_snapshot_text jobs=N seconds=S``: the same for the text the snapshot reads now
(:func:`coorm_bridge.adapters.slurm.parse_text.parse_squeue_text`, a 10,000-job queue recorded
by ``--e2e --record``).

With ``--e2e`` (root, Slurm 22.05 installed: ``tests/slurm/slurm-local.sh install``) it also
starts a throw-away Slurm with ``tests/slurm/slurm-local.sh up`` (one controller, partitions
alpha and beta of 8 nodes; ``--base``, ``--port-base``), fills it with ``--jobs`` jobs (a few
running on every node, the rest pending with mixed sizes and time limits: most submitted one by
one, in parallel, some as job arrays, some pending in both partitions), waits until the
backfill has predicted starts, then times ``SlurmAdapter.snapshot()`` of the two partitions as
clusters, Slurm's commands included, and prints ``slurm_snapshot_e2e jobs=N clusters=2
seconds=S``: the median of ``--runs`` snapshots (``best=`` the fastest), followed by the times of
the commands alone. The Slurm is stopped with ``down`` at the end, even on failure.
Then it times requests to placeholders through a bridge on that queue and prints
``slurm_request_to_placeholder jobs=N median=S max=S``.
``--record FILE`` also saves the queue as the snapshot's squeue read it (gzip'd text).

Goal: both figures under 0.5 s.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from coorm_bridge.adapters.batch.runner import LocalRunner
from coorm_bridge.adapters.slurm import commands
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.parse import parse_squeue
from coorm_bridge.adapters.slurm.parse_text import jobs_in, parse_squeue_text
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import JobState
from coorm_bridge.core.model import Filter
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.service.config import Config, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "tests" / "data" / "slurm" / "squeue_10000.json.gz"
TEXT_SAMPLE = ROOT / "tests" / "data" / "slurm" / "text" / "squeue_10000.txt.gz"
SCRIPT = ROOT / "tests" / "slurm" / "slurm-local.sh"
NOW = 1795248800  # when the sample was recorded
RUNS = 3
PARTITIONS = ("alpha", "beta")
SBIN = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
BASH = shutil.which("bash") or "/bin/bash"
#: Time limits of the pending jobs, minutes (0: UNLIMITED).
LIMITS = (10, 30, 60, 120, 240, 720, 1440, 4320, 0)


def timed(runs: int, action: Callable[[], object]) -> list[float]:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return times


def parse_only() -> None:
    raw = gzip.decompress(SAMPLE.read_bytes())
    jobs: list[object] = []
    best = min(timed(RUNS, lambda: jobs.append(len(parse_squeue(raw, now=NOW)))))
    print(f"slurm_snapshot jobs={jobs[-1]} seconds={best:.3f}")
    text = gzip.decompress(TEXT_SAMPLE.read_bytes()).decode()
    best = min(timed(RUNS, lambda: jobs.append(len(jobs_in(parse_squeue_text(text, now=NOW))))))
    print(f"slurm_snapshot_text jobs={jobs[-1]} seconds={best:.3f}")


# --- end to end ----------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


class Slurm:
    """A throw-away Slurm of tests/slurm/slurm-local.sh, its commands run with its SLURM_CONF."""

    def __init__(self, base: Path, port_base: int) -> None:
        self.base, self.port_base = base, port_base
        self.env: dict[str, str] = {}

    def script(self, command: str) -> None:
        knobs = {"BASE": str(self.base), "PORT_BASE": str(self.port_base),
                 "MODE": "partitions", "CLUSTERS": " ".join(PARTITIONS), "NODES": "8",
                 "DBD": "0", "REST": "0"}  # fmt: skip
        env = {**os.environ, "PATH": SBIN, **knobs}
        env.pop("SLURM_CONF", None)
        done = subprocess.run(  # noqa: S603 - our own script, an argument vector
            [BASH, str(SCRIPT), command], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise ScriptError(done.returncode, f"slurm-local.sh {command} failed "
                              f"({done.returncode}):\n{done.stdout}{done.stderr}")  # fmt: skip
        if command == "up":
            for line in (self.base / "env.sh").read_text().splitlines():
                if line.startswith("export "):
                    key, _, value = line.removeprefix("export ").partition("=")
                    self.env[key] = shlex.split(value)[0] if value else ""

    def run(self, *argv: str) -> str:
        env = {**os.environ, "PATH": SBIN, "TZ": "UTC", "SLURM_CONF": self.env["SLURM_CONF"]}
        done = subprocess.run(  # noqa: S603 - Slurm's commands, argument vectors
            list(argv), env=env, capture_output=True, text=True, check=False, cwd=self.base
        )
        if done.returncode != 0:
            raise RuntimeError(f"{shlex.join(argv)}: {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, *options: str) -> None:
        self.run("sbatch", "--parsable", f"--chdir={self.base}", "--output=/dev/null", *options,
                 "--wrap=sleep 100000")  # fmt: skip


class ScriptError(RuntimeError):
    def __init__(self, returncode: int, message: str) -> None:
        super().__init__(message)
        self.returncode = returncode


#: Exit codes of ``slurm-local.sh up`` that mean it started nothing: ports in use, BASE in use
#: or not its own (``down`` there would stop someone else's Slurm).
NOTHING_STARTED = (3, 4)


@contextmanager
def slurm_up(base: Path, port_base: int) -> Iterator[Slurm]:
    """A Slurm of our own, stopped with ``down`` at the end whatever happens."""
    slurm = Slurm(base, port_base)
    started = False
    try:
        log(f"starting Slurm under {base} (PORT_BASE={port_base})")
        try:
            slurm.script("up")
        except ScriptError as error:
            started = error.returncode not in NOTHING_STARTED
            raise
        started = True
        yield slurm
    finally:
        if started:
            log("stopping Slurm")
            slurm.script("down")
            shutil.rmtree(base, ignore_errors=True)  # made by `up`: configurations and logs


def pending_options(rng: random.Random) -> list[str]:
    """A pending job: 1-4 nodes (sometimes 8), a time limit of LIMITS, one partition or both."""
    nodes = rng.choice((1, 1, 1, 2, 2, 3, 4, 8))
    limit = rng.choice(LIMITS)
    partition = ",".join(PARTITIONS) if rng.random() < 0.05 else rng.choice(PARTITIONS)
    return [f"--partition={partition}", f"--nodes={nodes}",
            f"--time={limit or 'UNLIMITED'}"]  # fmt: skip


def fill(slurm: Slurm, jobs: int, workers: int = 4) -> None:
    """``jobs`` jobs: every node busy, then pending ones, a fifth of them in arrays of 100."""
    rng = random.Random(2026)
    running = 0
    for partition in PARTITIONS:  # 8 nodes: 4 + 2 + 1 + 1, limits from 30 min to unlimited
        for nodes, limit in ((4, "120"), (2, "1440"), (1, "30"), (1, "UNLIMITED")):
            slurm.sbatch(f"--partition={partition}", f"--nodes={nodes}", f"--time={limit}")
            running += 1
    left = jobs - running
    arrays = left // 5 // 100
    for _ in range(arrays):
        slurm.sbatch(*pending_options(rng), "--array=0-99")
    singles = [pending_options(rng) for _ in range(left - arrays * 100)]
    began = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        for done, _ in enumerate(pool.map(lambda o: slurm.sbatch(*o), singles), 1):
            if done % 2000 == 0:
                log(f"{done} of {len(singles)} jobs submitted")
    log(f"{running} + {arrays} arrays of 100 + {len(singles)} jobs submitted "
        f"({time.monotonic() - began:.0f} s for the single ones)")  # fmt: skip


def settle(slurm: Slurm, jobs: int, timeout: float = 300) -> None:
    """Until squeue shows every job, every node is allocated and the backfill's predictions
    stop growing (two readings 10 s apart)."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        starts = slurm.run("squeue", "-h", "-r", "-o", "%T %S").splitlines()
        predicted = sum(1 for s in starts if s.startswith("PENDING") and not s.endswith("N/A"))
        idle = slurm.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N").split()
        log(f"{len(starts)} jobs, {predicted} pending ones with a predicted start, "
            f"{len(idle)} idle nodes")  # fmt: skip
        if len(starts) >= jobs and not idle and predicted > 0 and predicted == last:
            return
        last = predicted
        time.sleep(10)
    raise RuntimeError(f"the queue did not settle within {timeout:g} s")


def end_to_end(args: argparse.Namespace) -> None:
    needed = ("slurmctld", "slurmd", "sbatch", "squeue")
    missing = [c for c in needed if not shutil.which(c, path=SBIN)]
    if missing or os.geteuid() != 0:
        raise SystemExit(f"--e2e needs root and Slurm ({', '.join(missing) or 'not root'}): "
                         f"run 'bash {SCRIPT} install' as root")  # fmt: skip
    with slurm_up(args.base, args.port_base) as slurm:
        fill(slurm, args.jobs)
        settle(slurm, args.jobs)
        conf = Path(slurm.env["SLURM_CONF"])
        clusters = tuple(SlurmCluster(name=p, partition=p, slurm_conf=conf) for p in PARTITIONS)
        adapter = SlurmAdapter(SlurmSettings(clusters=clusters), SlurmCliBackend(LocalRunner()))
        shots = []
        times = timed(args.runs, lambda: shots.append(adapter.snapshot()))
        shot = shots[-1]
        count = len({j.id for c in shot.clusters.values() for j in c.jobs})
        pending = [j for c in shot.clusters.values() for j in c.jobs
                   if j.state is JobState.PENDING]  # fmt: skip
        print(f"slurm_snapshot_e2e jobs={count} clusters={len(shot.clusters)} "
              f"seconds={statistics.median(times):.3f} best={min(times):.3f}")  # fmt: skip
        target = commands.Target()
        for name, argv in (("squeue", commands.squeue_text(target)),
                           ("sinfo", commands.sinfo_text(target)),
                           ("scontrol", commands.show_reservations(target))):  # fmt: skip
            spent = timed(args.runs, lambda argv=argv: slurm.run(*argv))
            print(f"# {name} median={statistics.median(spent):.3f} best={min(spent):.3f}")
        spent = timed(args.runs, lambda: slurm.run("squeue", "--json"))
        print(f"# squeue --json median={statistics.median(spent):.3f} best={min(spent):.3f}")
        print(f"# pending={len(pending)} with a start={sum(j.start is not None for j in pending)}"
              f" runs={args.runs}")  # fmt: skip
        placement_latency(adapter, args.runs)
        if args.record is not None:
            queue = slurm.run(*commands.squeue_text(target))
            args.record.write_bytes(gzip.compress(queue.encode(), 9, mtime=0))
            log(f"queue recorded in {args.record}")
        adapter.close()


def placement_latency(adapter: SlurmAdapter, runs: int) -> None:
    """From a request to its placeholders held in Slurm, through a bridge and its loop, on the
    full queue: ``runs`` applications one after the other (each withdrawn once held), each
    wanting 2 hosts on both partitions, placed behind the queue. Prints
    ``slurm_request_to_placeholder jobs=N median=S max=S``."""
    folder = Path(tempfile.mkdtemp(prefix="cbbench-"))
    config = Config(
        policy=PolicyConfig(interval=0.5, fair_start=5),
        placement=PlacementSettings(poll_interval=1.0),
        adapter=adapter.settings,
    )
    store = Store(folder / "bridge.sqlite")
    service = assemble(config, adapter, store)
    bridge, loop = service.bridge, service.loop
    loop.start()
    latencies = []
    try:
        for _ in range(runs):
            sid = bridge.subscribe("root", Filter(clusters=PARTITIONS), "bench").session
            asked = time.perf_counter()
            bridge.put_request("root", sid, dict.fromkeys(PARTITIONS, 2), 3600)
            deadline = asked + 120
            while len(store.placeholders(sid)) < len(PARTITIONS):
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"no placeholders for {sid} within 120 s")
                time.sleep(0.02)
            latencies.append(time.perf_counter() - asked)
            bridge.withdraw("root", sid)
            while store.placeholders(sid):
                time.sleep(0.1)
    finally:
        loop.stop()
        store.close()
        shutil.rmtree(folder, ignore_errors=True)
    jobs = len({j.id for c in adapter.snapshot().clusters.values() for j in c.jobs})
    print(f"slurm_request_to_placeholder jobs={jobs} median={statistics.median(latencies):.3f} "
          f"max={max(latencies):.3f} runs={runs}")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--e2e", action="store_true", help="also on a real Slurm (root)")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--base", type=Path, default=Path(tempfile.gettempdir(), "coorm-bench"))
    parser.add_argument("--port-base", type=int, default=22800)
    parser.add_argument("--record", type=Path, help="save the queue's squeue text (gzip)")
    args = parser.parse_args(argv)
    parse_only()
    if args.e2e:
        end_to_end(args)


if __name__ == "__main__":
    main()
