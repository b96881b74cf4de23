"""The configuration file: defaults that run with nothing, errors that say file, key and why."""

from pathlib import Path

import pytest

from coorm_bridge.adapters.mock.frontend import ProcessFrontEnd
from coorm_bridge.adapters.registry import installed
from coorm_bridge.paths import runtime_dir
from coorm_bridge.service.config import (
    MIN_TOKEN_LENGTH,
    ConfigError,
    load_config,
    parse_config,
)
from coorm_bridge.service.wiring import make_adapter

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "t" * MIN_TOKEN_LENGTH


def test_no_file_means_the_mock_platform_on_a_user_socket(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = load_config()
    assert config.adapter.kind == "mock"
    assert config.adapter.platform is None
    assert config.bridge.tcp is None
    assert config.bridge.socket_path == tmp_path / "run" / "coorm-bridge" / "bridge.sock"
    assert config.bridge.database == tmp_path / "state" / "coorm-bridge" / "bridge.sqlite"


@pytest.mark.parametrize(
    ("text", "private"),
    [
        ("", True),
        ('[policy]\nfair_start = 5\n[adapter]\nkind = "mock"\n', True),
        ('[bridge]\nsocket = "/run/coorm-bridge/bridge.sock"\n', False),
        (f'[bridge.tcp]\nport = 8642\n[bridge.tokens]\n"{TOKEN}" = "alice"\n', False),
    ],
)
def test_a_daemon_on_its_default_socket_alone_is_private(monkeypatch, tmp_path, text, private):
    """Private: only its own user can reach it (the default socket is mode 600 in that user's
    runtime folder); a configured socket is every local user's, TCP any token holder's."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = parse_config(text)
    assert config.bridge.private is private
    adapter = make_adapter(config)
    try:
        front = adapter.front_end()
        assert isinstance(front, ProcessFrontEnd)
        assert front.private is private  # told to the adapter that runs the jobs
    finally:
        adapter.close()


def test_without_runtime_dir_the_socket_is_private_to_the_uid(monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert runtime_dir().name.endswith(str(__import__("os").getuid()))


def test_the_example_in_etc_loads_and_resolves_relative_paths():
    config = load_config(ROOT / "etc" / "coorm-bridge.toml")
    assert config.policy.fair_start == 30
    assert config.placement.horizon == 300
    assert config.adapter.platform == ROOT / "etc" / "mock-platform.toml"
    assert config.bridge.socket == Path("/run/coorm-bridge/bridge.sock")
    assert config.bridge.admins == ("root",)


def test_tokens_map_to_users_and_the_file_must_be_private(tmp_path):
    path = tmp_path / "bridge.toml"
    path.write_text(f'[bridge.tcp]\nport = 9000\n[bridge.tokens]\n"{TOKEN}" = "alice"\n')
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by other users"):
        load_config(path)
    path.chmod(0o600)
    config = load_config(path)
    assert config.bridge.tokens == {TOKEN: "alice"}
    assert config.bridge.tcp is not None
    assert config.bridge.tcp.port == 9000


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[policy]\nfair_start = -1\n", "policy.fair_start"),
        ("[policy]\ninterval = 0\n", "policy.interval"),
        ('[policy]\nfair_start = "soon"\n', "policy.fair_start"),
        ("[placement]\nattempts = 0\n", "placement.attempts"),
        ('[adapter]\nkind = "lsf"\n', "adapter"),
        ('[adapter]\nkind = "mock"\nspeedup = 0\n', "adapter.mock.speedup"),
        ('[bridge]\nadmins = ["bad user"]\n', "bridge.admins.0"),
        ('[bridge.tokens]\n"short" = "alice"\n', "at least 16"),
        ("[bridge.tcp]\nport = 9000\n", "needs [bridge.tokens]"),
        ("[bridge.tcp]\nport = 70000\n", "bridge.tcp.port"),
        ('[bridge]\nsokcet = "/tmp/x"\n', "bridge.sokcet"),
        ("[polciy]\n", "polciy"),
        ("policy = [", "not valid TOML"),
        ('source = "x"\n', "source: not a setting"),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path, text, where):
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert where in str(caught.value)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.7", "bridge.example.org"])
def test_plain_tcp_beyond_this_host_is_refused_naming_the_keys(host):
    text = f'[bridge.tcp]\nhost = "{host}"\n[bridge.tokens]\n"{TOKEN}" = "alice"\n'
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="site.toml")
    message = str(caught.value)
    assert message.startswith("site.toml: bridge.tcp.host: ")
    assert "in clear" in message
    assert "bridge.tcp.certificate" in message
    assert "bridge.tcp.insecure_plaintext" in message


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "localhost"])
def test_plain_tcp_on_loopback_is_allowed(host):
    text = f'[bridge.tcp]\nhost = "{host}"\n[bridge.tokens]\n"{TOKEN}" = "alice"\n'
    assert parse_config(text).bridge.tcp.host == host


def test_plain_tcp_elsewhere_needs_the_admin_to_say_so():
    text = (
        f'[bridge.tcp]\nhost = "0.0.0.0"\ninsecure_plaintext = true\n'
        f'[bridge.tokens]\n"{TOKEN}" = "alice"\n'
    )
    assert parse_config(text).bridge.tcp.insecure_plaintext


def test_tls_needs_both_certificate_and_key():
    text = f'[bridge.tcp]\ncertificate = "c.pem"\n[bridge.tokens]\n"{TOKEN}" = "alice"\n'
    with pytest.raises(ConfigError, match=r"bridge.tcp: .*certificate and key together"):
        parse_config(text, source="site.toml")


def test_the_examples_tcp_block_uncommented_is_tls_on_every_address():
    text = (ROOT / "etc" / "coorm-bridge.toml").read_text()
    start = text.index("# [bridge.tcp]")
    block = text[start : text.index("\n\n", start)]
    uncommented = text.replace(block, block.replace("# ", ""))
    config = parse_config(uncommented, source="example")
    tcp = config.bridge.tcp
    assert (tcp.host, tcp.certificate, tcp.key) == (
        "0.0.0.0",
        Path("/etc/coorm-bridge/tls/bridge.crt"),
        Path("/etc/coorm-bridge/tls/bridge.key"),
    )
    assert not tcp.insecure_plaintext
    plain = uncommented.replace('certificate = "', '# certificate = "').replace(
        'key = "', '# key = "'
    )
    with pytest.raises(ConfigError, match=r"bridge\.tcp\.host"):
        parse_config(plain)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        load_config(tmp_path / "nope.toml")


def test_parse_without_a_file_keeps_paths_as_written():
    config = parse_config('[adapter]\nkind = "mock"\nplatform = "p.toml"\n')
    assert config.adapter.platform == Path("p.toml")


def test_the_slurm_example_loads():
    # Parsed, not loaded: its slurm.conf files are the site's, not this host's.
    path = ROOT / "etc" / "coorm-bridge-slurm.toml"
    config = parse_config(path.read_text(), source=str(path), base_dir=path.parent)
    adapter = config.adapter
    assert adapter.kind == "slurm"
    assert [c.name for c in adapter.clusters] == ["alpha", "beta", "gpu"]
    assert adapter.clusters[1].cluster == "beta"
    assert adapter.clusters[2].partition == "gpu"
    assert adapter.links[0].clusters == ("alpha", "beta")


def test_the_oar_example_loads_and_so_does_its_rest_variant():
    path = ROOT / "etc" / "coorm-bridge-oar.toml"
    text = path.read_text()
    config = load_config(path)
    adapter = config.adapter
    assert adapter.kind == "oar"
    assert (adapter.backend, adapter.submit_as, adapter.property) == ("cli", "owner", "cluster")
    assert [(c.name, c.selector) for c in adapter.clusters] == [
        ("alpha", "alpha"),
        ("beta", "beta"),
    ]
    rest = text.replace('backend = "cli"', 'backend = "rest"').replace(
        "# [adapter.rest]", "[adapter.rest]"
    )
    rest = rest.replace('# url = "https://oar', 'url = "https://oar')
    config = parse_config(rest, source=str(path), base_dir=path.parent)
    assert config.adapter.rest.url == "https://oar.example.org/oarapi"
    with pytest.raises(ConfigError, match=r"adapter.oar: .*\[adapter.rest\]"):
        parse_config(text.replace('backend = "cli"', 'backend = "rest"'), source="site.toml")


def test_slurm_settings_errors_name_the_key(tmp_path):
    text = '[adapter]\nkind = "slurm"\nbackend = "rest"\n[[adapter.cluster]]\nname = "a"\n'
    with pytest.raises(ConfigError, match=r"site.toml: adapter.slurm: .*\[adapter.rest\]"):
        parse_config(text, source="site.toml")
    bad = '[adapter]\nkind = "slurm"\n[[adapter.cluster]]\nname = "a b"\n'
    with pytest.raises(ConfigError, match=r"site.toml: adapter.slurm.cluster.0.name"):
        parse_config(bad, source="site.toml")
    relative = '[adapter]\nkind = "slurm"\n[[adapter.cluster]]\nname = "a"\nslurm_conf = "a.conf"\n'
    config = parse_config(relative, source="site.toml", base_dir=tmp_path)
    assert config.adapter.clusters[0].slurm_conf == tmp_path / "a.conf"


def test_rest_cannot_address_clusters_with_dash_m():
    text = (
        '[adapter]\nkind = "slurm"\nbackend = "rest"\n[adapter.rest]\nurl = "unix:///r.sock"\n'
        '[[adapter.cluster]]\nname = "a"\ncluster = "a"\n'
    )
    with pytest.raises(ConfigError, match="need backend = 'cli'"):
        parse_config(text, source="site.toml")


def test_an_unknown_adapter_kind_names_the_file_the_key_and_the_installed_kinds(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text('[adapter]\nkind = "lsf"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    kinds = ", ".join(installed())
    assert message == (
        f"{path}: adapter.kind: no adapter of kind 'lsf' is installed (installed: {kinds})"
    )
    assert {"mock", "slurm"} <= set(installed())


def test_relative_paths_are_resolved_in_any_adapter_table(tmp_path):
    text = (
        '[adapter]\nkind = "slurm"\nbackend = "rest"\n'
        '[adapter.ssh]\nhost = "front"\nkey_file = "keys/id"\nknown_hosts = "/etc/ssh/known"\n'
        '[adapter.rest]\nurl = "https://rest:6820"\ntoken_file = "jwt"\n'
        '[[adapter.cluster]]\nname = "a"\nslurm_conf = "a.conf"\n'
        '[[adapter.cluster]]\nname = "b"\n'
    )
    adapter = parse_config(text, source="site.toml", base_dir=tmp_path).adapter
    assert adapter.ssh.key_file == tmp_path / "keys" / "id"
    assert adapter.ssh.known_hosts == Path("/etc/ssh/known")
    assert adapter.rest.token_file == tmp_path / "jwt"
    assert [c.slurm_conf for c in adapter.clusters] == [tmp_path / "a.conf", None]
