"""A cluster's hardware from Slurm's node records, and an unknown partition named as such."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coorm_bridge.adapters.batch.backend import BatchFailure
from coorm_bridge.adapters.slurm import answers
from coorm_bridge.adapters.slurm.hardware import check_errors, hardware_of

DOWN = Path(__file__).parent.parent / "data" / "slurm" / "down"
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


@pytest.mark.parametrize(
    ("recorded", "what"),
    [("sinfo_json_controller_down.json", "sinfo --json"),
     ("squeue_json_controller_down.json", "squeue --json")],
)  # fmt: skip
def test_a_json_unspecified_error_says_the_controller_does_not_answer(recorded, what):
    # Slurm 22.05 with slurmctld stopped (or stalled, or too busy to answer): exit 0, this, and
    # no node. Before, "sinfo --json: Slurm reported: Unspecified error" of kind "other", and a
    # daemon starting then stopped with it.
    document = json.loads((DOWN / recorded).read_text())
    with pytest.raises(BatchFailure) as failed:
        check_errors(document, what)
    assert failed.value.kind == "unreachable"
    assert str(failed.value).startswith(f"the controller does not answer: {what}: Slurm reported: ")
    assert "Unspecified error" in str(failed.value)


@pytest.mark.parametrize(
    ("said", "kind", "message"),
    [
        ("slurm_load_partitions: Unable to contact slurm controller (connect failure)",
         "unreachable", "the controller does not answer: slurm_load_partitions: Unable to contact "
                        "slurm controller (connect failure)"),
        ("slurm_load_jobs error: Socket timed out on send/recv operation", "unreachable",
         "the controller does not answer: slurm_load_jobs error: Socket timed out on send/recv "
         "operation"),
        ("sacctmgr: error: Problem talking to database", "unreachable",
         "sacctmgr: error: Problem talking to database"),  # slurmdbd's, not the controller's
        ("Requested nodes are busy", "busy", "Requested nodes are busy"),
    ],
)  # fmt: skip
def test_a_command_the_controller_did_not_answer_says_so_first(said, kind, message):
    assert answers.classify_error(said) == kind
    assert answers.not_answering(said) == message
    assert answers.not_answering(message) == message  # said once


def test_an_answer_with_errors_is_a_failure_not_an_empty_partition():
    document = {"errors": [{"error": "Invalid user id"}], "nodes": []}
    with pytest.raises(BatchFailure, match=r"^sinfo --json: Slurm reported: Invalid user id$"):
        check_errors(document, "sinfo --json")
    check_errors({"errors": [], "nodes": []}, "sinfo --json")
