"""The ``[adapter]`` settings of Slurm that a site gets wrong: a slurm.conf that is not there.
Refused when the configuration is loaded, naming the file and the key, instead of a daemon that
waits on Slurm."""

from __future__ import annotations

from pathlib import Path

import pytest

from coorm_bridge.service.config import ConfigError, load_config

HEAD = '[adapter]\nkind = "slurm"\n'


def clusters(*tables: dict[str, str]) -> str:
    return "".join(
        "[[adapter.cluster]]\n" + "".join(f'{k} = "{v}"\n' for k, v in table.items())
        for table in tables
    )


def test_a_slurm_conf_missing_here_is_refused_naming_the_file_and_the_key(tmp_path):
    (tmp_path / "alpha.conf").write_text("ClusterName=alpha\n")
    path = tmp_path / "site.toml"
    path.write_text(
        HEAD
        + clusters(
            {"name": "a", "slurm_conf": "alpha.conf"},
            {"name": "b", "slurm_conf": "beta.conf"},
        )
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    missing = tmp_path / "beta.conf"
    assert str(caught.value) == (
        f"{path}: adapter.cluster.1.slurm_conf: cannot read '{missing}': No such file or directory"
    )
    missing.write_text("ClusterName=beta\n")
    assert load_config(path).adapter.clusters[1].slurm_conf == missing


def test_a_slurm_conf_that_is_a_folder_is_refused(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(HEAD + clusters({"name": "a", "slurm_conf": str(tmp_path)}))
    with pytest.raises(ConfigError, match=r"adapter\.cluster\.0\.slurm_conf: .*Is a directory"):
        load_config(path)


def test_over_ssh_the_slurm_conf_is_the_front_ends_and_not_looked_for_here(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(
        HEAD
        + '[adapter.ssh]\nhost = "front"\n'
        + clusters({"name": "a", "slurm_conf": "/nowhere/on/this/host/slurm.conf"})
    )
    config = load_config(path)
    assert config.adapter.clusters[0].slurm_conf == Path("/nowhere/on/this/host/slurm.conf")
