"""What Slurm would allow one user's job in one partition: its rules, as the bridge applies them.

The bridge's placeholders are reservations made by its operator account, so none of a user's
own Slurm limits apply to what is held for them. :class:`SlurmRules` keeps what the adapter read
with the poll (:mod:`.rules_read`) and :meth:`SlurmRules.for_user` computes one user's bounds
from it, without asking Slurm.

Mirrored (Slurm 22.05, ``src/slurmctld/job_mgr.c``: ``_valid_job_part``, ``_part_access_check``,
``_valid_job_part_acct``, ``_valid_job_part_qos``; ``acct_policy.c``: ``acct_policy_validate``):

- the partition's ``MaxTime``, ``MaxNodes``, ``AllowGroups`` (the user's Unix groups),
  ``AllowAccounts``/``DenyAccounts`` (the user's default account), ``AllowQos``/``DenyQos`` (the
  QOS their job would get) and the partition's own ``QoS``;
- where associations are enforced (``AccountingStorageEnforce`` has ``associations``,
  ``limits`` or ``qos``): a user without an association (cluster, default account, user, the
  partition or none) is denied;
- where limits are enforced (``limits``): the association's ``MaxWall`` and ``MaxTRES``
  ``node=``, taken from the nearest of it and its parent accounts that sets them (slurmctld
  pre-propagates them the same way), every ``GrpTRES`` ``node=`` on the way up, and the QOS
  limits ``MaxWall``, ``MaxTRESPerUser``, ``MaxTRESPerJob`` and ``GrpTRES`` (``node=``) of the
  job's QOS (the association's ``DefaultQOS``, inherited likewise, else ``normal``) and of the
  partition's QOS.

Where Slurm lets one setting override another (a partition QOS over the job's QOS, a QOS over
the association, ``OverPartQOS``) the bridge takes the tightest of them all: it never allows
more than any one rule it read, and may refuse what such an override would let through. Left
out: limits that depend on what else runs (``GrpTRES`` and ``MaxTRESPerUser`` are applied to
one job as if it ran alone, as ``acct_policy_validate`` does at submission), jobs and submit
counts, TRES other than ``node``, minutes-of-TRES limits, ``MinNodes``, QOS membership of the
association (``AccountingStorageEnforce=qos``), ``LimitFactor``, and ``DenyOnLimit`` (without
it Slurm accepts such a job but never starts it: refused all the same here).
"""

from __future__ import annotations

from collections.abc import Collection

from coorm_bridge.core.model import Frozen
from coorm_bridge.core.rules import Bound, ClusterRules, UserRules

#: The QOS a job gets when its association names no default (Slurm's own default QOS).
DEFAULT_QOS = "normal"


class Limit(Frozen):
    """One limit as Slurm prints it (``2-00:00:00``, ``node=2``) and its value (seconds, hosts)."""

    value: int
    text: str


class Partition(Frozen):
    """The partition's own rules (None: ``ALL`` or ``UNLIMITED``)."""

    name: str
    max_time: Limit | None = None
    max_nodes: Limit | None = None
    allow_accounts: tuple[str, ...] | None = None
    deny_accounts: tuple[str, ...] = ()
    allow_groups: tuple[str, ...] | None = None
    allow_qos: tuple[str, ...] | None = None
    deny_qos: tuple[str, ...] = ()
    qos: str | None = None


class Association(Frozen):
    """One row of ``sacctmgr show assoc``: an account's (``user`` None) or a user's."""

    account: str
    user: str | None = None
    partition: str | None = None
    parent: str | None = None
    """The parent account of an account's association (a user's: their ``account``)."""
    max_wall: Limit | None = None
    max_nodes: Limit | None = None
    grp_nodes: Limit | None = None
    default_qos: str | None = None

    @property
    def label(self) -> str:
        name = self.account if self.user is None else f"{self.account}/{self.user}"
        return name if self.partition is None else f"{name} (partition {self.partition})"


class Qos(Frozen):
    """One QOS's limits on one job's size and time."""

    name: str
    max_wall: Limit | None = None
    max_nodes_per_user: Limit | None = None
    max_nodes_per_job: Limit | None = None
    grp_nodes: Limit | None = None


class SlurmRules(ClusterRules):
    """One partition's rules and the accounting that applies to it, as read with the poll."""

    cluster: str
    """The Slurm cluster name (``ClusterName``, or the binding's ``-M`` cluster)."""
    partition: Partition
    enforce: tuple[str, ...] = ()
    """``AccountingStorageEnforce``'s words (empty: none)."""
    default_accounts: tuple[tuple[str, str], ...] = ()
    """(user, default account) pairs: a tuple, so that the rules stay hashable values."""
    associations: tuple[Association, ...] = ()
    qos: tuple[Qos, ...] = ()

    @property
    def associations_enforced(self) -> bool:
        return bool({"associations", "limits", "qos", "safe"} & set(self.enforce))

    @property
    def limits_enforced(self) -> bool:
        return bool({"limits", "safe"} & set(self.enforce))

    def default_account(self, user: str) -> str | None:
        return next((account for name, account in self.default_accounts if name == user), None)

    def uses_groups(self) -> bool:
        """Only ``AllowGroups`` looks at a user's Unix groups."""
        return self.partition.allow_groups is not None

    def for_user(self, user: str, groups: Collection[str]) -> UserRules:
        """``user``'s rules here: denied, or the tightest of every bound that applies."""
        account = self.default_account(user)
        chain = self._chain(user, account)
        qos_name = _inherited(chain, "default_qos") or DEFAULT_QOS
        denied = self._denied(user, groups, account, chain, qos_name)
        if denied is not None:
            return UserRules(denied=denied)
        part = self.partition
        rules = _bounds(part.max_nodes, part.max_time, "partition")
        if not self.limits_enforced:
            return rules
        return rules.tightest(self._accounting(chain, qos_name))

    def _denied(
        self,
        user: str,
        groups: Collection[str],
        account: str | None,
        chain: list[Association],
        qos_name: str,
    ) -> str | None:
        """Why no job of ``user``'s is taken in the partition at all (None: it may be)."""
        part = self.partition
        enforce = f"AccountingStorageEnforce={','.join(self.enforce)}"
        has = f"{user}'s default account is {account}"
        job_qos = f"{user}'s QOS would be {qos_name}"
        checks = [
            (
                part.allow_groups is not None and not set(groups) & set(part.allow_groups),
                f"partition AllowGroups is {_list(part.allow_groups)} ({user} is in none of them)",
            ),
            (
                self.associations_enforced and not chain,
                f"{user} has no association on cluster {self.cluster} ({enforce})",
            ),
            (
                self.associations_enforced
                and part.allow_accounts is not None
                and account not in part.allow_accounts,
                f"partition AllowAccounts is {_list(part.allow_accounts)} ({has})",
            ),
            (
                self.associations_enforced and account in part.deny_accounts,
                f"partition DenyAccounts is {_list(part.deny_accounts)} ({has})",
            ),
            (
                part.allow_qos is not None and qos_name not in part.allow_qos,
                f"partition AllowQos is {_list(part.allow_qos)} ({job_qos})",
            ),
            (
                qos_name in part.deny_qos,
                f"partition DenyQos is {_list(part.deny_qos)} ({job_qos})",
            ),
        ]
        return next((why for failed, why in checks if failed), None)

    def _chain(self, user: str, account: str | None) -> list[Association]:
        """The user's association and its parents, nearest first (empty: none)."""
        if account is None:
            return []
        mine = [a for a in self.associations if a.user == user and a.account == account]
        here = [a for a in mine if a.partition == self.partition.name]
        candidates = here or [a for a in mine if a.partition is None]
        if not candidates:
            return []
        first = candidates[0]
        accounts = {a.account: a for a in self.associations if a.user is None}
        chain, name = [first], account
        while name in accounts and len(chain) <= len(accounts):
            chain.append(accounts[name])
            name = accounts[name].parent or ""
        return chain

    def _accounting(self, chain: list[Association], qos_name: str) -> UserRules:
        """The association's and the QOSes' bounds."""
        rules = UserRules()
        for field, limit in (("max_nodes", "MaxTRES"), ("max_wall", "MaxWall")):
            for assoc in chain:
                value: Limit | None = getattr(assoc, field)
                if value is not None:
                    where = f"association {assoc.label}"
                    rules = rules.tightest(_one(field, value, f"{where} {limit}"))
                    break
        for assoc in chain:
            if assoc.grp_nodes is not None:
                where = f"association {assoc.label} GrpTRES"
                rules = rules.tightest(_one("max_nodes", assoc.grp_nodes, where))
        by_name = {q.name: q for q in self.qos}
        for name in dict.fromkeys((qos_name, self.partition.qos)):
            qos = by_name.get(name or "")
            if qos is None:
                continue
            where = f"QOS {qos.name}"
            rules = rules.tightest(_bounds(None, qos.max_wall, where, time="MaxWall"))
            for field, label in (
                ("max_nodes_per_user", "MaxTRESPerUser"),
                ("max_nodes_per_job", "MaxTRESPerJob"),
                ("grp_nodes", "GrpTRES"),
            ):
                value = getattr(qos, field)
                if value is not None:
                    rules = rules.tightest(_one("max_nodes", value, f"{where} {label}"))
        return rules


def _list(names: tuple[str, ...] | None) -> str:
    return "ALL" if names is None else ",".join(names)


def _inherited(chain: list[Association], field: str) -> str | None:
    for assoc in chain:
        value = getattr(assoc, field)
        if value is not None:
            return str(value)
    return None


def _one(field: str, limit: Limit, setting: str) -> UserRules:
    bound = Bound(value=limit.value, setting=f"{setting} is {limit.text}")
    return UserRules(hosts=bound) if field == "max_nodes" else UserRules(duration=bound)


def _bounds(
    nodes: Limit | None, wall: Limit | None, where: str, *, time: str = "MaxTime"
) -> UserRules:
    hosts = (
        None
        if nodes is None
        else Bound(value=nodes.value, setting=f"{where} MaxNodes is {nodes.text}")
    )
    duration = (
        None if wall is None else Bound(value=wall.value, setting=f"{where} {time} is {wall.text}")
    )
    return UserRules(hosts=hosts, duration=duration)
