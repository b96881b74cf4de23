"""The OAR deployer against answers recorded from a real OAR 2.5.9 (tests/data/oar/deploy/, see
its README): the container found by name, the inner job's argument vector, states and exit
statuses as OAR stores them, cancellation, host addresses, the front-end check."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.oar import answers, commands
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.core.model import ClusterInfo, Submission
from coorm_bridge.launchers.deploy import deployer_for
from coorm_bridge.launchers.deploy.base import DeployError, JobStatus
from coorm_bridge.launchers.deploy.oar import OarDeployer
from coorm_bridge.launchers.rundir import JobPlan

DATA = Path(__file__).resolve().parents[1] / "data" / "oar" / "deploy"
ALPHA = Submission(kind="oar", cluster="alpha")


def recorded(name: str) -> Completed:
    answer = json.loads((DATA / f"{name}.json").read_text())
    return Completed(answer["returncode"], answer["stdout"], answer["stderr"])


def recorded_job(name: str) -> dict[str, Any]:
    (job,) = json.loads(recorded(name).stdout).values()
    return dict(job)


@dataclass
class Replay(Runner):
    """Answers each command with the next recorded answer; keeps what it was asked."""

    answers: list[Completed]
    calls: list[tuple[str, ...]] = field(default_factory=list)
    envs: list[Mapping[str, str] | None] = field(default_factory=list)

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        self.calls.append(tuple(argv))
        self.envs.append(env)
        assert self.answers, f"no answer left for {argv}"
        return self.answers.pop(0)


def plan(tmp_path: Path, reservation: str | None = "coorm-rec-alpha") -> JobPlan:
    return JobPlan(
        cluster="alpha",
        component="solver",
        hosts=("alpha-2", "alpha-1"),
        reservation=reservation,
        argv=("mpirun", "--hostfile", str(tmp_path / "alpha.hosts"), "-np", "4", "./solver"),
        environment={
            "COORM_CLUSTER": "alpha",
            "COORM_RUN_JSON": str(tmp_path / "run.json"),
            "OMP_NUM_THREADS": "2",
        },
        workdir=tmp_path,
        stdout=tmp_path / "alpha.out",
        stderr=tmp_path / "alpha.err",
    )


def deployer(*names: str, submission: Submission = ALPHA) -> tuple[OarDeployer, Replay]:
    runner = Replay([recorded(name) for name in names])
    return OarDeployer("alpha", submission, runner), runner


# -- submitting --------------------------------------------------------------------------------


def test_an_inner_job_into_the_named_container_on_exactly_the_granted_hosts(tmp_path):
    oar, runner = deployer("oarstat_current", "oarsub_inner")
    assert oar.submit(plan(tmp_path), 600) == "4285"
    assert runner.calls[0] == ("oarstat", "-J")
    assert runner.calls[1] == (
        "oarsub",
        "-t",
        "inner=4284",  # the container's id, found by its name
        "-n",
        "solver",
        "-d",
        str(tmp_path),
        "-p",
        "cluster='alpha' AND host IN ('alpha-1','alpha-2')",
        "-l",
        f"/host=2,walltime={commands.walltime(600)}",
        "-O",
        str(tmp_path / "alpha.out"),
        "-E",
        str(tmp_path / "alpha.err"),
        f"env COORM_CLUSTER=alpha COORM_RUN_JSON={tmp_path}/run.json OMP_NUM_THREADS=2 "
        f"mpirun --hostfile {tmp_path}/alpha.hosts -np 4 ./solver",
    )
    assert runner.envs == [{"TZ": "UTC"}] * 2


def test_the_newest_container_of_a_name_is_the_one_a_move_left():
    data = json.loads(recorded("oarstat_moved").stdout)
    named = sorted(k for k, j in data.items() if j["name"] == "coorm-rec-alpha")
    assert named == ["4284", "4294"]  # the running one, and the one a move submitted
    assert answers.container(data, "coorm-rec-alpha") == "4294"
    assert answers.container(data, "outside") is None  # a job of that name, not a container


def test_finished_containers_are_not_looked_at():
    data = json.loads(recorded("oarstat_moved").stdout)
    data["4294"]["state"] = "Error"  # the move's container was refused
    assert answers.container(data, "coorm-rec-alpha") == "4284"


@pytest.mark.parametrize("listing", ["oarstat_current", "oarstat_unknown"])
def test_no_container_of_that_name_is_said(tmp_path, listing):
    oar, runner = deployer(listing)
    with pytest.raises(DeployError, match="no live container named 'coorm-gone'"):
        oar.submit(plan(tmp_path, "coorm-gone"), 600)
    assert len(runner.calls) == 1  # nothing submitted


def test_what_oarsub_refused_is_told(tmp_path):
    oar, _ = deployer("oarstat_current", "oarsub_refused")
    with pytest.raises(DeployError, match=r"oarsub refused the job: .*invalid container id"):
        oar.submit(plan(tmp_path), 600)


def test_a_plan_without_a_placeholder_is_best_effort_work_on_exactly_its_hosts(tmp_path):
    """A preemptible request's job: outside any container, on its hosts, which OAR takes back
    by itself when a job or a container needs them (tests/oar: the sweep example on OAR)."""
    oar, runner = deployer("oarsub_inner")
    assert oar.submit(plan(tmp_path, None), 600) == "4285"
    (argv,) = runner.calls  # no container to look up
    assert argv[:3] == ("oarsub", "-t", "besteffort")
    assert not any(word.startswith("inner=") for word in argv)
    assert argv[argv.index("-p") + 1] == "cluster='alpha' AND host IN ('alpha-1','alpha-2')"
    assert argv[argv.index("-l") + 1] == f"/host=2,walltime={commands.walltime(600)}"


def test_a_plan_oar_could_not_run_is_refused_before_oarsub(tmp_path):
    oar, runner = deployer("oarstat_current")
    bad = dataclasses.replace(plan(tmp_path), workdir=Path("/tmp/it's"))
    with pytest.raises(DeployError, match="invalid working directory"):
        oar.submit(bad, 600)
    assert runner.calls == [("oarstat", "-J")]


def test_the_bridge_names_other_properties():
    submission = Submission(
        kind="oar", cluster="nancy", cluster_property="site", host_property="node"
    )
    oar = deployer_for(ClusterInfo(name="a", hosts=2, submission=submission), object, "s1")
    assert isinstance(oar, OarDeployer)
    assert (oar.binding.property, oar.binding.value, oar.binding.host_property) == (
        "site",
        "nancy",
        "node",
    )
    # without a value, the cluster's name (the adapter's default)
    default = OarDeployer("beta", Submission(kind="oar"), Replay([]))
    assert (default.binding.property, default.binding.value) == ("cluster", "beta")


@pytest.mark.parametrize(
    ("prop", "host_prop", "named"),
    [
        ("cluster", "host", {}),
        ("site", "node", {"cluster_property": "site", "host_property": "node"}),
    ],
)
def test_the_deployer_selects_what_the_bridges_binding_selects(prop, host_prop, named):
    """Adapter to launcher: the OAR binding's submission, read back by the deployer, selects
    the same resources; OAR's default names are left out of the answer."""
    binding = OarBinding(
        name="a", property=prop, value="nancy", host_property=host_prop, front_end="fe"
    )
    submission = binding.submission()
    assert submission == Submission(kind="oar", cluster="nancy", front_end="fe", **named)
    oar = OarDeployer("a", submission, Replay([]))
    assert oar.binding == binding
    assert oar.remote


def test_through_a_front_end_the_run_directory_must_be_shared(tmp_path):
    remote = Submission(kind="oar", cluster="alpha", front_end="frontend.example.org")
    oar, runner = deployer(submission=remote)
    runner.answers = [Completed(1, "", "")]
    with pytest.raises(DeployError, match="front-end does not see"):
        oar.submit(plan(tmp_path), 600)
    assert runner.calls == [("test", "-r", str(tmp_path / "run.json"))]


# -- watching ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "job", "expected"),
    [
        ("oarstat_running", "4285", JobStatus("running")),
        ("oarstat_terminated", "4285", JobStatus("completed", 0)),
        ("oarstat_exit3", "4286", JobStatus("failed", 3)),
        ("oarstat_signal9", "4287", JobStatus("failed", 137, "signal 9")),
        ("oarstat_deleted", "4288", JobStatus("cancelled", None, "deleted (oardel)")),
        # OAR deletes a job at its walltime too, and says so
        (
            "oarstat_walltime",
            "4289",
            JobStatus("failed", None, "killed at the end of its walltime"),
        ),
        ("oarstat_unknown", "987654", JobStatus("unknown", None, "OAR no longer knows job 987654")),
        (
            "oarstat_too_long",
            "4291",
            JobStatus(
                "pending",
                None,
                "OAR finds no room for it in its container (hosts or time): it waits",
            ),
        ),
    ],
)
def test_states_and_exit_statuses_as_oar_stores_them(name, job, expected):
    oar, runner = deployer(name)
    assert oar.status(job) == expected
    assert runner.calls == [("oarstat", "-J", "-f", "-j", job)]


@pytest.mark.parametrize(
    ("status", "decoded"),
    [
        (0, (0, None)),
        (256, (1, None)),
        (768, (3, None)),
        (65280, (255, None)),  # what mpirun's failure gave on the real OAR
        (9, (0, 9)),
        (139, (0, 11)),  # SIGSEGV with a core dump (bit 7)
        (0x7F, None),  # stopped, not ended
        (None, None),
        (-1, None),
        (0x10000, None),
    ],
)
def test_wait_statuses_decode_as_waitpid_wrote_them(status, decoded):
    assert answers.decode_wait_status(status) == decoded


def test_unreadable_answers_are_errors_not_states():
    oar, _ = deployer()
    oar.runner = Replay([Completed(0, "Can't connect to the database", "")])
    with pytest.raises(DeployError, match="printed no JSON"):
        oar.status("4285")
    with pytest.raises(ValueError, match="has no state"):
        answers.job({"1": {"name": "x"}}, "1")


# -- cancelling --------------------------------------------------------------------------------


def test_cancel_deletes_the_job():
    oar, runner = deployer("oardel_running")
    oar.cancel("4288")
    assert runner.calls == [("oardel", "4288")]


def test_cancelling_a_job_oar_no_longer_knows_is_no_error():
    oar, runner = deployer("oardel_unknown", "oarstat_unknown")
    oar.cancel("987654")
    assert runner.calls == [("oardel", "987654"), ("oarstat", "-J", "-f", "-j", "987654")]


def test_a_refused_deletion_of_a_running_job_is_an_error():
    oar, _ = deployer("oardel_unknown", "oarstat_running")
    with pytest.raises(DeployError, match="oardel 4285: Cannot frag"):
        oar.cancel("4285")


# -- addresses ---------------------------------------------------------------------------------


def test_the_address_is_the_network_address_oar_reaches_the_host_at():
    oar, runner = deployer("oarnodes_host")
    assert oar.address("alpha-1") == "alpha-1"  # the lab names its nodes by their address
    assert oar.address("alpha-1") == "alpha-1"
    assert runner.calls == [("oarnodes", "-J", "--sql", "host='alpha-1'")]  # asked once


def test_the_start_s_hosts_are_looked_up_in_one_command_before_the_submission():
    data = json.loads(recorded("oarnodes_host").stdout)
    second = {f"{key}0": {**raw, "host": "alpha-2", "network_address": "10.1.0.2"}
              for key, raw in data.items()}  # fmt: skip
    oar, _ = deployer()
    oar.runner = runner = Replay([Completed(0, json.dumps({**data, **second}), "")])
    oar.warm(["alpha-1", "alpha-2"], None)
    assert runner.calls == [("oarnodes", "-J", "--sql", "host IN ('alpha-1','alpha-2')")]
    assert (oar.address("alpha-1"), oar.address("alpha-2")) == ("alpha-1", "10.1.0.2")
    assert len(runner.calls) == 1  # nothing asked at the submission
    oar.warm(["alpha-1"], None)
    assert len(runner.calls) == 1


def test_the_container_is_looked_up_before_the_submission_and_once(tmp_path):
    oar, runner = deployer("oarstat_current", "oarsub_inner")
    oar._container_id("coorm-rec-alpha")  # what warm does beside the addresses
    assert runner.calls == [("oarstat", "-J")]
    assert oar.submit(plan(tmp_path), 600) == "4285"
    assert [call[0] for call in runner.calls] == ["oarstat", "oarsub"]  # not looked up again


def test_an_address_that_differs_from_the_name_is_used():
    data = json.loads(recorded("oarnodes_host").stdout)
    for resource in data.values():
        resource["network_address"] = "10.1.0.1"
    oar, _ = deployer()
    oar.runner = Replay([Completed(0, json.dumps(data), "")])
    assert oar.address("alpha-1") == "10.1.0.1"


def test_without_an_answer_the_address_is_the_name():
    oar, _ = deployer("oardel_unknown")  # any failed command
    assert oar.address("alpha-1") == "alpha-1"
    oar, _ = deployer("oarstat_unknown")  # nothing printed
    assert oar.address("alpha-2") == "alpha-2"
