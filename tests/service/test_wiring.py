"""The service built from its configuration: what the batch systems show wrong at start is a
mistake of the file (ConfigError naming the file and the key), and leaves nothing held."""

from __future__ import annotations

from pathlib import Path

import pytest

from coorm_bridge.service.config import ConfigError, load_config
from coorm_bridge.service.wiring import build

PLATFORM = '[[cluster]]\nname = "c1"\nhosts = 4\n[[cluster]]\nname = "c2"\nhosts = 2\n'


def test_a_link_to_a_cluster_no_system_has_is_the_files_mistake(tmp_path: Path) -> None:
    (tmp_path / "platform.toml").write_text(PLATFORM)
    path = tmp_path / "site.toml"
    path.write_text(
        '[bridge]\nsocket = "b.sock"\nstate_dir = "state"\n[adapter]\nkind = "mixed"\n'
        '[[adapter.system]]\nkind = "mock"\nplatform = "platform.toml"\n'
        '[[adapter.link]]\nclusters = ["c2", "c1"]\nlatency_s = 0.001\nbandwidth_bps = 1e9\n'
        '[[adapter.link]]\nclusters = ["c1", "gamma"]\nlatency_s = 0.001\nbandwidth_bps = 1e9\n'
    )
    config = load_config(path)
    for _ in range(2):  # the state folder and the platform's journal are let go each time
        with pytest.raises(ConfigError) as caught:
            build(config)
        assert str(caught.value) == (
            f"{path}: adapter.link.1.clusters: no batch system of the site has 'gamma' (its "
            "clusters: c1, c2)"
        )
