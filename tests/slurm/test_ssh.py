"""SshRunner against a real, private OpenSSH server (and, with Slurm, the adapter over it).

The ``sshd`` fixture starts ``/usr/sbin/sshd -D -e -f <config>`` as root on a free loopback port
with its own host key, a client key generated for the test in its authorized_keys, and a
known_hosts file naming that host key for ``[127.0.0.1]:PORT``. It is stopped by its PID (and
its per-connection children, found through /proc as descendants of that PID): never any other
sshd. Without sshd (or without root) the tests are skipped, unless ``COORM_REQUIRE_SLURM=1``.
"""

from __future__ import annotations

import getpass
import threading
import time
from collections.abc import Iterator

import pytest

from coorm_bridge.adapters.batch.runner import SshRunner
from coorm_bridge.adapters.batch.settings import SshSettings
from coorm_bridge.adapters.slurm.plugin import make_slurm_adapter
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import AdapterError, JobSpec, JobState, ReservationSpec, Unavailable
from tests.sshd import Sshd, keygen, running_sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture
def runner(sshd: Sshd) -> Iterator[SshRunner]:
    ssh = SshRunner(sshd.target())
    yield ssh
    ssh.close()


# --- the runner -----------------------------------------------------------------------------

NASTY = [
    "plain", "two words", "  padded  ", "", "it's", 'say "hi"', "a;b", "x && y", "p | q",
    "> out", "*", "~", "$HOME", "${PATH}", "back\\slash", "tab\there", "line1\nline2\n",
    "#not a comment", "{a,b}", "!event", "é ü 中",
]  # fmt: skip


def test_an_argument_vector_arrives_verbatim_and_no_shell_runs_it(runner, tmp_path):
    marker = tmp_path / "pwned"
    traps = [f"$(touch {marker})", f"`touch {marker}`", f"; touch {marker}", f"&& touch {marker}"]
    words = [*NASTY, *traps]
    done = runner.run(["printf", "%s\\0", *words])
    assert done.ok, done.stderr
    assert done.stdout.split("\0")[:-1] == words
    assert not marker.exists()


def test_environment_values_are_passed_intact(runner, tmp_path):
    marker = tmp_path / "pwned"
    env = {
        "COORM_A": "two words",
        "COORM_B": f"it's $(touch {marker}); `touch {marker}` *",
        "COORM_C": "line1\nline2",
        "COORM_D": "",
    }
    for name, value in env.items():
        done = runner.run(["printenv", name], env=env)
        assert done.ok, done.stderr
        assert done.stdout == value + "\n"
    assert not marker.exists()


def test_the_runner_env_and_the_command_env_combine(sshd):
    ssh = SshRunner(sshd.target(), env={"COORM_X": "from runner", "COORM_Y": "runner"})
    try:
        done = ssh.run(["printenv", "COORM_X", "COORM_Y"], env={"COORM_Y": "from command"})
        assert done.stdout == "from runner\nfrom command\n"
    finally:
        ssh.close()


def test_exit_status_and_stderr_come_back(runner):
    done = runner.run(["sh", "-c", 'echo "to err" >&2; exit 3'])
    assert (done.returncode, done.stdout, done.stderr) == (3, "", "to err\n")


def test_an_unknown_host_key_is_refused_and_nothing_runs(sshd, tmp_path):
    marker = tmp_path / "ran"
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    ssh = SshRunner(sshd.target(known_hosts=empty))
    with pytest.raises(AdapterError, match="not found in known_hosts") as refused:
        ssh.run(["touch", str(marker)])
    assert not isinstance(refused.value, Unavailable)
    assert not marker.exists()
    ssh.close()


def test_a_changed_host_key_is_refused_and_nothing_runs(sshd, tmp_path):
    marker = tmp_path / "ran"
    other = keygen(tmp_path / "impostor", "impostor").split()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    ssh = SshRunner(sshd.target(known_hosts=known))
    with pytest.raises(AdapterError, match="host key changed") as refused:
        ssh.run(["touch", str(marker)])
    assert not isinstance(refused.value, Unavailable)
    assert not marker.exists()
    ssh.close()


def test_one_connection_serves_every_command(sshd):
    before = sshd.accepted()
    ssh = SshRunner(sshd.target())
    try:
        assert ssh.run(["true"]).ok
        assert ssh._client is not None
        transport = ssh._client.get_transport()
        for i in range(20):
            assert ssh.run(["echo", str(i)]).stdout == f"{i}\n"
            assert ssh._client.get_transport() is transport
    finally:
        ssh.close()
    assert sshd.accepted() - before == 1


def test_after_sshd_restarts_the_runner_reconnects(tmp_path):
    with running_sshd(tmp_path) as server:
        ssh = SshRunner(server.target())
        try:
            assert ssh.run(["echo", "one"]).stdout == "one\n"
            assert ssh._client is not None
            first = ssh._client.get_transport()
            server.stop()
            with pytest.raises(Unavailable):
                ssh.run(["echo", "lost"])
            server.start()  # same port, same host key
            assert ssh.run(["echo", "two"]).stdout == "two\n"
            assert ssh._client.get_transport() is not first
            assert ssh.run(["echo", "three"]).stdout == "three\n"
        finally:
            ssh.close()
        assert server.accepted() == 2


def test_a_connection_lost_during_a_command_is_unavailable(tmp_path):
    with running_sshd(tmp_path) as server:
        ssh = SshRunner(server.target())
        killer = threading.Timer(1.0, server.stop)
        try:
            assert ssh.run(["true"]).ok
            killer.start()
            with pytest.raises(Unavailable):
                ssh.run(["sleep", "10"])
        finally:
            killer.join()
            ssh.close()


def test_a_command_over_its_timeout_is_unavailable_and_the_next_one_works(runner):
    started = time.monotonic()
    with pytest.raises(Unavailable):
        runner.run(["sleep", "10"], timeout=1)
    assert time.monotonic() - started < 5
    assert runner.run(["echo", "next"]).stdout == "next\n"


def test_a_timed_out_command_says_what_it_printed_on_stderr(runner):
    # What Slurm's commands do when slurm.conf is missing on the front-end: say so, and retry.
    with pytest.raises(Unavailable) as caught:
        runner.run(["sh", "-c", "echo 'error: no slurm.conf, retrying' >&2; sleep 10"], timeout=1)
    assert "it said: error: no slurm.conf, retrying" in str(caught.value)


def test_an_sshd_that_is_down_is_unavailable(tmp_path):
    with running_sshd(tmp_path) as server:
        target = server.target()
        server.stop()
        ssh = SshRunner(target)
        with pytest.raises(Unavailable, match=r"127\.0\.0\.1"):
            ssh.run(["true"])
        ssh.close()


# --- the Slurm adapter over SSH -------------------------------------------------------------

USER = getpass.getuser()


def _view(shot):
    return {
        name: (
            [(n.name, n.state) for n in cluster.nodes],
            sorted((j.id, j.state, j.host_names) for j in cluster.jobs),
            sorted((r.name, r.start, r.end, r.host_names, r.users) for r in cluster.reservations),
        )
        for name, cluster in shot.clusters.items()
    }


@pytest.mark.slurm
def test_the_slurm_adapter_over_ssh_sees_and_does_what_the_local_one_does(slurm_partitions, sshd):
    clusters = tuple(
        SlurmCluster(name=p, partition=p, slurm_conf=slurm_partitions.conf)
        for p in slurm_partitions.clusters
    )
    ssh = SshSettings(
        host="127.0.0.1", port=sshd.port, user="root", key_file=sshd.client_key,
        known_hosts=sshd.known_hosts,
    )  # fmt: skip
    local = make_slurm_adapter(SlurmSettings(clusters=clusters))
    remote = make_slurm_adapter(SlurmSettings(clusters=clusters, ssh=ssh))
    first, second = slurm_partitions.clusters[:2]
    logins = sshd.accepted()
    try:
        job = local.submit(
            first,
            JobSpec(name="sleeper", user=USER, argv=("sleep", "600"), hosts=2, walltime=600,
                    workdir="/tmp"),
        )  # fmt: skip
        now = local.now()
        theirs = ReservationSpec(
            name="coorm-ssh-local", start=now + 600, end=now + 1200, hosts=3, users=(USER,)
        )
        local.create_reservation(second, theirs)
        deadline = time.monotonic() + 60
        while local.job_state(first, job) is not JobState.RUNNING:
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.5)
        assert remote.job_state(first, job) is JobState.RUNNING

        assert {c.name: c.hosts for c in remote.clusters()} == {
            c.name: c.hosts for c in local.clusters()
        }
        # Launchers are told to submit where the bridge's commands run: on the front end.
        assert {c.submission.front_end for c in remote.clusters() if c.submission} == {"127.0.0.1"}
        assert {c.submission.front_end for c in local.clusters() if c.submission} == {None}
        seen_here, seen_there = _view(local.snapshot()), _view(remote.snapshot())
        assert seen_there == seen_here
        assert job in [j[0] for j in seen_there[first][1]]
        assert [r[0] for r in seen_there[second][2]] == ["coorm-ssh-local"]

        ours = ReservationSpec(
            name="coorm-ssh-remote", start=now + 1800, end=now + 2400, hosts=2, users=(USER,)
        )
        handle = remote.create_reservation(first, ours)
        assert (handle.start, handle.end, len(handle.host_names)) == (ours.start, ours.end, 2)
        made = {r.name: r for r in local.snapshot([first]).clusters[first].reservations}
        assert made["coorm-ssh-remote"].host_names == handle.host_names
        remote.delete_reservation(first, "coorm-ssh-remote")
        assert local.snapshot([first]).clusters[first].reservations == ()
    finally:
        remote.close()
        local.close()
        slurm_partitions.reset()
    assert sshd.accepted() - logins == 1  # every command over one connection
