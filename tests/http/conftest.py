"""The in-process API tests' fixtures: a service running its real loop on a mock platform with a
wall clock (``service``, ``bridge``), and FastAPI's TestClient over it (``client``) with the
tokens of tests/http/api.py."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import WallClock, parse_platform
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.http.app import create_app
from coorm_bridge.service.config import BridgeSettings, Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store
from tests.http.api import ALICE, BOB, PLATFORM, ROOT


@pytest.fixture
def service(tmp_path):
    config = Config(
        bridge=BridgeSettings(admins=("root",)),
        policy=PolicyConfig(interval=0.05, fair_start=1),
        placement=PlacementSettings(poll_interval=0.5),
        limits=LimitSettings(held_share=1.0),  # one user may hold every host (default: half)
    )
    adapter = MockAdapter(parse_platform(PLATFORM), WallClock())
    store = Store(tmp_path / "bridge.sqlite")
    service = assemble(config, adapter, store)
    service.loop.start()
    yield service
    service.loop.stop()
    store.close()


@pytest.fixture
def bridge(service):
    return service.bridge


@pytest.fixture
def client(service):
    app = create_app(service, tokens={ALICE: "alice", BOB: "bob", ROOT: "root"})
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client
