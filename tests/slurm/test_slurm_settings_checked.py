"""The settings the Slurm adapter checks against Slurm when it reads its clusters (at the
daemon's start): a partition, a ``-M`` cluster or a slurm.conf that is wrong is the admin's
mistake (Misconfigured, its key in the ``[adapter]`` table and what Slurm has), never a Slurm
that does not answer, which stays Unavailable. Slurm's answers are Slurm 22.05.8's: the
recorded ``sinfo --json`` (partitions alpha, beta and gamma) and the words below, copied from
the test Slurm of slurm-local.sh; the real thing is in test_slurm_config_errors.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.plugin import make_slurm_adapter
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import Misconfigured, Unavailable

SINFO = (Path(__file__).parent.parent / "data" / "slurm" / "sinfo.json").read_text()
#: sinfo -M nosuch (Slurm 22.05.8 with slurmdbd), exit 1.
NO_SUCH_CLUSTER = (
    "sinfo: error: No cluster 'nosuch' known by database.\n"
    "sinfo: error: 'nosuch' can't be reached now, or it is an invalid entry for --cluster.  "
    "Use 'sacctmgr list clusters' to see available clusters.\n"
)
#: sinfo with SLURM_CONF a file without ClusterName (no controller asked), exit 1.
UNPROCESSABLE = (
    "sinfo: error: ClusterName needs to be specified\n"
    "sinfo: fatal: Unable to process configuration file\n"
)
DOWN = "sinfo: error: Unable to contact slurm controller (connect failure)"


class Slurm(Runner):
    """sinfo --json answers the recorded nodes for ``/etc/slurm.conf`` and ``-M alpha``;
    ``-M nosuch`` is unknown to slurmdbd, ``-M beta`` registered but its controller down,
    ``/etc/empty.conf`` no slurm.conf, ``/etc/down.conf`` a controller that does not answer.
    sacctmgr knows alpha and beta (``dbd_down``: slurmdbd does not answer it)."""

    def __init__(self, *, dbd_down: bool = False) -> None:
        self.dbd_down = dbd_down
        self.calls: list[tuple[str, ...]] = []

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        self.calls.append(tuple(argv))
        conf = (env or {}).get("SLURM_CONF", "/etc/slurm.conf")
        if argv[0] == "sacctmgr":
            if self.dbd_down:
                return Completed(1, "", "sacctmgr: error: Problem talking to the database")
            return Completed(0, "alpha\nbeta\n", "")
        assert argv[:2] == ("sinfo", "--json"), argv
        cluster = argv[argv.index("-M") + 1] if "-M" in argv else None
        if conf == "/etc/empty.conf":
            return Completed(1, "", UNPROCESSABLE)
        if conf == "/etc/down.conf":
            return Completed(1, "", DOWN)
        if cluster == "nosuch":
            return Completed(1, "", NO_SUCH_CLUSTER)
        if cluster == "beta":
            return Completed(1, "", NO_SUCH_CLUSTER.split("\n", 1)[1].replace("nosuch", "beta"))
        return Completed(0, SINFO, "")


def clusters(runner: Runner, *tables: SlurmCluster) -> Misconfigured | Unavailable:
    adapter = make_slurm_adapter(SlurmSettings(clusters=tables))
    adapter.backend = SlurmCliBackend(runner)
    try:
        adapter.clusters()
    except (Misconfigured, Unavailable) as error:
        return error
    raise AssertionError("the clusters were read")


def test_a_partition_slurm_does_not_have_is_the_setting_of_its_cluster() -> None:
    found = clusters(
        Slurm(),
        SlurmCluster(name="a", partition="alpha"),
        SlurmCluster(name="d", partition="Delta"),
    )
    assert isinstance(found, Misconfigured)
    assert found.key == "cluster.1.partition"
    assert found.reason == (
        "Slurm has no partition 'Delta' (or it has no node); partitions with nodes: alpha, "
        "beta, gamma"
    )
    assert found.cluster == "d"


def test_a_dash_m_cluster_slurmdbd_does_not_know_is_named_with_those_it_knows() -> None:
    runner = Slurm()
    found = clusters(runner, SlurmCluster(name="a", cluster="nosuch"))
    assert isinstance(found, Misconfigured)
    assert found.key == "cluster.0.cluster"
    assert (
        found.reason == "slurmdbd knows no Slurm cluster 'nosuch'; clusters it knows: alpha, beta"
    )
    # Without slurmdbd's list the mistake is still the setting's.
    found = clusters(Slurm(dbd_down=True), SlurmCluster(name="a", cluster="nosuch"))
    assert isinstance(found, Misconfigured)
    assert found.reason == "slurmdbd knows no Slurm cluster 'nosuch'"
    # A cluster slurmdbd knows whose controller does not answer: Slurm's trouble, not the file's.
    found = clusters(Slurm(), SlurmCluster(name="b", cluster="beta"))
    assert type(found) is Unavailable
    assert "'beta' can't be reached now" in str(found)


def test_a_slurm_conf_slurm_cannot_process_is_the_setting_at_fault() -> None:
    found = clusters(Slurm(), SlurmCluster(name="a", slurm_conf=Path("/etc/empty.conf")))
    assert isinstance(found, Misconfigured)
    assert found.key == "cluster.0.slurm_conf"
    assert found.reason == (
        "Slurm cannot use /etc/empty.conf as its configuration: sinfo: error: ClusterName needs "
        "to be specified; sinfo: fatal: Unable to process configuration file"
    )
    # A slurm.conf Slurm can process, of a controller that does not answer: no mistake.
    found = clusters(Slurm(), SlurmCluster(name="a", slurm_conf=Path("/etc/down.conf")))
    assert type(found) is Unavailable
    assert str(found) == f"a: the controller does not answer: {DOWN}"
