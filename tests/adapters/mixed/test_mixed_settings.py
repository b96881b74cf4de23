"""A mixed site's ``[adapter]`` table: each system validated by its own kind's plug-in, every
mistake named by its key in the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from coorm_bridge.adapters.mixed.plugin import state_folders
from coorm_bridge.adapters.mixed.settings import MixedSettings
from coorm_bridge.adapters.mock.plugin import MockSettings
from coorm_bridge.adapters.registry import AdapterSettings, find_plugin, installed
from coorm_bridge.adapters.slurm.settings import SlurmSettings
from coorm_bridge.service.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "etc" / "coorm-bridge-mixed.toml"

SLURM_AND_MOCK = """
[adapter]
kind = "mixed"
[[adapter.system]]
kind = "slurm"
[[adapter.system.cluster]]
name = "alpha"
slurm_conf = "slurm/alpha.conf"
partition = "alpha"
[[adapter.system]]
kind = "mock"
platform = "platform.toml"
[[adapter.link]]
clusters = ["alpha", "delta"]
latency_s = 0.001
bandwidth_bps = 1e9
"""


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="site.toml")
    return str(caught.value)


def test_the_plugin_is_installed_as_kind_mixed():
    assert "mixed" in installed()
    assert find_plugin("mixed").settings is MixedSettings


def test_each_system_is_read_by_its_own_kind_and_paths_are_the_files(tmp_path):
    adapter = parse_config(SLURM_AND_MOCK, "site.toml", base_dir=tmp_path).adapter
    assert isinstance(adapter, MixedSettings)
    slurm, mock = adapter.systems
    assert isinstance(slurm, SlurmSettings)
    assert isinstance(mock, MockSettings)
    assert slurm.clusters[0].slurm_conf == tmp_path / "slurm" / "alpha.conf"
    assert mock.platform == tmp_path / "platform.toml"
    assert adapter.links[0].clusters == ("alpha", "delta")
    dumped = adapter.model_dump()["systems"]
    assert dumped[0]["clusters"][0]["partition"] == "alpha"  # each system's own fields
    assert dumped[1]["speedup"] == 1.0


def test_a_systems_own_mistake_is_named_by_its_place_in_the_file():
    text = SLURM_AND_MOCK.replace('partition = "alpha"', 'partition = "al pha"')
    message = refusal(text)
    assert message.startswith("site.toml: adapter.mixed.system.0.cluster.0.partition: ")
    assert "'al pha' is not a valid name" in message
    unknown_key = SLURM_AND_MOCK.replace('platform = "platform.toml"', "speed = 2")
    assert "adapter.mixed.system.1.speed: Extra inputs are not permitted" in refusal(unknown_key)


def test_every_systems_mistakes_are_told_at_once():
    text = SLURM_AND_MOCK.replace('name = "alpha"', 'name = "-"').replace(
        'platform = "platform.toml"', "speedup = 0"
    )
    message = refusal(text)
    assert "adapter.mixed.system.0.cluster.0.name: " in message
    assert "adapter.mixed.system.1.speedup: " in message


def test_a_system_names_its_kind_an_installed_one_and_never_mixed():
    kindless = '[adapter]\nkind = "mixed"\n[[adapter.system]]\nplatform = "p.toml"\n'
    assert refusal(kindless) == (
        "site.toml: adapter.mixed.system.0.kind: each batch system names its kind "
        f"(installed: {', '.join(k for k in installed() if k != 'mixed')})"
    )
    unknown = '[adapter]\nkind = "mixed"\n[[adapter.system]]\nkind = "lsf"\n'
    assert refusal(unknown).startswith(
        "site.toml: adapter.mixed.system.0.kind: no adapter of kind 'lsf' is installed"
    )
    nested = (
        '[adapter]\nkind = "mixed"\n[[adapter.system]]\nkind = "mock"\n'
        '[[adapter.system]]\nkind = "mixed"\n[[adapter.system.system]]\nkind = "mock"\n'
    )
    assert refusal(nested).startswith(
        "site.toml: adapter.mixed.system.1.kind: a mixed site lists batch systems, not another "
        "mixed site"
    )
    assert "adapter.mixed.system: Field required" in refusal('[adapter]\nkind = "mixed"\n')
    inner = MixedSettings(systems=(MockSettings(),))
    with pytest.raises(ValidationError, match=r"systems.0.kind\n  a mixed site lists batch"):
        MixedSettings(systems=(inner,))
    assert "system.0: a batch system is a table" in refusal(
        '[adapter]\nkind = "mixed"\nsystem = ["mock"]\n'
    )


def test_a_cluster_name_two_systems_share_is_refused_naming_both():
    text = SLURM_AND_MOCK + (
        '[[adapter.system]]\nkind = "slurm"\n[[adapter.system.cluster]]\nname = "beta"\n'
        'slurm_conf = "b.conf"\n[[adapter.system.cluster]]\nname = "alpha"\n'
        'slurm_conf = "c.conf"\n'
    )
    assert refusal(text) == (
        "site.toml: adapter.mixed.system.2.cluster.1.name: 'alpha' is the name of "
        "system.0.cluster.0 (slurm) already: cluster names must be distinct across the site's "
        "batch systems"
    )


def test_a_simulated_platform_faster_than_the_host_is_refused_beside_another_system():
    text = SLURM_AND_MOCK.replace('platform = "platform.toml"', "speedup = 60")
    assert refusal(text) == (
        "site.toml: adapter.mixed.system.1.speedup: 60 runs the platform's time 60 times as "
        "fast as the host's: a mixed site keeps one time for all its batch systems, the host's"
    )
    alone = '[adapter]\nkind = "mixed"\n[[adapter.system]]\nkind = "mock"\nspeedup = 60\n'
    assert parse_config(alone).adapter.systems[0].speedup == 60  # one system, one clock


def test_a_pair_of_clusters_is_linked_once_and_never_to_itself():
    link = "[[adapter.link]]\nclusters = [{}]\nlatency_s = 0.002\nbandwidth_bps = 1e9\n"
    text = SLURM_AND_MOCK + link.format('"delta", "alpha"') + link.format('"beta", "beta"')
    message = refusal(text)
    assert "adapter.mixed.link.1.clusters: clusters 'delta' and 'alpha' are link.0 already" in (
        message
    )
    assert "adapter.mixed.link.2.clusters: a link joins two clusters, not 'beta' to itself" in (
        message
    )


def test_local_problems_are_each_systems_under_its_key(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(SLURM_AND_MOCK)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: adapter.system.0.cluster.0.slurm_conf: cannot read "
        f"'{tmp_path / 'slurm' / 'alpha.conf'}': No such file or directory"
    )
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "alpha.conf").write_text("ClusterName=alpha\n")
    assert load_config(path).adapter.local_problems() == []


def test_paths_the_system_would_refuse_are_named_in_their_system():
    text = SLURM_AND_MOCK.replace("slurm/alpha.conf", "a" * 300)
    assert refusal(text).startswith("site.toml: adapter.system.0.cluster.0.slurm_conf: 'aaaa")


def folders_of(kinds: list[str]) -> list[str]:
    systems = tuple(AdapterSettings.model_construct(kind=kind) for kind in kinds)
    return state_folders(MixedSettings.model_construct(systems=systems))


@given(st.lists(st.sampled_from(["mock", "slurm", "oar"]), min_size=1, max_size=8))
def test_each_system_keeps_its_state_folder_whatever_systems_of_other_kinds_do(kinds):
    folders = folders_of(kinds)
    assert len(set(folders)) == len(folders)
    for kind in set(kinds):
        # the same folders as on a site of that kind's systems alone: kind, kind-2, kind-3...
        alone = [f for k, f in zip(kinds, folders, strict=True) if k == kind]
        assert alone == folders_of([kind] * len(alone))
        assert alone == [kind] + [f"{kind}-{n}" for n in range(2, len(alone) + 1)]


def test_the_example_is_a_mixed_site_of_two_slurm_clusters_and_an_oar_one():
    config = parse_config(EXAMPLE.read_text(), source=str(EXAMPLE), base_dir=EXAMPLE.parent)
    adapter = config.adapter
    assert isinstance(adapter, MixedSettings)
    assert [s.kind for s in adapter.systems] == ["slurm", "slurm", "oar"]
    assert [c.name for s in adapter.systems for c in s.clusters] == ["alpha", "beta", "gamma"]
    assert adapter.systems[1].ssh.host == "beta-frontend.example.org"
    oar = adapter.systems[2]
    assert oar.kind == "oar"
    assert [c.name for c in oar.clusters] == ["gamma"]
    assert [link.clusters for link in adapter.links] == [("alpha", "beta"), ("alpha", "gamma")]
