"""The command back-end's reads: one squeue, sinfo and scontrol per controller, shared by its
clusters, failures kept to the clusters of the controller that failed. The commands' answers are
the text outputs recorded from Slurm 22.05.8 (tests/data/slurm/text/); the real thing is in
test_slurm_adapter.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from coorm_bridge.adapters.batch.backend import BatchFailure
from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.binding import SlurmBinding
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import JobState, Unavailable

TEXT = Path(__file__).parent.parent / "data" / "slurm" / "text"
NOW = int((TEXT / "recorded_at").read_text())
DOWN = "squeue: error: Unable to contact slurm controller (connect failure)"


class Recorded(Runner):
    """Answers as the recorded controllers did: ``/etc/one.conf`` (partitions alpha and beta),
    ``/etc/mc.conf`` with ``-M beta``; ``/etc/down.conf`` does not answer (or, with ``hang``,
    times out). Counts the commands per configuration file."""

    def __init__(self, hang: bool = False) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.hang = hang

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        conf = (env or {}).get("SLURM_CONF", "")
        self.calls[conf, argv[0]] += 1
        assert (env or {}).get("TZ") == "UTC"
        if conf == "/etc/down.conf":
            if self.hang:
                raise Unavailable(f"{argv[0]} did not answer within {timeout:g} s")
            return Completed(1, "", DOWN)
        suffix = "M_beta" if "-M" in argv else "partitions"
        name = {"squeue": f"squeue_{suffix}.txt", "sinfo": f"sinfo_{suffix}.txt",
                "scontrol": "scontrol_M_beta_reservations.txt" if "-M" in argv
                else "scontrol_reservations.txt"}[argv[0]]  # fmt: skip
        return Completed(0, (TEXT / name).read_text(), "")


def cluster(name: str, conf: str, partition: str | None = None, slurm: str | None = None) -> Any:
    return SlurmCluster(name=name, slurm_conf=Path(conf), partition=partition, cluster=slurm)


def adapter(runner: Runner, *clusters: SlurmCluster) -> SlurmAdapter:
    return SlurmAdapter(SlurmSettings(clusters=clusters), SlurmCliBackend(runner))


PARTITIONS = (cluster("a", "/etc/one.conf", "alpha"), cluster("b", "/etc/one.conf", "beta"))


def test_partitions_of_one_controller_share_one_read_of_each_command(monkeypatch) -> None:
    runner = Recorded()
    slurm = adapter(runner, *PARTITIONS)
    monkeypatch.setattr(slurm, "now", lambda: NOW)
    shot = slurm.snapshot()
    assert runner.calls == {
        ("/etc/one.conf", "squeue"): 1,
        ("/etc/one.conf", "sinfo"): 1,
        ("/etc/one.conf", "scontrol"): 1,
    }
    a, b = (shot.clusters[n] for n in ("a", "b"))
    assert [n.name for n in a.nodes] == [f"alpha0{i}" for i in range(1, 9)]
    assert [n.name for n in b.nodes] == [f"beta0{i}" for i in range(1, 9)]
    ids = {name: {j.id for j in s.jobs} for name, s in shot.clusters.items()}
    assert ids["a"] & ids["b"] == {"5"}  # pending in alpha,beta
    # The whole controller from the same answer (a configuration may not also name its
    # partitions as clusters: they would overlap; the back-end reads it all the same).
    whole = SlurmBinding("whole", env={"SLURM_CONF": "/etc/one.conf"})
    part = SlurmBinding("a", partition="alpha", env={"SLURM_CONF": "/etc/one.conf"})
    read = SlurmCliBackend(runner).read_all([part, whole], NOW)
    assert isinstance(read["whole"], tuple)
    assert len(read["whole"][0]) == 16
    assert {j.id for j in read["whole"][1]} == ids["a"] | ids["b"]
    assert [r.name for r in a.reservations] == ["r1"]
    assert [r.name for r in b.reservations] == ["r2", "m1"]  # by their nodes
    # Every pending job has a start now (Slurm's or the adapter's estimate) if it fits at all.
    assert all(j.start is not None for j in a.jobs if j.state is JobState.PENDING
               and j.reservation is None and j.hosts <= 6)  # fmt: skip


def test_dash_m_clusters_are_controllers_of_their_own() -> None:
    runner = Recorded()
    backend = SlurmCliBackend(runner)
    one = SlurmBinding("x", cluster="beta", env={"SLURM_CONF": "/etc/mc.conf"})
    two = SlurmBinding("y", cluster="beta", partition="beta", env={"SLURM_CONF": "/etc/mc.conf"})
    other = SlurmBinding("z", env={"SLURM_CONF": "/etc/mc.conf"})
    results = backend.read_all([one, two, other], NOW)
    assert runner.calls[("/etc/mc.conf", "squeue")] == 2  # -M beta, and the default cluster
    x, y = results["x"], results["y"]
    assert isinstance(x, tuple)
    assert isinstance(y, tuple)
    assert x == y
    assert [j.id for j in x[1]] == ["2000000", "2000001"]
    assert [r.name for r in x[2]] == ["rb"]


@pytest.mark.parametrize("hang", [False, True])
def test_a_controller_that_does_not_answer_fails_only_its_clusters(monkeypatch, hang) -> None:
    runner = Recorded(hang=hang)
    down = (cluster("c", "/etc/down.conf", "alpha"), cluster("d", "/etc/down.conf", "beta"))
    slurm = adapter(runner, *PARTITIONS, *down)
    monkeypatch.setattr(slurm, "now", lambda: NOW)
    results = slurm.backend.read_all(list(slurm.bindings.values()), NOW)
    assert {n: isinstance(r, tuple) for n, r in results.items()} == {
        "a": True, "b": True, "c": False, "d": False
    }  # fmt: skip
    assert results["c"] is results["d"]  # asked once
    asked = sum(n for (conf, _), n in runner.calls.items() if conf == "/etc/down.conf")
    assert asked == 1  # no second command to a silent controller
    assert set(slurm.snapshot(["a", "b"]).clusters) == {"a", "b"}
    with pytest.raises(Unavailable) as failed:
        slurm.snapshot(["a", "d", "c"])
    if not hang:  # the runner's own Unavailable names no cluster, as before
        assert failed.value.cluster == "d"
        assert "the controller does not answer: squeue: error: Unable to contact" in str(
            failed.value
        )


def test_read_of_one_cluster_still_works_and_raises_its_failure() -> None:
    backend = SlurmCliBackend(Recorded())
    nodes, jobs, reservations = backend.read(
        SlurmBinding("b", partition="beta", env={"SLURM_CONF": "/etc/one.conf"}), NOW
    )
    assert len(nodes) == 8
    assert {j.id for j in jobs} >= {"3", "4", "5"}
    assert [r.name for r in reservations] == ["r2", "m1"]
    with pytest.raises(BatchFailure) as failed:
        backend.read(SlurmBinding("c", env={"SLURM_CONF": "/etc/down.conf"}), NOW)
    assert failed.value.kind == "unreachable"
