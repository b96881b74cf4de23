"""What a batch system would allow one user's job on one cluster: its own rules, not the bridge's.

The bridge holds placeholders with its operator account, so a batch system's per-user rules
(Slurm's partition limits and access lists, association and QOS limits; the mock's per-user
rules) would not apply to what is held for a user unless the bridge applied them itself. Each
adapter reads its cluster's rules with the poll (:meth:`.Adapter.rules`, a value the bridge
caches); :meth:`ClusterRules.for_user` turns them into a user's :class:`UserRules` without asking
the batch system again, so that checking a request never waits on it.

Each bound carries the batch system's own setting in words ("partition MaxTime is
2-00:00:00"), so that a refusal names what the user or their admin can look up.
"""

from __future__ import annotations

from collections.abc import Collection

from coorm_bridge.core.model import Frozen


class Bound(Frozen):
    """One upper bound and the setting it comes from, as the batch system names it."""

    value: int
    setting: str
    """E.g. ``partition MaxTime is 2-00:00:00``, ``QOS normal MaxTRESPerUser is node=4``."""


class UserRules(Frozen):
    """What one user's job may be on one cluster (None: the batch system sets no bound)."""

    denied: str | None = None
    """Why no job of theirs is taken there at all: the setting, with what the user lacks."""
    hosts: Bound | None = None
    """The most hosts one job of theirs may have."""
    duration: Bound | None = None
    """The longest time limit, in seconds, one job of theirs may have."""

    @property
    def unbounded(self) -> bool:
        return self.denied is None and self.hosts is None and self.duration is None

    def refusal(self, cluster: str, hosts: int, duration: int) -> str | None:
        """Why a job of ``hosts`` hosts for ``duration`` seconds would be refused on
        ``cluster``, in words that name the cluster and the setting (None: it would not)."""
        if self.denied is not None:
            return f"{cluster}: {self.denied}"
        if self.hosts is not None and hosts > self.hosts.value:
            return f"{cluster}: {self.hosts.setting}; the request asks for {hosts} hosts there"
        if self.duration is not None and duration > self.duration.value:
            return (
                f"{cluster}: {self.duration.setting}; the request lasts {duration} s "
                f"({self.duration.value} s allowed)"
            )
        return None

    def tightest(self, other: UserRules) -> UserRules:
        """Both sets of rules at once: denied by either, the smaller of each bound."""
        return UserRules(
            denied=self.denied if self.denied is not None else other.denied,
            hosts=_smaller(self.hosts, other.hosts),
            duration=_smaller(self.duration, other.duration),
        )


def _smaller(a: Bound | None, b: Bound | None) -> Bound | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a.value <= b.value else b


class ClusterRules(Frozen):
    """A cluster's rules for users' jobs, as an adapter read them; by default there are none.

    Adapters subclass this with what their batch system sets (fields that keep what was read)
    and override :meth:`for_user`; it must not ask the batch system anything."""

    def uses_groups(self) -> bool:
        """Whether :meth:`for_user` looks at the user's groups (they are then looked up)."""
        return False

    def for_user(self, user: str, groups: Collection[str]) -> UserRules:
        """``user``'s rules, for a user in the Unix groups ``groups``."""
        return UserRules()


#: The rules of a batch system that sets none (the default of :meth:`.Adapter.rules`).
NO_RULES = ClusterRules()
