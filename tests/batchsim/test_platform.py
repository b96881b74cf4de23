"""Platform descriptions: the packaged default loads with no configuration; errors say where."""

from pathlib import Path

import pytest

from coorm_bridge.batchsim import (
    SyntheticLoad,
    TraceLoad,
    load_platform,
    parse_platform,
)
from coorm_bridge.core.batch import AdapterError
from coorm_bridge.core.model import Submission

ROOT = Path(__file__).resolve().parents[2]


def test_default_platform_loads_with_no_configuration():
    spec = load_platform()
    sizes = {c.name: c.hosts for c in spec.clusters}
    speeds = {c.name: c.speed for c in spec.clusters}
    assert len(sizes) == 3
    assert len(set(sizes.values())) == 3
    assert len(set(speeds.values())) == 3
    assert {frozenset(link.clusters) for link in spec.links} == {
        frozenset(pair) for pair in (("alpha", "beta"), ("alpha", "gamma"), ("beta", "gamma"))
    }
    assert all(isinstance(load, SyntheticLoad) for load in spec.loads)


def test_etc_copy_is_the_packaged_default():
    assert load_platform(ROOT / "etc" / "mock-platform.toml").clusters == load_platform().clusters


def test_host_names_are_stable_and_padded():
    spec = parse_platform('[[cluster]]\nname = "c"\nhosts = 12\n')
    assert spec.clusters[0].host_names()[:2] == ["c-00", "c-01"]
    assert spec.clusters[0].host_names()[-1] == "c-11"


def test_trace_paths_are_relative_to_the_platform_file(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(
        '[[cluster]]\nname = "c"\nhosts = 128\n'
        '[[load]]\nkind = "swf"\ncluster = "c"\npath = "traces/nasa.swf.gz"\n'
    )
    spec = load_platform(path)
    (load,) = spec.loads
    assert isinstance(load, TraceLoad)
    assert spec.base_dir / load.path == tmp_path / "traces" / "nasa.swf.gz"


def test_outages_are_relative_to_the_platform_start():
    spec = parse_platform(
        '[[cluster]]\nname = "c"\nhosts = 2\n[[cluster]]\nname = "d"\nhosts = 2\n'
        '[[outage]]\ncluster = "d"\nstart = 0\nend = 60\n'
        '[[outage]]\ncluster = "d"\nstart = 600\nend = 1200\n'
    )
    assert [(o.cluster, o.start, o.end) for o in spec.outages] == [("d", 0, 60), ("d", 600, 1200)]
    assert load_platform().outages == ()


def test_the_commented_outage_example_in_etc_is_valid():
    text = (ROOT / "etc" / "mock-platform.toml").read_text()
    start = text.index("# [[outage]]")
    example = "\n".join(line.removeprefix("# ") for line in text[start:].splitlines())
    spec = parse_platform(text + "\n" + example)
    assert [o.cluster for o in spec.outages] == ["beta"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('[[cluster]]\nname = "c"\nhosts = 0\n', "cluster.0.hosts"),
        ('[[cluster]]\nname = "bad name"\nhosts = 2\n', "cluster.0.name"),
        ('[[cluster]]\nname = "c"\nhosts = 2\n[[cluster]]\nname = "c"\nhosts = 3\n', "c repeat"),
        (
            '[[cluster]]\nname = "c"\nhosts = 2\n[[link]]\nclusters = ["c", "d"]\n'
            "latency_s = 0.1\nbandwidth_bps = 1e9\n",
            "unknown cluster(s) d",
        ),
        (
            '[[cluster]]\nname = "c"\nhosts = 2\n[[load]]\nkind = "synthetic"\ncluster = "x"\n',
            "unknown cluster x",
        ),
        ('[[cluster]]\nname = "c"\nhosts = 2\n[[load]]\nkind = "tape"\ncluster = "c"\n', "load.0"),
        ('[[cluster]]\nname = "c"\nhosts = 2\nflavour = "x"\n', "cluster.0.flavour"),
        (
            '[[cluster]]\nname = "c"\nhosts = 2\n[[outage]]\ncluster = "x"\nstart = 1\nend = 2\n',
            "outage.0.cluster: unknown cluster x",
        ),
        (
            '[[cluster]]\nname = "c"\nhosts = 2\n[[outage]]\ncluster = "c"\nstart = 5\nend = 5\n',
            "outage.0: Value error, an outage must end after it starts (start = 5, end = 5)",
        ),
        (
            '[[cluster]]\nname = "c"\nhosts = 2\n[[outage]]\ncluster = "c"\nstart = -1\nend = 5\n',
            "outage.0.start",
        ),
        (
            '[[cluster]]\nname = "c"\nhosts = 2\n[[outage]]\ncluster = "c"\nstart = 1.5\nend = 5\n',
            "outage.0.start",
        ),
        (
            '[[cluster]]\nname = "c"\nhosts = 2\n[[outage]]\ncluster = "c"\nstart = 1\n',
            "outage.0.end: Field required",
        ),
        ("cluster = [", "not valid TOML"),
        ("", "cluster: Field required"),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path, text, where):
    path = tmp_path / "site.toml"
    path.write_text(text)
    with pytest.raises(AdapterError) as caught:
        load_platform(path)
    assert str(caught.value).startswith(str(path))
    assert where in str(caught.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(AdapterError, match="cannot read the platform file"):
        load_platform(tmp_path / "nope.toml")


def test_launchers_are_told_to_submit_through_the_bridge_and_the_file_cannot_say_otherwise():
    spec = parse_platform('[[cluster]]\nname = "c"\nhosts = 2\n')
    assert spec.clusters[0].info().submission == Submission(kind="mock")
    with pytest.raises(AdapterError, match=r"cluster\.0.*submission is not a platform setting"):
        parse_platform('[[cluster]]\nname = "c"\nhosts = 2\nsubmission = {kind = "slurm"}\n')


def test_a_platform_saved_before_submissions_keeps_its_identity():
    # The digest this platform had before ClusterInfo.submission existed: a daemon upgraded
    # over a saved platform must resume it, not refuse it as another one.
    text = '[[cluster]]\nname = "c1"\nhosts = 8\n[[cluster]]\nname = "c2"\nhosts = 4\n'
    spec = parse_platform(text)
    assert spec.identity() == "7e3bea10408a45d9103bf4ffa2fb3c71fc9a6d0b02851eb6fa2a890edcabde93"
