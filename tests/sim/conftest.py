"""The sweep's tests run a small real experiment, tests/sim/simtoy.py ("toy"), which pool
workers, ``coorm-sim`` subprocesses and Slurm tasks import through PYTHONPATH."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from coorm_bridge.sim.experiment import EXPERIMENTS

HERE = Path(__file__).resolve().parent
COORM_SIM = Path(sys.executable).with_name("coorm-sim")


def toy_environ(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment in which ``coorm-sim toy`` and its workers find the toy experiment."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env["COORM_SIM_EXPERIMENTS"] = "toy=simtoy:Toy"
    return env


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """simtoy imported and registered in this process, and findable by its children."""
    monkeypatch.syspath_prepend(str(HERE))
    for name, value in toy_environ().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setitem(EXPERIMENTS, "toy", "simtoy:Toy")
    return importlib.import_module("simtoy")


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    folder = tmp_path / "marks"
    folder.mkdir()
    return folder
