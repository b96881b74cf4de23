"""The mock's per-user rules: what its simulated batch system would allow each user's job.

A real site's batch system has rules of its own for users' jobs (Slurm's partition, association
and QOS limits); the mock gets them from its platform file, one ``[[cluster.rule]]`` table each,
so that what the bridge does with such rules can be tried and tested without a real site:

.. code-block:: toml

    [[cluster.rule]]          # everyone: one job at most 8 hosts for a day
    max_hosts = 8
    max_duration = 86400
    [[cluster.rule]]          # students get no job at all here
    groups = ["students"]
    deny = true

A rule with neither ``users`` nor ``groups`` applies to everyone; a user to whom several apply
gets the tightest of each bound, and is denied if any denies them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated

from pydantic import Field

from coorm_bridge.batchsim.limits import DURATION_LIMIT, MAX_HOSTS, at_most
from coorm_bridge.core.model import Frozen, Name, UserName
from coorm_bridge.core.rules import Bound, ClusterRules, UserRules


class UserRule(Frozen):
    """One ``[[cluster.rule]]`` table."""

    users: tuple[UserName, ...] = Field(default=(), max_length=10_000)
    groups: tuple[Name, ...] = Field(default=(), max_length=10_000)
    deny: bool = False
    max_hosts: Annotated[int, Field(gt=0, strict=True), at_most(MAX_HOSTS, "hosts")] | None = None
    max_duration: Annotated[int, Field(gt=0, strict=True), DURATION_LIMIT] | None = None

    def applies(self, user: str, groups: Collection[str]) -> bool:
        if not self.users and not self.groups:
            return True
        return user in self.users or not set(self.groups).isdisjoint(groups)

    def as_user_rules(self, where: str, user: str) -> UserRules:
        """The rule for ``user``, each bound named after the rule (``where``)."""
        where = f"{where} ({self.whom()})"
        hosts = duration = None
        if self.max_hosts is not None:
            hosts = Bound(value=self.max_hosts, setting=f"{where} max_hosts is {self.max_hosts}")
        if self.max_duration is not None:
            setting = f"{where} max_duration is {self.max_duration} s"
            duration = Bound(value=self.max_duration, setting=setting)
        denied = f"{where} denies {user} any job" if self.deny else None
        return UserRules(denied=denied, hosts=hosts, duration=duration)

    def whom(self) -> str:
        """Who it applies to, in words."""
        if not self.users and not self.groups:
            return "everyone"
        named = [*self.users, *(f"group {g}" for g in self.groups)]
        return ", ".join(named)


class MockRules(ClusterRules):
    """A mock cluster's rules, as its platform file sets them."""

    cluster: str
    rules: tuple[UserRule, ...] = ()

    def uses_groups(self) -> bool:
        return any(rule.groups for rule in self.rules)

    def for_user(self, user: str, groups: Collection[str]) -> UserRules:
        found = UserRules()
        for number, rule in enumerate(self.rules, start=1):
            if rule.applies(user, groups):
                found = found.tightest(rule.as_user_rules(f"platform rule #{number}", user))
        return found
