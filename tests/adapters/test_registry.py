"""Adapters found by kind in the coorm_bridge.adapters entry-point group."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from coorm_bridge.adapters import registry
from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.adapters.mock.plugin import MockSettings
from coorm_bridge.adapters.registry import (
    AdapterContext,
    AdapterSettings,
    UnknownAdapter,
    create_adapter,
    find_plugin,
    installed,
)
from coorm_bridge.adapters.slurm.settings import SlurmSettings
from coorm_bridge.core.batch import AdapterError
from coorm_bridge.service.config import Config


def test_this_package_installs_the_mock_and_slurm_adapters():
    assert {"mock", "slurm"} <= set(installed())
    assert find_plugin("mock").settings is MockSettings
    assert find_plugin("slurm").settings is SlurmSettings


def test_the_default_adapter_is_the_mock_platform(tmp_path):
    config = Config()
    assert isinstance(config.adapter, MockSettings)
    adapter = create_adapter(config.adapter, AdapterContext(state_dir=tmp_path))
    assert isinstance(adapter, MockAdapter)
    assert config.model_dump()["adapter"] == {
        "kind": "mock",
        "platform": None,
        "speedup": 1.0,
        "run_jobs": None,
    }


def test_settings_of_the_wrong_model_are_refused(tmp_path):
    with pytest.raises(AdapterError, match="needs MockSettings, not AdapterSettings"):
        create_adapter(AdapterSettings(kind="mock"), AdapterContext(state_dir=tmp_path))


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("no_such_module_for_coorm:PLUGIN", "cannot be loaded: ModuleNotFoundError"),
        ("coorm_bridge.adapters.mock.plugin:MockSettings", "is not an AdapterPlugin"),
        ("coorm_bridge.adapters.mock.plugin:PLUGIN", "is not an AdapterPlugin of kind 'broken'"),
    ],
)
def test_a_broken_plugin_is_named(monkeypatch, value, why):
    entry = EntryPoint(name="broken", value=value, group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {"broken": (entry,)})
    registry.find_plugin.cache_clear()
    try:
        with pytest.raises(UnknownAdapter, match=f"adapter kind 'broken' .*{why}"):
            find_plugin("broken")
    finally:
        registry.find_plugin.cache_clear()


def test_a_kind_registered_twice_is_refused(monkeypatch):
    one = EntryPoint(name="twice", value="a:PLUGIN", group=registry.GROUP)
    other = EntryPoint(name="twice", value="b:PLUGIN", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {"twice": (one, other)})
    with pytest.raises(UnknownAdapter, match="registered more than once: a:PLUGIN, b:PLUGIN"):
        find_plugin("twice")
