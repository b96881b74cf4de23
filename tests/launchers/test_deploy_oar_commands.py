"""The argument vectors the OAR deployer runs: an inner job on exactly the granted hosts, its
files, and its command quoted for the login shell OAR runs it with (``$SHELL -c COMMAND``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from coorm_bridge.adapters.oar import commands
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.core.batch import JobSpec

BINDING = OarBinding(name="alpha", property="cluster", value="alpha", host_property="host")
#: Prints $V and its arguments as JSON.
PRINTER = (
    sys.executable,
    "-c",
    "import json, os, sys; print(json.dumps([os.environ['V'], *sys.argv[1:]]))",
)


def job(**changes: object) -> JobSpec:
    fields: dict[str, object] = {
        "name": "solver",
        "user": "alice",
        "argv": ("mpirun", "-np", "4", "./a.out"),
        "hosts": 2,
        "walltime": 3599,
        "reservation": "coorm-s1-alpha",
        "workdir": "/home/alice/runs/s1",
        "environment": {"COORM_CLUSTER": "alpha"},
    }
    return JobSpec.model_validate(fields | changes)


def test_an_inner_job_on_exactly_the_granted_hosts_with_its_files():
    argv = commands.submit_inner(
        BINDING,
        job(),
        "42",
        None,
        hosts=("alpha-2", "alpha-1"),
        output="/home/alice/runs/s1/alpha.out",
        error="/home/alice/runs/s1/alpha.err",
    )
    assert argv == (
        "oarsub",
        "-t",
        "inner=42",
        "-n",
        "solver",
        "-d",
        "/home/alice/runs/s1",
        "-p",
        "cluster='alpha' AND host IN ('alpha-1','alpha-2')",
        "-l",
        "/host=2,walltime=0:59:59",
        "-O",
        "/home/alice/runs/s1/alpha.out",
        "-E",
        "/home/alice/runs/s1/alpha.err",
        "env COORM_CLUSTER=alpha mpirun -np 4 ./a.out",
    )


def test_other_property_names_reach_the_expression_and_the_resources():
    binding = OarBinding(name="a", property="site", value="nancy", host_property="nodename")
    argv = commands.submit_inner(binding, job(hosts=1), "7", "bob", hosts=("n-1",))
    assert argv[:4] == ("runuser", "-u", "bob", "--")
    assert argv[argv.index("-p") + 1] == "site='nancy' AND nodename IN ('n-1')"
    assert argv[argv.index("-l") + 1] == "/nodename=1,walltime=0:59:59"


@pytest.mark.parametrize(
    ("changes", "hosts", "files", "why"),
    [
        ({}, ("alpha-1",), {}, "asks for 2 hosts but names 1"),
        ({}, ("alpha-1", "alpha-1"), {}, "asks for 2 hosts but names 2"),
        ({}, ("alpha-1", "x' OR 'a'='a"), {}, "invalid host name"),
        ({"workdir": "/tmp/it's"}, (), {}, "invalid working directory"),
        ({}, (), {"output": "/tmp/a\nb"}, "invalid output file"),
        ({}, (), {"error": ""}, "invalid error file"),
        ({"argv": ("a=b", "x")}, (), {}, "would be read by env as a variable"),
    ],
)
def test_what_oar_could_not_run_as_asked_is_refused(changes, hosts, files, why):
    with pytest.raises(ValueError, match=why):
        commands.submit_inner(BINDING, job(**changes), "42", None, hosts=hosts, **files)


def test_a_container_id_is_digits():
    with pytest.raises(ValueError, match="invalid OAR job id"):
        commands.submit_inner(BINDING, job(), "42; rm", None)


NASTY = ("it's", "$HOME", "`id`", "a b", "*", "; exit 3", '"', "\\", "!x", "")


@pytest.mark.parametrize("shell", ["sh", "bash", "dash", "zsh"])
def test_the_command_line_gives_every_word_back_under_login_shells(shell, tmp_path):
    """OAR runs ``$SHELL -c COMMAND`` with the user's login shell: the command gets its words
    and its environment exactly."""
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed")
    line = commands.command_line((*PRINTER, *NASTY), {"V": "x y 'z' $Q\nnext line"})
    done = subprocess.run(
        [path, "-c", line], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["x y 'z' $Q\nnext line", *NASTY]


def test_without_environment_the_command_is_the_quoted_words():
    assert commands.command_line(("a b", "c"), {}) == "'a b' c"
    with pytest.raises(ValueError, match="empty command"):
        commands.command_line((), {})
