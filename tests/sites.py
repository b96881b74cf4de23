"""A bridge in this process over the simulated platform on a virtual clock: deterministic, every
step explicit (advance the platform, poll each cluster, run a pass when one is due). The same
code runs in the daemon; tests/daemons.py starts that. tests/conftest.py's ``make_site`` makes
these and closes their stores afterwards."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import VirtualClock, parse_platform
from coorm_bridge.core.model import Filter
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.service.config import Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store

#: The platform's clock at the start: a Unix time, far from 0 and from now.
T0 = 1_000_000
#: Two clusters of 8 and 4 hosts.
HOSTS = {"c1": 8, "c2": 4}
#: The [limits] of these sites unless a test gives its own: one user may hold the whole platform
#: (by default half of it, and a week at a time: tests/service/test_limits.py), for the tests of
#: placement ask for whole clusters.
LIMITS = LimitSettings(held_share=1.0)


def platform(hosts: Mapping[str, int] = HOSTS, start: int | None = T0) -> str:
    """A mock platform's TOML: ``hosts`` by cluster, its clock at ``start``."""
    text = "" if start is None else f"start = {start}\n"
    for name, count in hosts.items():
        text += f'[[cluster]]\nname = "{name}"\nhosts = {count}\n'
    return text


class Site:
    """A bridge over a mock platform (``adapter``, a :class:`MockAdapter` or a subclass) on a
    virtual clock at :data:`T0`, its store in ``folder``.

    ``policy`` and ``placement`` are the keys of its [policy] and [placement] (passes every
    second, polls every 5 s, nothing held before its time: ``hold_first`` 0); ``config`` more
    fields of its configuration; ``jobs`` True lets the front end run jobs as processes (in
    ``folder``/jobs)."""

    def __init__(
        self,
        folder: Path,
        hosts: Mapping[str, int] = HOSTS,
        *,
        adapter: type[MockAdapter] = MockAdapter,
        policy: Mapping[str, Any] | None = None,
        placement: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        jobs: bool = False,
    ) -> None:
        options: dict[str, Any] = {"jobs": folder / "jobs", "run_jobs": True} if jobs else {}
        self.adapter = adapter(parse_platform(platform(hosts)), VirtualClock(T0), **options)
        self.config = Config(
            policy=PolicyConfig(**{"interval": 1.0, "fair_start": 30, **(policy or {})}),
            placement=PlacementSettings(
                **{
                    "horizon": 300,
                    "attempts": 3,
                    "poll_interval": 5.0,
                    "hold_first": 0,
                    **(placement or {}),
                }
            ),
            **{"limits": LIMITS, **(config or {})},
        )
        self.clusters = list(hosts)
        self.store = Store(folder / "bridge.sqlite")
        self.assemble()

    def assemble(self) -> None:
        """The service over this site's adapter and store, built as the daemon builds it (again
        after a test changed the adapter or the configuration)."""
        self.service = assemble(self.config, self.adapter, self.store)
        self.bridge, self.loop = self.service.bridge, self.service.loop

    def step(self, t: int) -> None:
        """Move to time ``t``: the platform runs, every cluster is polled, a pass runs if due."""
        self.adapter.run_until(t)
        for cluster in self.clusters:
            self.loop.poll(cluster)
        self.loop.tick()

    def subscribe(self, user: str = "alice", clusters: tuple[str, ...] | None = None) -> str:
        """A new session of ``user``'s, on ``clusters`` (None: every cluster)."""
        found = Filter() if clusters is None else Filter(clusters=clusters)
        return self.bridge.subscribe(user, found, None).session

    def request(self, sid: str, nodes: dict[str, int], duration: int, user: str = "alice") -> None:
        self.bridge.put_request(user, sid, nodes, duration)

    def events(self, sid: str, kind: str | None = None) -> list:
        return [e for e in self.store.events(sid) if kind is None or e.type == kind]

    def state(self, sid: str) -> Any:
        return self.store.session(sid).state

    def hosts(self, sid: str, cluster: str = "c1") -> set[str]:
        """The hosts of ``sid``'s start on ``cluster``."""
        (start,) = self.events(sid, "start")
        return set(start.allocations[cluster].hosts)

    def ours(self, cluster: str) -> dict[str, Any]:
        """The bridge's reservations on ``cluster``, as the platform holds them, by name."""
        shot = self.adapter.snapshot([cluster]).clusters[cluster]
        return {r.name: r for r in shot.reservations if r.name.startswith("coorm-")}

    def close(self) -> None:
        self.store.close()
