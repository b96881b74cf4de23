"""Launcher costs: what ``coorm-launch`` spends on its side of the protocol.

Each figure is one function of :data:`FIGURES`; ``--only NAME`` runs one. Today:

``select``: the selector's CPU time per view, on the paper's resource model (§IV-A): 8 clusters
of 128 hosts, the i-th 1 + 0.1 (i - 1) times faster than the first, a hierarchical WAN (two
sites of four clusters: 2 ms and 10 Gbit/s inside a site, 20 ms and 1 Gbit/s between them).
Views are seeded random free-host profiles left by 15 to 30 foreign jobs per cluster (running
ones ending within a day, pending ones starting within a day, 1 to 48 hosts, 10 min to 12 h):
tens of steps per cluster. One line per selector, the median (and 90th percentile, worst) over
``--views`` distinct views, each run once without memoization:

    launch_select selector=cem clusters=8 hosts=128 views=N steps=S per_view_ms=M p90_ms=P max_ms=X

``start``: a launcher's start, from its first import to its subscription answered by a daemon
on the embedded mock platform, in fresh interpreters (medians of ``--starts``)::

    launch_start starts=N import_ms=I subscribe_ms=S process_ms=P

``deploy``: from a start to the components running, with the shipped configuration's
``[policy]`` and ``[placement]`` (``etc/coorm-bridge*.toml``: a 10 s poll, OAR's 15 s lead), for
each ``--kinds`` (``mock``, and as root ``slurm`` and ``oar``, brought up by the tests' scripts):
``coorm-launch`` runs a two-cluster application whose components write when they began, on an
idle platform, ``--deploys`` times (medians, and the worst)::

    launch_deploy kind=K runs=N told_s=T begin_s=B worst_begin_s=W apart_s=A

``told_s``: the start event after the allocation's start; ``begin_s``: the later component's
first instruction after the launcher was told (the issue's "within 2 s"); ``apart_s``: between
the two components.

``cem`` solves a mesh of 10^7 tetrahedra over 10^4 iterations (about 2 h on one cluster);
``moldable`` 100 h of sequential work with a 2% serial fraction.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from coorm_bridge.core.model import ClusterInfo, Interconnect, Link
from coorm_bridge.core.profile import Profile
from coorm_bridge.launchers.selectors import Selector, create_selector

NOW = 1_700_000_000
DAY = 86_400
CLUSTERS = 8
HOSTS = 128

SELECTORS: dict[str, dict[str, object]] = {
    "cem": {"elements": 10**7, "iterations": 10**4},
    "moldable": {"work": 360_000.0, "serial_fraction": 0.02},
}


def platform() -> tuple[dict[str, ClusterInfo], Interconnect]:
    names = [f"c{i}" for i in range(CLUSTERS)]
    infos = {
        name: ClusterInfo(name=name, hosts=HOSTS, speed=1 + 0.1 * i) for i, name in enumerate(names)
    }
    links = []
    for i, a in enumerate(names):
        for j in range(i + 1, CLUSTERS):
            same_site = i // 4 == j // 4
            links.append(
                Link(
                    clusters=(a, names[j]),
                    latency_s=0.002 if same_site else 0.02,
                    bandwidth_bps=1e10 if same_site else 1e9,
                )
            )
    return infos, Interconnect(links=tuple(links))


def views(rng: random.Random, count: int) -> Iterator[dict[str, Profile]]:
    """Free hosts per cluster around ``NOW``, left by seeded foreign jobs."""
    for _ in range(count):
        view = {}
        for i in range(CLUSTERS):
            jobs = []
            for _ in range(rng.randint(15, 30)):
                start = NOW + rng.randint(-DAY, DAY)
                jobs.append((start, start + rng.randint(600, 12 * 3600), rng.randint(1, 48)))
            view[f"c{i}"] = Profile.from_intervals(HOSTS, jobs).clamped(0)
        yield view


def cpu_ms(run: Callable[[], object]) -> float:
    begin = time.process_time()
    run()
    return (time.process_time() - begin) * 1e3


def select(args: argparse.Namespace) -> list[str]:
    """Selector CPU time per view; see the module docstring."""
    clusters, interconnect = platform()
    sample = list(views(random.Random(args.seed), args.views))
    steps = statistics.median(len(p.steps(NOW)) for view in sample for p in view.values())
    lines = []
    for name, params in SELECTORS.items():
        selector: Selector = create_selector(name, params)

        def once(view: Mapping[str, Profile], selector: Selector = selector) -> object:
            return selector.select(clusters, interconnect, view, NOW)

        times = sorted(cpu_ms(lambda view=view: once(view)) for view in sample)
        lines.append(
            f"launch_select selector={name} clusters={CLUSTERS} hosts={HOSTS} "
            f"views={len(times)} steps={steps:.0f} per_view_ms={statistics.median(times):.2f} "
            f"p90_ms={times[int(0.9 * (len(times) - 1))]:.2f} max_ms={times[-1]:.2f}"
        )
    return lines


#: What a launcher does before its first request, timed from inside a fresh interpreter.
_START = """
import sys, time
began = time.perf_counter()
from coorm_bridge.launchers import launch
from coorm_bridge.launchers.app import load_app
from coorm_bridge.launchers.client import BridgeClient
imported = time.perf_counter()
app = load_app(sys.argv[1])
with BridgeClient(sys.argv[2]) as client:
    session = client.subscribe(app.filter, app.name).session
    subscribed = time.perf_counter()
    client.withdraw(session)
print(imported - began, subscribed - began)
"""


def start(args: argparse.Namespace) -> list[str]:
    """``launch_start``: a launcher's start, from its first import to its subscription answered,
    against a daemon on the embedded mock platform (``--starts`` fresh interpreters, medians);
    ``process_ms`` is the whole process, the interpreter's own start included."""
    folder = Path(tempfile.mkdtemp(prefix="cblaunch-"))
    (folder / "bridge.toml").write_text('[bridge]\nsocket = "b.sock"\nstate_dir = "state"\n')
    bin_dir = Path(sys.executable).parent
    daemon = subprocess.Popen(  # noqa: S603 - our own argument vector
        [str(bin_dir / "coorm-bridge"), "serve", "--config", str(folder / "bridge.toml")],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    app = Path(__file__).resolve().parent.parent / "examples" / "hello" / "hello.toml"
    url = f"unix://{folder / 'b.sock'}"
    imports, subscribes, processes = [], [], []
    try:
        deadline = time.monotonic() + 60
        while not (folder / "b.sock").exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the daemon did not start")
            time.sleep(0.1)
        for _ in range(args.starts):
            began = time.perf_counter()
            done = subprocess.run(  # noqa: S603 - our own argument vector
                [sys.executable, "-c", _START, str(app), url],
                capture_output=True, text=True, check=True, cwd=folder,
            )  # fmt: skip
            processes.append(time.perf_counter() - began)
            imported, subscribed = map(float, done.stdout.split())
            imports.append(imported)
            subscribes.append(subscribed)
    finally:
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(folder, ignore_errors=True)
    ms = {k: 1000 * statistics.median(v) for k, v in
          (("import", imports), ("subscribe", subscribes), ("process", processes))}  # fmt: skip
    return [
        f"launch_start starts={args.starts} import_ms={ms['import']:.0f} "
        f"subscribe_ms={ms['subscribe']:.0f} process_ms={ms['process']:.0f}"
    ]


REPO = Path(__file__).resolve().parent.parent
#: The deploy figure's application: two clusters, each component stamps when it began.
_STAMP = 'date +%s.%N > "$COORM_RUN_DIR/$COORM_COMPONENT.start"'
_DEPLOYED = f"""
duration = 600
[selector]
name = "rigid"
params = {{ nodes = {{ alpha = 2, beta = 1 }} }}
[deployment]
poll_interval = 0.2
mpi = "none"
[[component]]
name = "solver"
command = ["sh", "-c", '{_STAMP}']
clusters = ["alpha"]
[[component]]
name = "coupler"
command = ["sh", "-c", '{_STAMP}']
clusters = ["beta"]
"""
_MOCK_PLATFORM = '[[cluster]]\nname = "alpha"\nhosts = 8\n[[cluster]]\nname = "beta"\nhosts = 8\n'


def _shipped(kind: str) -> str:
    """The shipped example's ``[policy]`` and ``[placement]`` tables, as they are."""
    name = {"mock": "coorm-bridge.toml"}.get(kind, f"coorm-bridge-{kind}.toml")
    shipped = tomllib.loads((REPO / "etc" / name).read_text())
    lines = []
    for table in ("policy", "placement"):
        lines.append(f"[{table}]")
        lines += [f"{k} = {v!r}" for k, v in shipped.get(table, {}).items()]
    return "\n".join(lines).replace("True", "true").replace("False", "false") + "\n"


@contextlib.contextmanager
def _platform(kind: str, folder: Path) -> Iterator[tuple[str, str | None]]:
    """An idle batch system of clusters alpha and beta, 8 hosts each: its ``[adapter]`` table,
    and the user the launcher runs as (None: this one)."""
    if kind == "mock":
        (folder / "platform.toml").write_text(_MOCK_PLATFORM)
        yield 'kind = "mock"\nplatform = "platform.toml"\nrun_jobs = true\n', None
        return
    script = REPO / "tests" / kind / f"{kind}-local.sh"
    env = {**os.environ, "BASE": str(folder / kind), "PORT_BASE": "18000"}
    up = subprocess.run(  # noqa: S603 - our own argument vector
        ["bash", str(script), "up"],  # noqa: S607
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if up.returncode != 0:
        raise RuntimeError(f"{script.name} up failed: {up.stderr[-2000:]}")
    try:
        if kind == "slurm":
            conf = folder / "slurm" / "etc" / "coorm.conf"
            yield (
                'kind = "slurm"\n'
                + "".join(
                    f'[[adapter.cluster]]\nname = "{c}"\npartition = "{c}"\nslurm_conf = "{conf}"\n'
                    for c in ("alpha", "beta")
                ),
                None,
            )
        else:
            shipped = tomllib.loads((REPO / "etc" / "coorm-bridge-oar.toml").read_text())
            lead = shipped["adapter"]["reservation_lead"]
            users = _env_file(folder / "oar" / "env.sh").get("COORM_OAR_USERS", "").split()
            yield (
                (
                    f'kind = "oar"\nbackend = "cli"\nreservation_lead = {lead}\n'
                    '[[adapter.cluster]]\nname = "alpha"\n[[adapter.cluster]]\nname = "beta"\n'
                ),
                users[0],
            )
    finally:
        subprocess.run(  # noqa: S603 - our own argument vector
            ["bash", str(script), "down"],  # noqa: S607
            env=env,
            capture_output=True,
            check=False,
        )


def _env_file(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line.removeprefix("export ").split("=", 1)
            found[key] = value.strip('"')
    return found


def _deployed(kind: str, runs: int) -> str:
    """``runs`` coorm-launch runs on ``kind``; the figure's line."""
    folder = Path(tempfile.mkdtemp(prefix=f"cbdeploy-{kind}-", dir="/tmp"))
    folder.chmod(0o755)
    bin_dir = Path(sys.executable).parent
    told, begins, apart = [], [], []
    try:
        with _platform(kind, folder) as (adapter, user):
            config = folder / "bridge.toml"
            config.write_text(
                '[bridge]\nsocket = "b.sock"\nstate_dir = "state"\n'
                + _shipped(kind)
                + "[adapter]\n"
                + adapter
            )
            daemon = subprocess.Popen(  # noqa: S603 - our own argument vector
                [str(bin_dir / "coorm-bridge"), "serve", "--config", str(config)],
                cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                _wait_for(folder / "b.sock", daemon)
                launcher_bin = bin_dir if user is None else _user_bin(folder)
                for n in range(runs):
                    run = _one_run(folder / f"run{n}", folder / "b.sock", user, launcher_bin)
                    document = json.loads((run / "run.json").read_text())
                    began = [float((run / f"{c}.start").read_text()) for c in ("solver", "coupler")]
                    told.append(document["told"] - document["start"])
                    begins.append(max(began) - document["told"])
                    apart.append(abs(began[0] - began[1]))
            finally:
                daemon.terminate()
                daemon.wait(60)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return (
        f"launch_deploy kind={kind} runs={runs} told_s={statistics.median(told):.2f} "
        f"begin_s={statistics.median(begins):.2f} worst_begin_s={max(begins):.2f} "
        f"apart_s={statistics.median(apart):.2f}"
    )


def _wait_for(socket: Path, daemon: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not socket.exists():
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the daemon did not start")
        time.sleep(0.1)


def _user_bin(folder: Path) -> Path:
    """coorm-launch for another user: this interpreter may sit where only root can read (a
    pyenv under /root), so the package goes into a venv of the system's python3 there."""
    venv = folder / "user-venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)  # noqa: S603
    subprocess.run(  # noqa: S603 - our own argument vector
        [str(venv / "bin" / "pip"), "install", "-q", str(REPO)], check=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return venv / "bin"


def _one_run(root: Path, socket: Path, user: str | None, bin_dir: Path) -> Path:
    """One coorm-launch, as ``user``; its run directory."""
    root.mkdir()
    app = root / "app.toml"
    app.write_text(_DEPLOYED)
    argv = [str(bin_dir / "coorm-launch"), str(app), "--url", f"unix://{socket}", "--plain",
            "--run-root", str(root)]  # fmt: skip
    if user is not None:
        shutil.chown(root, user, user)
        shutil.chown(app, user, user)
        argv = ["runuser", "-u", user, "--", *argv]
    env = {**os.environ, "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"}
    done = subprocess.run(  # noqa: S603 - our own argument vector
        argv, cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"coorm-launch failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    (run,) = (d for d in root.iterdir() if d.is_dir())
    return run


def deploy_figure(args: argparse.Namespace) -> list[str]:
    """``launch_deploy``: see the module docstring."""
    return [_deployed(kind, args.deploys) for kind in args.kinds.split(",")]


#: Every figure this benchmark prints, by name (another figure: another entry).
FIGURES: dict[str, Callable[[argparse.Namespace], list[str]]] = {
    "select": select,
    "start": start,
    "deploy": deploy_figure,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(FIGURES), help="print only this figure")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--views", type=int, default=200, help="views per selector (select)")
    parser.add_argument("--starts", type=int, default=5, help="launcher starts (start)")
    parser.add_argument("--deploys", type=int, default=3, help="runs per kind (deploy)")
    parser.add_argument(
        "--kinds", default="mock", help="comma-separated: mock, slurm, oar (deploy)"
    )
    args = parser.parse_args()
    for name, figure in FIGURES.items():
        if args.only in (None, name):
            for line in figure(args):
                print(line, flush=True)


if __name__ == "__main__":
    main()
