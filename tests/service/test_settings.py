"""The settings a reload changes (service/settings.py): limits, admins and tokens swapped whole,
read by the bridge at each call; every other changed key named as needing a restart and left as
it was; a file that cannot be used refused with one line naming file and key, the settings in
force kept. (The daemon on SIGHUP: tests/daemon/test_daemon_reload.py.)"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from coorm_bridge.core.model import Filter
from coorm_bridge.service.config import Config, load_config
from coorm_bridge.service.errors import NotFound, OverLimit
from coorm_bridge.service.settings import Live, Settings

BASE = '[bridge]\nadmins = ["root"]\n[bridge.tokens]\nalice-token-0123456789 = "alice"\n'


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture
def file(tmp_path: Path) -> Path:
    return write(tmp_path / "coorm-bridge.toml", BASE + "[limits]\nhosts = 2\n")


def test_a_reload_applies_limits_admins_and_tokens_and_says_what_changed(file, caplog) -> None:
    settings = Settings(load_config(file))
    write(
        file,
        '[bridge]\nadmins = ["root", "bob"]\n[bridge.tokens]\nbob-token-0123456789ab = "bob"\n'
        "[limits]\nhosts = 8\nsessions = 3\n",
    )
    with caplog.at_level(logging.INFO, logger="coorm_bridge.service.settings"):
        done = settings.reload(by="SIGHUP")
    assert done is not None
    assert done.applied == (
        "limits.hosts: 2 -> 8",
        "limits.sessions: unset -> 3",
        "bridge.admins: [root] -> [bob, root]",
        "bridge.tokens: 1 -> 1 tokens; new for bob; withdrawn for alice",
    )
    assert done.restart == ()
    live = settings.current
    assert live.limits.hosts == 8
    assert live.admins == {"root", "bob"}
    assert live.tokens == {"bob-token-0123456789ab": "bob"}
    [record] = caplog.records
    assert record.getMessage() == f"reloaded {file} (SIGHUP): " + "; ".join(done.applied)
    assert "token-0123" not in record.getMessage()  # tokens are keys: never logged


def test_other_changed_keys_need_a_restart_and_stay_as_they_were(file, caplog) -> None:
    settings = Settings(load_config(file))
    write(
        file,
        BASE + "[limits]\nhosts = 3\n[placement]\npoll_interval = 2.0\n[bridge.tcp]\nport = 9000\n",
    )
    with caplog.at_level(logging.INFO, logger="coorm_bridge.service.settings"):
        done = settings.reload(by="SIGHUP")
    assert done is not None
    assert done.applied == ("limits.hosts: 2 -> 3",)
    assert done.restart == ("bridge.tcp", "placement.poll_interval")
    assert settings.config.placement.poll_interval == 10.0
    assert settings.config.bridge.tcp is None
    assert settings.config.limits.hosts == 3
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert record.getMessage().endswith(
        "changed but needs a restart, left as it was: bridge.tcp, placement.poll_interval"
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[limits]\nhosts = 0\n", "limits.hosts"),
        ("[limits]\nhostz = 4\n", "limits.hostz"),
        ('[bridge]\nadmins = ["bad user"]\n', "bridge.admins.0"),
        ("[limits\n", "not valid TOML"),
    ],
)
def test_a_file_that_cannot_be_used_is_refused_and_the_settings_stay(
    file, caplog, text, key
) -> None:
    settings = Settings(load_config(file))
    before = settings.current
    write(file, text)
    with caplog.at_level(logging.INFO, logger="coorm_bridge.service.settings"):
        assert settings.reload(by="SIGHUP") is None
    assert settings.current is before
    [record] = caplog.records
    assert record.levelname == "ERROR"
    message = record.getMessage()
    assert message.startswith(f"reload (SIGHUP) refused, the settings in force stay: {file}: ")
    assert key in message
    assert "\n" not in message


def test_a_token_file_others_may_read_is_refused_on_reload_too(file, caplog) -> None:
    settings = Settings(load_config(file))
    file.chmod(0o644)
    with caplog.at_level(logging.INFO, logger="coorm_bridge.service.settings"):
        assert settings.reload(by="SIGHUP") is None
    assert "bridge.tokens: the file is readable by other users" in caplog.text
    assert settings.current.tokens == {"alice-token-0123456789": "alice"}


def test_a_daemon_without_a_file_has_nothing_to_reload(caplog) -> None:
    settings = Settings(Config())
    with caplog.at_level(logging.INFO, logger="coorm_bridge.service.settings"):
        assert settings.reload(by="SIGHUP") is None
    assert "nothing to re-read" in caplog.text


def test_readers_see_the_old_settings_or_the_new_never_half_of_each(tmp_path) -> None:
    one = Config.model_validate({"limits": {"hosts": 1}, "bridge": {"admins": ["a"]}})
    two = Config.model_validate({"limits": {"hosts": 2}, "bridge": {"admins": ["b"]}})
    settings = Settings(one)
    seen: set[tuple[int | None, frozenset[str]]] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            live: Live = settings.current
            seen.add((live.limits.hosts, live.admins))

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    for index in range(2000):
        settings.apply(two if index % 2 == 0 else one)
    stop.set()
    for reader in readers:
        reader.join()
    assert seen <= {(1, frozenset({"a"})), (2, frozenset({"b"}))}


def test_the_bridge_reads_the_settings_in_force_at_each_call(make_site) -> None:
    site = make_site(config={"limits": {"hosts": 2}})
    sid = site.bridge.subscribe("alice", Filter(), None).session
    with pytest.raises(OverLimit, match=r"limits.hosts allows 2"):
        site.bridge.put_request("alice", sid, {"c1": 4}, 60)
    with pytest.raises(NotFound):
        site.bridge.info("bob", sid)
    site.service.settings.apply(
        Config.model_validate({"limits": {"hosts": 4}, "bridge": {"admins": ["bob"]}})
    )
    site.bridge.put_request("alice", sid, {"c1": 4}, 60)
    assert site.bridge.info("bob", sid).owner == "alice"
