"""The tests run against the installed package (see the README's test command).

What every test module may use:

- Hypothesis profiles: ``dev`` (quick, the default) and ``ci`` (thorough and derandomized, set by
  .ci/run), chosen by ``HYPOTHESIS_PROFILE``; tests/profiles.py says how they differ.
- Groups for a parallel run (``pytest -n auto --dist loadgroup``, the README's command): the
  tests on the machine's one OAR run in one worker, those on the session's Slurms in one other
  (see :func:`pytest_collection_modifyitems`).
- ``folder`` and ``make_daemon``: real ``coorm-bridge serve`` processes over a folder of
  the test's own, with a configuration built by ``tests.daemons.config``, stopped by PID.
- ``make_site``: a bridge in this process over the simulated platform on a virtual clock
  (tests/sites.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import coorm_bridge.adapters  # noqa: F401
except ImportError as missing:  # pragma: no cover - a set-up error, not a test result
    raise pytest.UsageError(
        "coorm_bridge is not installed in this environment: run the README's test command "
        f"(pip install '.[test]' into a virtual environment) first ({missing})"
    ) from missing

from tests import daemons, profiles, sites

profiles.load()

# A run started in the background by a non-interactive shell (as a CI runner may start it)
# inherits SIGINT ignored, and so would every process it starts: the Ctrl-C that a test sends
# to a child (coorm-sim, coorm-launch) would do nothing. Python leaves an ignored SIGINT ignored,
# so give it its usual handler here; the processes started from now on get the default back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: xdist groups by the session fixtures a test uses (directly or through another fixture) or its
#: marker. The machine runs one OAR (its configuration is machine-wide), so its tests share one
#: worker; the tests on the session's Slurms share one too, so that each Slurm starts once, not
#: once a worker. A test on both (a mixed site) goes with OAR. Tests marked ``slurm`` that start
#: a Slurm of their own go with the Slurm group: one worker runs the Slurms, one at a time.
GROUPS = (
    ("oar", {"oar"}),
    ("slurm", {"slurm_partitions", "slurm_clusters", "slurm_own", "munge_daemon"}),
)
#: Slurm's tests on Slurms of their own (a private one per test, one with accounting enforced)
#: and its longest file (3 minutes): on a worker of their own, with Slurms of its own (the
#: fixtures take port blocks of their own), beside the others of the group.
OWN_SLURMS = frozenset({"test_slurm_down.py", "test_slurm_rules.py", "test_slurm_production.py"})


#: ``COORM_TEST_TIMELINE=PREFIX``: each worker appends a line per test phase to ``PREFIX.<worker>``
#: (when it ended, the phase, its seconds, the test), to see which worker a run waits for.
TIMELINE = os.environ.get("COORM_TEST_TIMELINE")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None and hasattr(report, "node"):
        return  # xdist's controller, told of each worker's tests: the workers write them
    if TIMELINE:
        worker = worker or "main"
        with open(f"{TIMELINE}.{worker}", "a", encoding="utf-8") as line:
            line.write(f"{time.time():.2f} {report.when} {report.duration:.2f} {report.nodeid}\n")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Each test's xdist group, as soon as it is collected: xdist reads the groups in its own
    ``pytest_collection_modifyitems``, which in a worker runs before this file's would."""
    if item.get_closest_marker("xdist_group") is not None:
        return
    used = set(getattr(item, "fixturenames", ()))
    marks = {mark.name for mark in item.iter_markers()}
    for group, fixtures in GROUPS:
        if used & fixtures or group in marks:
            own = group == "slurm" and item.path.name in OWN_SLURMS
            item.add_marker(pytest.mark.xdist_group("slurm-own" if own else group))
            return


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: a worker per core, and one more for each group above. A group's tests mostly
    wait on their batch system (its scheduler's passes, its jobs' ends): on workers of their
    own, the other tests keep every core busy meanwhile. (``PYTEST_XDIST_AUTO_NUM_WORKERS`` and
    ``-n logical`` keep their meaning.)"""
    if config.option.numprocesses != "auto" or os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + len(GROUPS) + 1  # slurm-own


#: Niceness of the tests outside OAR's group in a parallel run. OAR's tests are the run's critical
#: path (one worker on the machine's one OAR: about 550 s of a 580 s run, 400 s of it alone) and
#: wait mostly on OAR's own Perl processes, which the other workers' tests starve of CPU on a
#: 2-core machine. Run a little lower elsewhere, OAR's worker and the OAR it starts get the CPU
#: first; the other tests take what is left.
OTHERS_NICENESS = 3


def pytest_runtest_setup(item: pytest.Item) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    mark = item.get_closest_marker("xdist_group")
    group = mark.args[0] if mark is not None and mark.args else None
    wanted = 0 if group == "oar" else OTHERS_NICENESS
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if wanted > current or (wanted < current and os.geteuid() == 0):
        os.setpriority(os.PRIO_PROCESS, 0, wanted)


def _mpi_missing() -> str | None:
    if shutil.which("mpirun") is None:
        return "mpirun is not installed (Debian: openmpi-bin)"
    found = subprocess.run(
        ["/usr/bin/python3", "-c", "import mpi4py"], capture_output=True, check=False, cwd="/"
    )
    return None if found.returncode == 0 else "the system Python has no mpi4py (python3-mpi4py)"


@pytest.fixture(scope="session")
def mpi() -> None:
    """Open MPI and the system Python's mpi4py, which the coupled example runs on: skipped
    without them, except in CI (COORM_REQUIRE_MPI=1), where .ci/run installs them."""
    missing = _mpi_missing()
    if missing is not None:
        if os.environ.get("COORM_REQUIRE_MPI") == "1":
            pytest.fail(f"MPI is required here: {missing}")
        pytest.skip(missing)


# -- real daemons ---------------------------------------------------------------------------------


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder of the test's own for its daemons (configuration, socket, state, log), under
    /tmp and short: a Unix socket path has at most 107 bytes. Removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="cbd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_daemon(folder: Path) -> Iterator[Callable[..., Any]]:
    """``make_daemon(config, platform=..., cls=daemons.Daemon, **options)``: a daemon over
    ``folder`` (not started). Afterwards each one made is killed by its PID, so are the
    job supervisors that the mock's front end left (they outlive a daemon on purpose; their
    PIDs are in its state folder, a mixed site's too), and the log lines above INFO are
    printed (shown when the test fails)."""
    made: list[daemons.Daemon] = []

    def make(*args: Any, cls: type[daemons.Daemon] = daemons.Daemon, **options: Any) -> Any:
        made.append(cls(folder, *args, **options))
        return made[-1]

    yield make
    for daemon in made:
        daemon.stop(signal.SIGKILL)
    daemons.end_jobs(path.parent for path in folder.glob("state/**/jobs/*/spec.json"))
    for daemon in made[:1]:
        if daemon.log.exists():
            noted = [line for line in daemon.log.read_text().splitlines() if " INFO " not in line]
            print("daemon log, but its INFO lines:", *noted, sep="\n  ")


# -- a bridge in this process ---------------------------------------------------------------------


@pytest.fixture
def make_site(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make_site(cls=sites.Site, **options)``: a bridge over the mock platform on a virtual
    clock (tests/sites.py), its store in ``tmp_path``; each store is closed afterwards."""
    made: list[sites.Site] = []

    def make(cls: type[sites.Site] = sites.Site, *args: Any, **options: Any) -> Any:
        made.append(cls(tmp_path, *args, **options))
        return made[-1]

    yield make
    for site in made:
        site.close()
