"""The application file: what coorm-launch accepts, and the one-line errors naming file and key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coorm_bridge.core.model import Filter
from coorm_bridge.launchers.app import AppError, load_app, parse_app

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").rglob("*.toml"))
SCRIPT = Path(sys.executable).with_name("coorm-launch")

GOOD = """
name = "ocean-atmosphere"
duration = 600
[filter]
min_ram_per_host_mib = 1024
[selector]
name = "rigid"
params = { nodes = { c1 = 2, c2 = 1 } }
[deployment]
mpi = ["mpiexec", "-f", "{hostfile}", "-n", "{processes}"]
run_root = "runs"
ports = [41000, 41009]
[[component]]
name = "ocean"
command = ["bin/ocean", "./ocean.nml", "--steps", "10"]
clusters = ["c1"]
processes_per_host = 4
environment = { OMP_NUM_THREADS = "2" }
[[component]]
name = "atmosphere"
command = ["atmo"]
clusters = ["c2"]
max_hosts = 4
"""


def write(tmp_path: Path, text: str, name: str = "app.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def ocean(tmp_path: Path) -> None:
    """GOOD's ``bin/ocean``, which ``--check`` wants beside the file: an executable file."""
    program = tmp_path / "bin" / "ocean"
    program.parent.mkdir(exist_ok=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)


def test_a_good_file_with_relative_paths_from_its_folder(tmp_path):
    app = load_app(write(tmp_path, GOOD))
    ocean, atmosphere = app.components
    assert ocean.command == (
        str(tmp_path / "bin/ocean"),
        str(tmp_path / "ocean.nml"),
        "--steps",
        "10",
    )
    assert atmosphere.command == ("atmo",)  # found on the job's PATH
    assert app.deployment.run_root == tmp_path / "runs"
    assert app.deployment.ports == (41000, 41009)
    # every component names its clusters: the subscription asks for those only
    assert app.subscription_filter == Filter(clusters=("c1", "c2"), min_ram_per_host_mib=1024)


def test_the_label_defaults_to_the_file_name(tmp_path):
    text = GOOD.replace('name = "ocean-atmosphere"\n', "")
    assert load_app(write(tmp_path, text, "climate.toml")).name == "climate"


@pytest.mark.parametrize(
    ("change", "key", "why"),
    [
        (("duration = 600", "duration = 0"), "duration", "greater than 0"),
        (("duration = 600", "duration = 1e300"), "duration", "integer"),
        (('name = "ocean"', 'name = "oc ean"'), "component.0.name", "not a valid name"),
        (("[filter]", '[filter]\nclusters = ["c2"]'), "component.0.clusters", "c1 not in"),
        (
            ("processes_per_host = 4", "processes_per_host = 0"),
            "processes_per_host",
            "greater than 0",
        ),
        (("max_hosts = 4", "max_hosts = 4\nmin_hosts = 5"), "component.1", "below min_hosts"),
        (('OMP_NUM_THREADS = "2"', '"1X" = "2"'), "component.0.environment", "variable name"),
        (('OMP_NUM_THREADS = "2"', 'COORM_RUN_JSON = "x"'), "environment", "set by coorm"),
        (('OMP_NUM_THREADS = "2"', 'A = "a\\u0000b"'), "environment.A", "NUL"),
        (('"{processes}"]', '"{ranks}"]'), "deployment.mpi", "{ranks}"),
        (("ports = [41000, 41009]", "ports = [41009, 41000]"), "deployment.ports", "ends"),
        (("ports = [41000, 41009]", "ports = [80, 90]"), "deployment.ports.0", "1024"),
        (('name = "rigid"', 'name = "rigid; rm"'), "selector.name", "pattern"),
        (("[deployment]", "[deployment]\nshell = true"), "deployment.shell", "Extra inputs"),
        (('command = ["atmo"]', "command = []"), "component.1.command", "at least 1"),
        (('name = "atmosphere"', 'name = "ocean"'), "(top)", "ocean repeat"),
    ],
)
def test_bad_files_say_which_key_and_why(tmp_path, change, key, why):
    old, new = change
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(AppError) as raised:
        load_app(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ")
    assert key in message
    assert why in message
    assert "\n" not in message


def test_no_component_and_not_toml():
    with pytest.raises(AppError, match="component: Field required"):
        parse_app("duration = 5", source="x.toml")
    with pytest.raises(AppError, match=r"x.toml: not valid TOML"):
        parse_app("[component", source="x.toml")
    with pytest.raises(AppError, match="cannot read"):
        load_app("/nonexistent/app.toml")


def check(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "--check", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_pass_check(example, tmp_path):
    result = check(str(example), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{example}: ok")


def test_there_are_two_examples():
    assert len(EXAMPLES) >= 2, EXAMPLES


def test_check_refuses_with_exit_status_2_naming_file_and_key(tmp_path):
    path = write(tmp_path, GOOD.replace("duration = 600", "duration = -1"))
    result = check(str(path), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"coorm-launch: {path}: duration: ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda path: None, "'bin/ocean' is not there (no {program}): a program given with a '/'"),
        (lambda path: path.write_text("#!/bin/sh\n"), "'bin/ocean' is not executable: chmod +x"),
        (lambda path: path.mkdir(), "'bin/ocean' is not a program ({program} is a folder)"),
    ],
    ids=["missing", "not-executable", "folder"],
)
def test_check_refuses_a_program_of_the_files_folder_that_cannot_run(tmp_path, make, why):
    """What made examples/moldable fail at once when run (``./solver``: no such file): found by
    --check, and by a launch before it asks the bridge for anything."""
    program = tmp_path / "bin" / "ocean"
    program.parent.mkdir()
    make(program)
    path = write(tmp_path, GOOD)
    said = f"coorm-launch: {path}: component.0.command.0: {why.format(program=program)}"
    result = check(str(path), cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(said), result.stderr
    assert result.stderr.count("\n") == 1
    launch = subprocess.run(
        [str(SCRIPT), str(path), "--url", f"unix://{tmp_path}/no-bridge.sock"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert (launch.returncode, launch.stderr) == (2, result.stderr)


def test_programs_on_the_jobs_path_or_absolute_are_left_to_the_jobs(tmp_path):
    """A bare name is looked up on the job's PATH, an absolute path is the cluster's: neither
    need exist on the launcher's host."""
    ocean(tmp_path)
    text = GOOD.replace('command = ["atmo"]', 'command = ["/opt/site/bin/atmo"]')
    assert check(str(write(tmp_path, text)), cwd=tmp_path).returncode == 0
    assert check(str(write(tmp_path, GOOD, "bare.toml")), cwd=tmp_path).returncode == 0


def test_check_builds_the_selector_with_its_parameters(tmp_path):
    ocean(tmp_path)
    unknown = write(tmp_path, GOOD.replace('name = "rigid"', 'name = "no-such-selector"'))
    result = check(str(unknown), cwd=tmp_path)
    assert result.returncode == 2
    assert "selector" in result.stderr
    assert "no-such-selector" in result.stderr
    bad = write(tmp_path, GOOD.replace("c1 = 2, c2 = 1", "c1 = -2"), "bad.toml")
    result = check(str(bad), cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    assert "selector.params" in result.stderr
    assert "Traceback" not in result.stderr


NO_DURATION = """
from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    work: float


class Model:
    Params = Params

    def __init__(self, params):
        self.params = params

    def select(self, clusters, interconnect, view, now):
        return None
"""


def test_a_duration_for_a_selector_that_computes_its_own_is_refused(tmp_path):
    ocean(tmp_path)
    (tmp_path / "model_selector.py").write_text(NO_DURATION)
    text = GOOD.replace('name = "rigid"', 'name = "model_selector:Model"').replace(
        "params = { nodes = { c1 = 2, c2 = 1 } }", "params = { work = 1e6 }"
    )
    result = check(str(write(tmp_path, text)), cwd=tmp_path)
    assert result.returncode == 2
    assert "duration: selector 'model_selector:Model' computes its own duration" in result.stderr
    without = write(tmp_path, text.replace("duration = 600\n", ""), "ok.toml")
    result = check(str(without), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
