"""What a site gets from `pip install .`: one namespace, a working command."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import coorm_bridge
import coorm_bridge.adapters.base
import coorm_bridge.launchers.selectors

ROOT = Path(__file__).resolve().parents[2]


def test_subpackages_are_installed_under_the_namespace():
    assert coorm_bridge.adapters.base.Adapter.__module__ == "coorm_bridge.adapters.base"
    assert (
        coorm_bridge.launchers.selectors.Rigid.__module__
        == "coorm_bridge.launchers.selectors.rigid"
    )


def test_version_command_prints_the_package_version():
    out = subprocess.run(
        [sys.executable, "-m", "coorm_bridge.cli.main", "--version"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    assert out.stdout.strip() == f"coorm-bridge {coorm_bridge.__version__}"
    assert coorm_bridge.__version__ != "0+unknown"


@pytest.mark.slow
def test_wheel_installs_nothing_outside_the_namespace(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("coorm_bridge-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {
        "coorm_bridge",
        wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info",
    }
    assert "coorm_bridge/adapters/base.py" in names
    assert "coorm_bridge/launchers/selectors/__init__.py" in names
    assert "coorm_bridge/launchers/selectors/cem.py" in names
    assert "coorm_bridge/py.typed" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "coorm-bridge = coorm_bridge.cli.main:main" in text
    assert "rigid = coorm_bridge.launchers.selectors.rigid:Rigid" in text
    assert "cem = coorm_bridge.launchers.selectors.cem:CEM" in text
