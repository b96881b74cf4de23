"""The batch systems' own rules for each user's jobs, applied by the bridge.

Placeholders are held by the bridge's account, so a batch system's per-user rules (a partition's
MaxTime, a user's QOS) would not bound what is held for a user unless the bridge bounds it
itself. Each cluster's rules are read with its poll (:meth:`BatchRules.refresh`, on the poller's
thread, at most every ``interval`` seconds) and kept; a request is checked against them
(:meth:`BatchRules.check`) and a view is cut to what its owner may ask for
(:meth:`BatchRules.clip`, :meth:`BatchRules.visible`) without asking any batch system: the HTTP
API never waits on one.

A cluster whose rules could never be read takes no request (503): the bridge would otherwise
hold for a user what the batch system may refuse them. Rules read once stay in force while a
later read fails, as a stale snapshot does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import AdapterError
from coorm_bridge.core.model import ClusterInfo, Request
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.rules import ClusterRules, UserRules
from coorm_bridge.service.errors import BatchRuleRefusal, RulesUnknown
from coorm_bridge.service.groups import Groups

log = logging.getLogger(__name__)

#: Seconds between two reads of a cluster's rules (they change when an admin changes them:
#: rarely; reading them costs the batch system a few queries).
INTERVAL = 60.0


class BatchRules:
    """Each cluster's rules (``adapter.rules``), and what they allow each user."""

    def __init__(
        self,
        adapter: Adapter,
        clusters: Sequence[str],
        groups: Groups,
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.adapter = adapter
        self.groups = groups
        self.interval = interval
        self._clock = clock
        self._rules: dict[str, ClusterRules] = {}
        self._read_at: dict[str, float] = {}
        self._failing: set[str] = set()
        self._clusters = tuple(clusters)
        self._users: dict[tuple[str, str], UserRules] = {}
        self._lock = threading.Lock()

    def refresh(self, clusters: Iterable[str]) -> None:
        """Read the rules of those of ``clusters`` not read for ``interval`` seconds; a failure
        keeps what was read before (logged once until the next success)."""
        for cluster in clusters:
            last = self._read_at.get(cluster)
            if last is not None and self._clock() - last < self.interval:
                continue
            try:
                rules = self.adapter.rules(cluster)
            except AdapterError as error:
                if cluster not in self._failing:
                    self._failing.add(cluster)
                    log.warning("cannot read the rules of cluster %s: %s", cluster, error)
                continue
            if cluster in self._failing:
                self._failing.discard(cluster)
                log.info("the rules of cluster %s are read again", cluster)
            with self._lock:
                self._read_at[cluster] = self._clock()
                if self._rules.get(cluster) != rules:
                    self._rules[cluster] = rules
                    self._users = {k: v for k, v in self._users.items() if k[0] != cluster}

    def of(self, user: str, cluster: str) -> UserRules | None:
        """``user``'s rules on ``cluster`` (None: its rules were never read)."""
        with self._lock:
            rules = self._rules.get(cluster)
            known = self._users.get((cluster, user))
        if rules is None or known is not None:
            return known
        groups = self.groups.of(user) if rules.uses_groups() else ()
        found = rules.for_user(user, groups)
        with self._lock:
            if self._rules.get(cluster) is rules:
                self._users[(cluster, user)] = found
        return found

    def warm(self, user: str) -> None:
        """Read ``user``'s groups now if any cluster's rules need them: then not under a lock."""
        with self._lock:
            needed = any(rules.uses_groups() for rules in self._rules.values())
        if needed:
            self.groups.of(user)

    def check(self, user: str, request: Request) -> None:
        """Raise BatchRuleRefusal when a batch system would refuse ``user`` a job of the
        request's size and duration on one of its clusters (the message names the cluster and
        the setting); RulesUnknown when a cluster's rules are not known yet."""
        for cluster, hosts in request.nodes.items():
            rules = self.of(user, cluster)
            if rules is None:
                raise RulesUnknown(
                    f"{cluster}: the batch system's rules for users' jobs could not be read yet "
                    "(it may not answer): try again shortly"
                )
            refusal = rules.refusal(cluster, hosts, request.duration)
            if refusal is not None:
                raise BatchRuleRefusal(f"{refusal}: the batch system would refuse {user} this job")

    def visible(self, user: str, infos: Sequence[ClusterInfo]) -> list[ClusterInfo]:
        """The clusters of ``infos`` that take jobs of ``user`` at all. Raises BatchRuleRefusal,
        naming each cluster's rule, when none does."""
        kept, denied = [], []
        for info in infos:
            rules = self.of(user, info.name)
            if rules is not None and rules.denied is not None:
                denied.append(f"{info.name}: {rules.denied}")
            else:
                kept.append(info)
        if infos and not kept:
            raise BatchRuleRefusal(
                "no cluster the filter lets through takes jobs of yours: " + "; ".join(denied)
            )
        return kept

    def clip(self, user: str, view: Mapping[str, Profile]) -> dict[str, Profile]:
        """``view`` as ``user`` may use it: no cluster shows more hosts than one job of theirs
        may have there."""
        clipped = dict(view)
        for cluster, profile in view.items():
            rules = self.of(user, cluster)
            if rules is not None and rules.hosts is not None:
                clipped[cluster] = profile.clamped(0, rules.hosts.value)
        return clipped
