"""``coorm-bridge serve`` beside the real Slurm 22.05 of slurm-local.sh with a setting Slurm shows
to be wrong: a partition it does not have, a ``-M`` cluster slurmdbd does not know, through a
mixed site too. The daemon does not start: one line naming the file, the key and what Slurm has,
exit status 2, like a mistake in the file itself. A controller that does not answer is no
mistake of the file: that stays exit status 1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.daemons import free_port
from tests.slurm.test_slurm_daemon import serve

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]

PARTITIONS = "partitions with nodes: alpha, beta, gamma"


def test_a_partition_slurm_does_not_have_stops_the_daemon_naming_file_and_key_once_it_answers(
    slurm_partitions, tmp_path: Path
) -> None:
    conf = slurm_partitions.conf
    result, _ = serve(
        tmp_path,
        f'[adapter]\nkind = "slurm"\n[[adapter.cluster]]\nname = "a"\npartition = "alpha"\n'
        f'slurm_conf = "{conf}"\n[[adapter.cluster]]\nname = "b"\npartition = "Beta"\n'
        f'slurm_conf = "{conf}"\n',
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"coorm-bridge: {tmp_path / 'coorm-bridge.toml'}: adapter.cluster.1.partition: Slurm has "
        "no partition 'Beta' (or it has no node); partition names are case-sensitive: did you "
        f"mean 'beta'?; {PARTITIONS}\n"
    )
    # The same settings with a controller that does not answer (this copy's listens on no
    # port): Slurm says nothing of the partition, and the file is not blamed (the check's exit
    # 1: a daemon would start and wait for the controller, tests/slurm/test_slurm_down.py).
    text = conf.read_text()
    copy = tmp_path / "slurm.conf"
    copy.write_text(re.sub(r"^SlurmctldPort=.*$", f"SlurmctldPort={free_port()}", text, flags=re.M))
    result, _ = serve(
        tmp_path,
        '[adapter]\nkind = "slurm"\n[[adapter.cluster]]\nname = "b"\npartition = "Beta"\n'
        'slurm_conf = "slurm.conf"\n',
        "--check",
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the controller does not answer" in result.stdout + result.stderr
    assert "partition" not in result.stderr


def test_a_partition_of_a_mixed_sites_system_is_named_at_its_place(
    slurm_partitions, tmp_path: Path
) -> None:
    conf = slurm_partitions.conf
    (tmp_path / "platform.toml").write_text('[[cluster]]\nname = "sim"\nhosts = 4\n')
    result, _ = serve(
        tmp_path,
        '[adapter]\nkind = "mixed"\n[[adapter.system]]\nkind = "mock"\n'
        'platform = "platform.toml"\nrun_jobs = false\n'
        '[[adapter.system]]\nkind = "slurm"\n[[adapter.system.cluster]]\nname = "d"\n'
        f'partition = "delta"\nslurm_conf = "{conf}"\n',
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"coorm-bridge: {tmp_path / 'coorm-bridge.toml'}: adapter.system.1.cluster.0.partition: "
        f"Slurm has no partition 'delta' (or it has no node); {PARTITIONS}\n"
    )


def test_a_dash_m_cluster_slurmdbd_does_not_know_stops_the_daemon_naming_those_it_knows(
    slurm_clusters, tmp_path: Path
) -> None:
    result, _ = serve(
        tmp_path,
        f'[adapter]\nkind = "slurm"\n[[adapter.cluster]]\nname = "a"\ncluster = "alpha"\n'
        f'slurm_conf = "{slurm_clusters.conf}"\n[[adapter.cluster]]\nname = "b"\n'
        f'cluster = "btea"\nslurm_conf = "{slurm_clusters.conf}"\n',
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"coorm-bridge: {tmp_path / 'coorm-bridge.toml'}: adapter.cluster.1.cluster: slurmdbd "
        "knows no Slurm cluster 'btea'; clusters it knows: alpha, beta\n"
    )
