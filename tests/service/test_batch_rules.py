"""The batch systems' rules as the bridge keeps them (service/batchrules.py): read at start and
with the polls, never on a request's path; a failed read keeps the rules read before; a cluster
whose rules were never read takes no request."""

from __future__ import annotations

import logging

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import VirtualClock, parse_platform
from coorm_bridge.core.batch import Unavailable
from coorm_bridge.core.model import Filter
from coorm_bridge.core.rules import ClusterRules
from coorm_bridge.service.config import Config, LimitSettings
from coorm_bridge.service.errors import BatchRuleRefusal, RulesUnknown
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store
from tests.sites import T0

PLATFORM = f"""start = {T0}
[[cluster]]
name = "c1"
hosts = 8
[[cluster.rule]]
groups = ["students"]
max_hosts = 2
[[cluster]]
name = "c2"
hosts = 4
"""


class CountingAdapter(MockAdapter):
    """The mock, counting its rules reads; ``failing`` makes them fail as a silent batch system."""

    def __init__(self) -> None:
        super().__init__(parse_platform(PLATFORM), VirtualClock(T0))
        self.reads = 0
        self.failing = False

    def rules(self, cluster: str) -> ClusterRules:
        self.reads += 1
        if self.failing:
            raise Unavailable("no answer", cluster=cluster)
        return super().rules(cluster)


@pytest.fixture
def service(tmp_path):
    with Store(tmp_path / "bridge.sqlite") as store:
        made = assemble(Config(limits=LimitSettings(held_share=1.0)), CountingAdapter(), store)
        made.rules.groups._lookup = lambda user: ("students",) if user == "sam" else ()
        yield made


def test_rules_are_read_at_start_and_not_again_on_a_requests_path(service):
    adapter = service.adapter
    assert adapter.reads == 2  # one read per cluster at start
    bridge = service.bridge
    sid = bridge.subscribe("sam", Filter(), None).session
    with pytest.raises(BatchRuleRefusal, match=r"^c1: platform rule #1 \(group students\)"):
        bridge.put_request("sam", sid, {"c1": 3}, 60)
    bridge.put_request("sam", sid, {"c1": 2}, 60)
    other = bridge.subscribe("alice", Filter(), None).session
    bridge.put_request("alice", other, {"c1": 8}, 60)  # not a student: no bound
    assert adapter.reads == 2


def test_rules_are_read_again_with_the_polls_once_a_minute(service):
    adapter, rules = service.adapter, service.rules
    now = [0.0]
    rules._clock = lambda: now[0]
    rules._read_at = dict.fromkeys(rules._read_at, 0.0)
    service.loop.poll("c1")
    assert adapter.reads == 2  # read at start, less than a minute ago
    now[0] = 61.0
    service.loop.poll("c1")
    assert adapter.reads == 3


def test_a_failed_read_keeps_the_rules_read_before_and_is_logged_once(service, caplog):
    adapter, rules = service.adapter, service.rules
    adapter.failing = True
    rules.interval = 0.0
    with caplog.at_level(logging.WARNING, logger="coorm_bridge.service.batchrules"):
        rules.refresh(["c1"])
        rules.refresh(["c1"])
    assert [r.message for r in caplog.records] == ["cannot read the rules of cluster c1: no answer"]
    sid = service.bridge.subscribe("sam", Filter(), None).session
    with pytest.raises(BatchRuleRefusal):
        service.bridge.put_request("sam", sid, {"c1": 3}, 60)


def test_a_cluster_whose_rules_were_never_read_takes_no_request(tmp_path):
    adapter = CountingAdapter()
    adapter.failing = True  # down at start
    with Store(tmp_path / "bridge.sqlite") as store:
        service = assemble(Config(), adapter, store)
        sid = service.bridge.subscribe("alice", Filter(), None).session
        with pytest.raises(RulesUnknown, match=r"^c1: the batch system's rules"):
            service.bridge.put_request("alice", sid, {"c1": 1}, 60)
        assert store.session(sid).request is None
        adapter.failing = False
        service.rules.refresh(["c1"])
        service.bridge.put_request("alice", sid, {"c1": 1}, 60)
