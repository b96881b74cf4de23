"""What the README shows a newcomer is what the package does: the demo's sample output is what
``coorm-bridge demo --start-daemon`` prints, and the plug-in section names the adapter kinds
that pyproject.toml registers."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from coorm_bridge.adapters import registry
from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.batch.adapter import BatchAdapter
from tests import readme

ROOT = readme.ROOT
README = readme.README
#: What may differ from run to run, each matched by any value of its kind: times, pids, session
#: and instance ids, the private daemon's folder, which hosts were granted, and how many hosts
#: the views show (the same on a fresh start, unless a loaded machine was slow to ask).
VARYING = [
    r"\d\d:\d\d:\d\d",
    r"pid \d+",
    r"session [a-z0-9]{16}",
    r"coorm-[a-z0-9]{6}-[a-z0-9]{16}-",
    r"/tmp/coorm-private-[a-z0-9_]+/",
    r"\d+ hosts \[[^\]]*\]",
    r"\d+ of \d+ free now",
    r"\d+ from",
    r"\d+ hosts on",
]


def demo_sample() -> list[str]:
    """The sample output the README gives for the demo, a line each."""
    found = re.search(r"It prints \(times, ids .*?\n\n```text\n(.*?)```", README, re.DOTALL)
    assert found is not None, "the README no longer shows the demo's output"
    return found.group(1).splitlines()


def unmatched(sample: list[str], printed: list[str]) -> list[str]:
    """The sample lines the printed ones do not show (tests/readme.py), with :data:`VARYING`."""
    return readme.unmatched(sample, printed, VARYING)


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cbr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.daemon
def test_the_demo_on_a_private_daemon_prints_the_readmes_sample(folder):
    script = Path(sys.executable).with_name("coorm-bridge")
    result = subprocess.run(
        [str(script), "demo", "--start-daemon"],
        check=False, capture_output=True, text=True, timeout=240, cwd=folder,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "co-allocated: yes" in out
    # The default platform is a site in use: each view shows local jobs holding hosts.
    views = re.findall(r"^    (alpha|beta): (\d+) of (\d+) free now, ", out, re.MULTILINE)
    assert len(views) == 4, out
    assert all(0 < int(free) < int(hosts) for _, free, hosts in views)
    starts = [line for line in out.splitlines() if "] START at " in line]
    assert len(starts) == 2
    # One START line an application: its clusters start at one instant. Two applications may
    # start a second apart on a busy machine (their placeholders are held one after the other).
    assert out.count("placeholders released") == 2
    # What the README says it prints: every line, in order (the same views on a fresh start).
    assert unmatched(demo_sample(), out.splitlines()) == [], out


def test_the_sample_check_can_fail():
    """A sample line the output does not show is found: the socket path the README once gave
    (a folder the demo never uses), a cluster that is not there."""
    printed = [
        "bridge at unix:///tmp/coorm-private-ab_c12/bridge.sock; clusters: alpha (64 hosts, ...)",
        "    alpha: 35 of 64 free now, 1 from 14:28:12, 3 from 15:12:22, ...",
    ]
    sample = [
        "bridge at unix:///tmp/coorm-demo-1ajkfd3t/bridge.sock; clusters: alpha (64 hosts, ...)",
        "...",
        "    delta: 35 of 64 free now, 1 from 04:56:37, 3 from 05:40:47, ...",
    ]
    assert unmatched(sample, printed) == sample[::2]
    fixed = [sample[0].replace("coorm-demo-1ajkfd3t", "coorm-private-zz9"), "...", printed[1]]
    assert unmatched(fixed, printed) == []


def test_the_plugin_section_names_every_built_in_adapter_kind():
    text = readme.section("### Other batch systems: adapter plug-ins")
    flat = " ".join(text.split())
    said = re.search(r"names an adapter plug-in: (.*?) \(above\) come with this package", flat)
    assert said is not None, text
    named = set(re.findall(r"`([a-z]+)`", said.group(1)))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    points = pyproject["project"]["entry-points"]
    assert named == set(points[registry.GROUP]) == set(registry.installed())
    # The registration it shows is in the group the registry reads, in the same form.
    assert f'[project.entry-points."{registry.GROUP}"]' in text
    assert all(re.fullmatch(r"[\w.]+:PLUGIN", target) for target in points[registry.GROUP].values())
    # What it says a plug-in is and gets.
    assert {"kind", "settings", "create"} <= set(registry.AdapterPlugin.__dataclass_fields__)
    assert "`context.state_dir`" in text
    assert set(re.findall(r"`context\.(\w+)`", text)) <= set(
        registry.AdapterContext.__dataclass_fields__
    )
    assert (ROOT / "tests" / "adapters" / "test_plugins.py").exists()
    assert callable(registry.AdapterSettings.clock_problems)
    assert callable(Adapter.speedup)
    assert issubclass(BatchAdapter, Adapter)
