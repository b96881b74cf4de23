"""The optional pyslurm back-end: its guard and its version check (no fake pyslurm module).

pyslurm is not installed here (PyPI only has 25.11, which refuses Slurm 22.05): the back-end must
refuse clearly, say why and point to backend = "cli".
"""

from __future__ import annotations

import importlib.util

import pytest

from coorm_bridge.adapters.batch.runner import LocalRunner
from coorm_bridge.adapters.batch.settings import SshSettings
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.pyslurm_backend import (
    PyslurmBackend,
    compare_versions,
    pyslurm_status,
    slurm_version,
)
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import AdapterError

PYSLURM_ABSENT = importlib.util.find_spec("pyslurm") is None


def settings(**changes):
    base = SlurmSettings(
        backend="pyslurm", clusters=(SlurmCluster(name="alpha", partition="alpha"),)
    )
    return base.model_copy(update=changes)


def make(config):
    return PyslurmBackend(config, SlurmCliBackend(LocalRunner()))


@pytest.mark.parametrize(
    ("pyslurm", "slurm"),
    [
        ("22.5.3", "22.05.8"),
        ("22.5.0", "22.05"),
        ("22.5.3", "slurm-wlm 22.05.8"),
        ("23.2.2", "23.02.7"),
        ("25.11.2", "25.11.0"),
    ],
)
def test_same_major_minor_matches(pyslurm, slurm):
    ok, why = compare_versions(pyslurm, slurm)
    assert ok, why
    assert pyslurm in why


@pytest.mark.parametrize(
    ("pyslurm", "slurm", "needed"),
    [
        ("25.11", "22.05", "22.5.x"),
        ("25.11.2", "22.05.8", "22.5.x"),
        ("22.5.3", "23.02.7", "23.2.x"),
        ("23.2.2", "22.05.8", "22.5.x"),
        ("22.5.3", "22.50.1", "22.50.x"),
    ],
)
def test_another_release_is_refused_with_the_one_needed(pyslurm, slurm, needed):
    ok, why = compare_versions(pyslurm, slurm)
    assert not ok
    assert pyslurm in why
    assert slurm in why
    assert f"pyslurm {needed} is needed" in why


@pytest.mark.parametrize(("pyslurm", "slurm"), [("", "22.05.8"), ("22.5.3", "unknown"), ("x", "y")])
def test_unreadable_versions_are_refused(pyslurm, slurm):
    ok, why = compare_versions(pyslurm, slurm)
    assert not ok
    assert "unreadable" in why


def test_the_status_says_no_and_why_without_raising():
    ok, why = pyslurm_status()
    if PYSLURM_ABSENT:
        assert not ok
        assert "pyslurm cannot be imported" in why
        assert "No module named 'pyslurm'" in why
    assert why


@pytest.mark.skipif(not PYSLURM_ABSENT, reason="pyslurm is installed here")
def test_without_pyslurm_the_back_end_refuses_and_points_to_the_commands():
    with pytest.raises(AdapterError) as refused:
        make(settings())
    message = str(refused.value)
    assert "pyslurm cannot be imported" in message
    assert "No module named 'pyslurm'" in message
    assert 'use backend = "cli"' in message


def test_whenever_the_status_is_false_the_back_end_refuses_with_its_reason():
    ok, why = pyslurm_status()
    if ok:
        pytest.skip(f"pyslurm is usable here: {why}")
    with pytest.raises(AdapterError, match="use backend") as refused:
        make(settings())
    assert why in str(refused.value)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"ssh": SshSettings(host="front")}, "[adapter.ssh] is set"),
        ({"clusters": (SlurmCluster(name="a", cluster="alpha"),)}, "uses -M alpha"),
        (
            {"clusters": (SlurmCluster(name="a", slurm_conf="/nowhere/slurm.conf"),)},
            "slurm_conf /nowhere/slurm.conf is not SLURM_CONF",
        ),
    ],
)
def test_what_pyslurm_cannot_reach_is_refused_first(changes, problem, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    with pytest.raises(AdapterError) as refused:
        make(settings(**changes))
    assert problem in str(refused.value)
    assert 'use backend = "cli"' in str(refused.value)


@pytest.mark.slurm
def test_the_running_slurm_version_is_read_and_22_5_suits_it(slurm_partitions, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm_partitions.conf))
    version = slurm_version()
    assert version.startswith("22.05.")
    assert compare_versions("22.5.3", version)[0]
    assert not compare_versions("25.11.2", version)[0]


def test_without_a_slurm_configuration_the_version_is_unknown(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))
    with pytest.raises(ValueError, match="scontrol --version"):
        slurm_version()
