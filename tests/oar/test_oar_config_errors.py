"""``coorm-bridge serve`` beside the real OAR 2.5.9 of oar-local.sh (clusters alpha and beta of
8 hosts, 2 cores each; resource properties cluster, host, cpu, core) with a setting OAR shows to
be wrong. Before, a wrong ``host_property`` was accepted silently (8 hosts shown, status ok,
then every placement failed on OAR's SQL error, retried for ever), and a wrong ``property``,
``value`` or cluster exited 1 with "no resource has this cluster's property value". Now the
daemon does not start: one line naming the file, the key and what OAR has, exit status 2."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.daemons import free_port
from tests.oar.lab import OarInstance

pytestmark = [pytest.mark.oar, pytest.mark.daemon]

PROPERTIES = "its resource properties: cluster, core, cpu, host"
ALPHA_BETA = '[[adapter.cluster]]\nname = "alpha"\n[[adapter.cluster]]\nname = "beta"\n'


def serve(folder: Path, adapter: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``coorm-bridge serve`` (with ``options``: ``--check``) with this ``[adapter]`` table,
    which must stop at once."""
    config = folder / "coorm-bridge.toml"
    config.write_text(f'[bridge]\nsocket = "b.sock"\nstate_dir = "state"\n{adapter}')
    script = Path(sys.executable).with_name("coorm-bridge")
    started = time.monotonic()
    result = subprocess.run(
        [str(script), "serve", "--config", str(config), *options],
        capture_output=True,
        text=True,
        timeout=20,  # it starts in seconds: one still running (the setting not told) fails
        check=False,
        cwd=folder,
    )
    assert time.monotonic() - started < 20
    assert "Traceback" not in result.stderr
    return result


@pytest.mark.parametrize(
    ("adapter", "key", "reason"),
    [
        (
            f'property = "clustr"\n{ALPHA_BETA}',
            "property",
            f"OAR has no resource property 'clustr'; {PROPERTIES}",
        ),
        (
            '[[adapter.cluster]]\nname = "alpha"\nvalue = "alphaa"\n',
            "cluster.0.value",
            "OAR has no resource with cluster='alphaa'; values of 'cluster': alpha, beta",
        ),
        (
            f'{ALPHA_BETA}[[adapter.cluster]]\nname = "gamma"\n',
            "cluster.2.name",
            "OAR has no resource with cluster='gamma'; values of 'cluster': alpha, beta",
        ),
        (
            f'host_property = "hots"\n{ALPHA_BETA}',
            "host_property",
            f"OAR has no resource property 'hots'; {PROPERTIES} (or OAR's own network_address)",
        ),
        (
            f'host_property = "core"\n{ALPHA_BETA}',
            "host_property",
            "'core' counts 16 hosts on the 8 network addresses of the resources with "
            "cluster='alpha' (network address alpha-1 has core 1, 2): OAR places jobs on network "
            "addresses, so the resources of one address must name one host",
        ),
    ],
    ids=["property", "value", "cluster", "host_property", "host_property_splits_hosts"],
)
@pytest.mark.parametrize("backend", ["cli", "rest"])
def test_a_setting_oar_shows_wrong_stops_the_daemon_naming_file_and_key(
    oar: OarInstance, tmp_path: Path, backend: str, adapter: str, key: str, reason: str
) -> None:
    rest = f'[adapter.rest]\nurl = "{oar.api_url}"\n' if backend == "rest" else ""
    result = serve(tmp_path, f'[adapter]\nkind = "oar"\nbackend = "{backend}"\n{adapter}{rest}')
    assert result.returncode == 2, result.stderr
    config = tmp_path / "coorm-bridge.toml"
    assert result.stderr == f"coorm-bridge: {config}: adapter.{key}: {reason}\n"


def test_a_host_property_of_a_mixed_sites_oar_is_named_at_its_place(
    oar: OarInstance, tmp_path: Path
) -> None:
    (tmp_path / "platform.toml").write_text('[[cluster]]\nname = "sim"\nhosts = 4\n')
    result = serve(
        tmp_path,
        '[adapter]\nkind = "mixed"\n[[adapter.system]]\nkind = "mock"\n'
        'platform = "platform.toml"\nrun_jobs = false\n[[adapter.system]]\nkind = "oar"\n'
        'host_property = "hostname"\n[[adapter.system.cluster]]\nname = "beta"\n',
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"coorm-bridge: {tmp_path / 'coorm-bridge.toml'}: adapter.system.1.host_property: OAR "
        f"has no resource property 'hostname'; {PROPERTIES} (or OAR's own network_address)\n"
    )


def test_a_wrong_host_property_is_told_once_oar_answers(oar: OarInstance, tmp_path: Path) -> None:
    # The REST API on a port nothing listens on: OAR says nothing of the setting, and the file
    # is not blamed (the check's exit 1: a daemon would start and wait for OAR); the same
    # settings with OAR's API answering: exit 2.
    api = urlsplit(oar.api_url)
    silent = urlunsplit(api._replace(netloc=f"{api.hostname}:{free_port()}"))
    adapter = f'[adapter]\nkind = "oar"\nbackend = "rest"\nhost_property = "hots"\n{ALPHA_BETA}'
    result = serve(tmp_path, f'{adapter}[adapter.rest]\nurl = "{silent}"\n', "--check")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"GET {silent}/resources/details.json" in result.stdout + result.stderr
    assert "host_property" not in result.stderr
    result = serve(tmp_path, f'{adapter}[adapter.rest]\nurl = "{oar.api_url}"\n')
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        f"coorm-bridge: {tmp_path / 'coorm-bridge.toml'}: adapter.host_property: OAR has no "
        "resource property 'hots'; "
    )
