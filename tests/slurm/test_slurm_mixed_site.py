"""A mixed site through ``coorm-bridge serve``: a real Slurm 22.05 (partition ``alpha``) and the
simulated platform (cluster ``delta``, on the wall clock) as one bridge's batch systems. One
application over both gets one start, a placeholder in each batch system at that start, and a
start event naming hosts of both; its jobs go into them as each cluster takes jobs; at its end
both placeholders go."""

from __future__ import annotations

import calendar
import re
import sys
import time
from pathlib import Path

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import FILE_NAME, Journal, VirtualClock, load_platform
from coorm_bridge.core.batch import Reservation
from coorm_bridge.core.messages import StartEvent
from coorm_bridge.core.model import Filter, Request, Submission
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from coorm_bridge.protocol import JobRequest
from tests import daemons

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]

PLATFORM = '[[cluster]]\nname = "delta"\nhosts = 4\nspeed = 2.0\n'


class MixedSite(daemons.Daemon):
    """The daemon over Slurm's partition ``alpha`` and the simulated cluster ``delta``."""

    def __init__(self, folder: Path, slurm) -> None:
        slurm_system = {
            "kind": "slurm",
            "cluster": [{"name": "alpha", "partition": "alpha", "slurm_conf": str(slurm.conf)}],
        }
        mock_system = {"kind": "mock", "platform": "platform.toml", "run_jobs": True}
        adapter = {
            "kind": "mixed",
            "system": [slurm_system, mock_system],
            "link": [{"clusters": ["alpha", "delta"], "latency_s": 0.002, "bandwidth_bps": 1e9}],
        }
        policy = {"interval": 0.5, "fair_start": 2}
        config = daemons.config(adapter, policy=policy, placement=daemons.BATCH_PLACEMENT)
        super().__init__(folder, config, PLATFORM)
        self.slurm = slurm

    def slurm_reservation(self, name: str) -> dict[str, str] | None:
        """``scontrol show reservation`` of one, as key=value fields (None: Slurm has none)."""
        shown = self.slurm.run("scontrol", "-o", "show", "reservation", name, check=False)
        if shown.returncode != 0 or not shown.stdout.startswith("ReservationName="):
            return None
        return dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)

    def simulated_reservations(self) -> tuple[Reservation, ...]:
        """delta's reservations, read from the platform the daemon saves (in its own folder of
        the state folder), without the daemon."""
        path = self.folder / "state" / "systems" / "mock" / FILE_NAME
        with Journal(path, readonly=True) as journal:
            now = journal.resume_time(time.time())
            assert now is not None
            spec = load_platform(self.folder / "platform.toml")
            adapter = MockAdapter(spec, VirtualClock(now), journal=journal)
            return adapter.snapshot(["delta"]).clusters["delta"].reservations


def utc(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def follow_until(client: BridgeClient, sid: str, kind: type, timeout: float = 120):
    deadline, after, seen = time.monotonic() + timeout, 0, []
    while time.monotonic() < deadline:
        for event in client.events(sid, after=after, wait=5):
            after = event.seq
            seen.append(event)
            if isinstance(event, kind):
                return event
    raise AssertionError(f"no {kind.__name__} for {sid}; events: {seen}")


@pytest.fixture
def mixed_site(slurm_partitions, make_daemon):
    """Not started; stopped with the jobs it left (tests/conftest.py), then Slurm reset."""
    site = make_daemon(slurm_partitions, cls=MixedSite)
    yield site
    site.stop()
    slurm_partitions.reset()


def test_one_application_over_slurm_and_the_simulated_platform_starts_once_on_both(mixed_site):
    slurm = mixed_site.slurm
    mixed_site.start()
    with mixed_site.client() as client:
        infos = {info.name: info for info in client.clusters()}
        assert list(infos) == ["alpha", "delta"]
        assert infos["alpha"].submission.kind == "slurm"
        assert infos["alpha"].hosts == len(slurm.nodes["alpha"])
        assert infos["delta"].submission == Submission(kind="mock")
        assert infos["delta"].speed == 2.0
        assert client.interconnect().link("delta", "alpha").latency_s == 0.002
        health = client.health()
        assert health.status == "ok", health
        assert set(health.clusters) == {"alpha", "delta"}

        sid = client.subscribe(Filter(clusters=("alpha", "delta")), "coupled").session
        client.request(sid, Request(nodes={"alpha": 2, "delta": 3}, duration=300))
        start = follow_until(client, sid, StartEvent)

        # One start, hosts on both, each in its batch system's placeholder at that start.
        alpha, delta = start.allocations["alpha"], start.allocations["delta"]
        assert len(alpha.hosts) == 2
        assert set(alpha.hosts) <= set(slurm.nodes["alpha"])
        assert len(delta.hosts) == 3
        assert all(re.fullmatch(r"delta-\d", host) for host in delta.hosts)
        assert start.end == start.time + 300
        held = mixed_site.slurm_reservation(alpha.reservation)
        assert held is not None, f"Slurm has no reservation {alpha.reservation}"
        assert utc(held["StartTime"]) == start.time
        assert utc(held["EndTime"]) >= start.end
        shown = slurm.run("scontrol", "show", "hostnames", held["Nodes"]).stdout.split()
        assert sorted(shown) == sorted(alpha.hosts)
        (simulated,) = mixed_site.simulated_reservations()
        assert simulated.name == delta.reservation
        assert (simulated.start, simulated.end) == (start.time, start.end)
        assert sorted(simulated.host_names) == sorted(delta.hosts)

        # Jobs go in as each cluster takes them: Slurm's with sbatch, delta's through the bridge.
        work = mixed_site.folder / "work"
        work.mkdir()
        code = "import os; print(os.environ['COORM_JOB_HOSTS'])"
        request = {
            "name": "part",
            "argv": [sys.executable, "-c", code],
            "workdir": str(work),
            "walltime": 60,
            "stdout": str(work / "out.txt"),
            "stderr": str(work / "err.txt"),
        }
        with pytest.raises(BridgeError) as refused:
            client.submit_job(sid, JobRequest.model_validate({**request, "cluster": "alpha"}))
        assert refused.value.status == 409
        assert f"submit with sbatch (kind slurm) into reservation {alpha.reservation}" in str(
            refused.value
        )
        answer = client.submit_job(sid, JobRequest.model_validate({**request, "cluster": "delta"}))
        assert sorted(answer.hosts) == sorted(delta.hosts)
        deadline = time.monotonic() + 30
        while (job := client.jobs(sid)[0]).state != "completed":
            assert job.state in ("pending", "running"), job
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
        assert (work / "out.txt").read_text().strip() == ",".join(answer.hosts)

        # Done: the ghost's fair_start, then both placeholders go.
        client.done(sid)
        deadline = time.monotonic() + 60
        while mixed_site.slurm_reservation(alpha.reservation) is not None:
            assert time.monotonic() < deadline, "Slurm's placeholder stayed"
            time.sleep(0.5)
        while mixed_site.simulated_reservations():
            assert time.monotonic() < deadline, "the simulated platform's placeholder stayed"
            time.sleep(0.5)
        assert client.health().status == "ok"


def test_serve_refuses_a_simulated_cluster_named_as_a_slurm_one(slurm_partitions, tmp_path):
    # The platform file's clusters are known once it is read: the daemon says which systems
    # share the name and exits, before serving anything.
    site = MixedSite(tmp_path, slurm_partitions)
    (tmp_path / "platform.toml").write_text('[[cluster]]\nname = "alpha"\nhosts = 2\n')
    result = site.run()
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr == (
        "coorm-bridge: cannot start: the batch system: cluster 'alpha' is in system 0 (slurm) "
        "and in system 1 (mock): cluster names must be distinct across the site's batch "
        "systems; rename one\n"
    )
