"""A cluster's hardware from Slurm's node records, and an unknown partition named as such."""

from __future__ import annotations

import pytest

from coorm_bridge.adapters.batch.backend import BatchFailure
from coorm_bridge.adapters.slurm.hardware import check_errors, hardware_of

NODES = [
    {"name": "a1", "partitions": ["alpha"], "cpus": 4, "real_memory": 2000},
    {"name": "a2", "partitions": ["alpha", "all"], "cpus": 2, "real_memory": 4000},
    {"name": "b1", "partitions": ["beta", "all"], "cpus": 8, "real_memory": 1000},
    {"name": "a2", "partitions": ["alpha", "all"], "cpus": 2, "real_memory": 4000},
]


def test_the_partitions_hosts_and_their_smallest_cores_and_ram():
    alpha = hardware_of(NODES, "alpha")
    assert (alpha.hosts, alpha.cores_per_host, alpha.ram_per_host_mib) == (2, 2, 2000)
    assert hardware_of(NODES, None).hosts == 3  # a node listed twice counts once


@pytest.mark.parametrize(
    ("partition", "message"),
    [
        ("gamma", "Slurm has no partition 'gamma' (or it has no node); partitions with nodes: "
                  "all, alpha, beta"),
        ("Alpha", "Slurm has no partition 'Alpha' (or it has no node); partition names are "
                  "case-sensitive: did you mean 'alpha'?; partitions with nodes: all, alpha, beta"),
    ],
)  # fmt: skip
def test_a_partition_that_is_not_there_is_named_with_those_that_are(partition, message):
    with pytest.raises(BatchFailure) as caught:
        hardware_of(NODES, partition)
    assert str(caught.value) == message
    # The admin's mistake, not Slurm's: the daemon does not start, naming the setting.
    assert (caught.value.kind, caught.value.key) == ("misconfigured", "partition")


@pytest.mark.parametrize(
    ("partition", "cluster", "key"),
    [(None, None, "slurm_conf"), (None, "beta", "cluster"), ("alpha", None, "partition")],
)
def test_a_controller_without_nodes_says_so_of_the_setting_that_led_there(partition, cluster, key):
    with pytest.raises(BatchFailure) as caught:
        hardware_of([], partition, cluster)
    expected = (
        "Slurm lists no node on this controller"
        if partition is None
        else "Slurm has no partition 'alpha' (or it has no node), and no partition with nodes "
        "at all"
    )
    assert str(caught.value) == expected
    assert (caught.value.kind, caught.value.key) == ("misconfigured", key)


def test_an_answer_with_errors_is_a_failure_not_an_empty_partition():
    # sinfo --json of Slurm 22.05 while slurmctld is down: exit 0, this, and no node.
    document = {"errors": [{"error": "Unspecified error", "errno": -1}], "nodes": []}
    with pytest.raises(BatchFailure, match=r"^sinfo --json: Slurm reported: Unspecified error$"):
        check_errors(document, "sinfo --json")
    check_errors({"errors": [], "nodes": []}, "sinfo --json")
