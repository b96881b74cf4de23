"""The ``[adapter]`` settings of Slurm that a site gets wrong: clusters mapped twice onto the same
nodes, a slurm.conf that is not there. Refused when the configuration is loaded, naming the file,
the key and the clusters, instead of a daemon that waits on Slurm or shows every host twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from coorm_bridge.service.config import ConfigError, load_config, parse_config

HEAD = '[adapter]\nkind = "slurm"\n'


def clusters(*tables: dict[str, str]) -> str:
    return "".join(
        "[[adapter.cluster]]\n" + "".join(f'{k} = "{v}"\n' for k, v in table.items())
        for table in tables
    )


@pytest.mark.parametrize(
    ("tables", "words"),
    [
        (
            [
                {"name": "a", "partition": "alpha", "slurm_conf": "/etc/slurm/s.conf"},
                {"name": "b", "partition": "alpha", "slurm_conf": "/etc/slurm/./s.conf"},
            ],
            ["'a' and 'b'", "both partition 'alpha'", "/etc/slurm"],
        ),
        (
            [
                {"name": "all", "slurm_conf": "/etc/slurm/s.conf"},
                {"name": "one", "partition": "alpha", "slurm_conf": "/etc/slurm/s.conf"},
            ],
            ["'all' and 'one' overlap", "'all' is the whole controller", "'alpha'"],
        ),
        (
            [{"name": "p", "partition": "beta"}, {"name": "whole"}],
            ["'p' and 'whole' overlap", "default slurm.conf"],
        ),
        (
            [{"name": "x", "cluster": "c1"}, {"name": "y", "cluster": "c1"}],
            ["'x' and 'y'", "Slurm cluster 'c1' (-M"],
        ),
        (
            [{"name": "w1"}, {"name": "w2"}],
            ["'w1' and 'w2' are both the whole controller"],
        ),
    ],
)
def test_two_clusters_over_the_same_nodes_are_refused_naming_both(tables, words):
    with pytest.raises(ConfigError) as caught:
        parse_config(HEAD + clusters(*tables), source="site.toml")
    message = str(caught.value)
    assert message.startswith("site.toml: adapter.slurm.cluster: ")
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    "tables",
    [
        # Two partitions of one controller, the same partition name on two controllers or two
        # -M clusters, a whole controller beside another controller's partition.
        [{"name": "a", "partition": "alpha"}, {"name": "b", "partition": "beta"}],
        [
            {"name": "a", "partition": "p", "slurm_conf": "/etc/slurm/a.conf"},
            {"name": "b", "partition": "p", "slurm_conf": "/etc/slurm/b.conf"},
        ],
        [{"name": "a", "cluster": "c1", "partition": "p"}, {"name": "b", "cluster": "c2"}],
        [{"name": "a", "slurm_conf": "/etc/slurm/a.conf"}, {"name": "b", "partition": "p"}],
    ],
)
def test_distinct_nodes_are_accepted(tables):
    config = parse_config(HEAD + clusters(*tables), source="site.toml")
    assert [c.name for c in config.adapter.clusters] == [t["name"] for t in tables]


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
