"""Slurm's per-user rules as the adapter reads them: the parsers on the answers recorded from a
real Slurm 22.05 with slurmdbd (tests/data/slurm/rules/: partition alpha with MaxTime=2-00:00:00,
MaxNodes=3, AllowAccounts=chem,physics,root; accounts science > chem with MaxWall 02:00:00 and
GrpTRES node=3, physics; coorm_alice in chem with MaxWall 01:00:00; coorm_bob in physics with
the QOS small, MaxTRESPerUser node=2, MaxWall 04:00:00; AccountingStorageEnforce=associations,
limits,qos), each user's bounds, and that the bounds never allow more than any rule read.
The real Slurm's verdicts on the same rules are in test_slurm_rules.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import responses
from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.slurm import rules_read
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.binding import SlurmBinding
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.rest_backend import RestBackend
from coorm_bridge.adapters.slurm.rules import Association, Limit, Partition, Qos, SlurmRules
from coorm_bridge.adapters.slurm.settings import RestSettings, SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import Unavailable

RULES = Path(__file__).parent.parent / "data" / "slurm" / "rules"
ANSWERS = {
    ("scontrol", "config"): "show_config.txt",
    ("scontrol", "partition"): "show_partition.txt",
    ("sacctmgr", "user"): "users.txt",
    ("sacctmgr", "assoc"): "associations.txt",
    ("sacctmgr", "qos"): "qos.txt",
}


class Recorded(Runner):
    """Answers as the recorded Slurm did; ``replace`` swaps one answer's text."""

    def __init__(self, replace: Mapping[tuple[str, str], str] | None = None) -> None:
        self.replace = dict(replace or {})
        self.calls: list[tuple[str, ...]] = []

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        self.calls.append(tuple(argv))
        key = next(k for k in ANSWERS if k[0] == argv[0] and k[1] in argv)
        if key in self.replace:
            return Completed(0, self.replace[key], "")
        return Completed(0, (RULES / ANSWERS[key]).read_text(), "")


def read(runner: Runner | None = None, partition: str | None = "alpha") -> SlurmRules:
    binding = SlurmBinding("a", partition=partition)
    return SlurmCliBackend(runner or Recorded()).rules(binding)


def test_each_user_gets_the_bounds_slurm_would_apply_in_slurms_words():
    rules = read()
    alice = rules.for_user("coorm_alice", ["coorm_alice"])
    assert alice.denied is None
    assert (alice.hosts.value, alice.hosts.setting) == (3, "partition MaxNodes is 3")
    assert alice.duration is not None
    assert (alice.duration.value, alice.duration.setting) == (
        3600,
        "association chem/coorm_alice MaxWall is 01:00:00",
    )
    bob = rules.for_user("coorm_bob", ["coorm_bob"])
    assert bob.hosts is not None
    assert bob.duration is not None
    assert (bob.hosts.value, bob.hosts.setting) == (2, "QOS small MaxTRESPerUser is node=2")
    assert (bob.duration.value, bob.duration.setting) == (14400, "QOS small MaxWall is 04:00:00")
    root = rules.for_user("root", ["root"])
    assert root.duration is not None
    assert root.duration.setting == "partition MaxTime is 2-00:00:00"
    assert root.duration.value == 2 * 86400
    assert root.refusal("alpha", 1, 3 * 86400) == (
        "alpha: partition MaxTime is 2-00:00:00; the request lasts 259200 s (172800 s allowed)"
    )


def test_rules_read_are_a_hashable_value():
    assert hash(read()) == hash(read())


def test_a_user_without_an_association_is_denied_where_associations_are_enforced():
    carol = read().for_user("coorm_carol", ["coorm_carol"])
    assert carol.denied == (
        "coorm_carol has no association on cluster alpha "
        "(AccountingStorageEnforce=associations,limits,qos)"
    )
    assert carol.refusal("alpha", 1, 60) == f"alpha: {carol.denied}"


def test_limits_unset_on_an_association_are_its_parents_and_a_partitions_own_comes_first():
    """chem sets no GrpTRES: science's node=3 applies to chem's users; bob's association in
    (chem, partition alpha) is the one for that partition, not his default (physics)."""
    rules = read()
    chain = rules._chain("coorm_alice", "chem")
    assert [a.label for a in chain] == ["chem/coorm_alice", "chem", "science", "root"]
    only_grp = rules.model_copy(update={"partition": Partition(name="alpha"), "qos": ()}).for_user(
        "coorm_alice", []
    )
    assert only_grp.hosts is not None
    assert only_grp.hosts.setting == "association science GrpTRES is node=3"
    in_partition = rules.model_copy(update={"default_accounts": (("coorm_bob", "chem"),)})
    bob = in_partition.for_user("coorm_bob", [])
    assert bob.hosts is not None
    assert bob.hosts.setting == "association chem/coorm_bob (partition alpha) MaxTRES is node=1"


def test_partition_access_lists_deny_with_the_setting_and_what_the_user_lacks():
    recorded = Recorded(
        {("scontrol", "partition"): (RULES / "show_partition_deny.txt").read_text()}
    )
    rules = read(recorded)
    assert rules.partition.qos == "part"
    assert rules.for_user("coorm_bob", ["coorm_bob"]).denied == (
        "partition AllowGroups is coorm_alice,root (coorm_bob is in none of them)"
    )
    assert rules.for_user("coorm_bob", ["coorm_bob", "root"]).denied == (
        "partition DenyAccounts is physics (coorm_bob's default account is physics)"
    )
    assert rules.for_user("coorm_bob", ["coorm_alice"]).denied is not None
    alice = rules.for_user("coorm_alice", ["coorm_alice"])
    assert alice.denied is None
    assert alice.hosts is not None  # the partition's QOS part: MaxTRES node=3, GrpTRES node=4
    assert alice.hosts.value == 3
    strict = rules.model_copy(
        update={"partition": rules.partition.model_copy(update={"allow_qos": ("part",)})}
    )
    assert strict.for_user("coorm_alice", ["coorm_alice"]).denied == (
        "partition AllowQos is part (coorm_alice's QOS would be normal)"
    )
    allowed = read().for_user("coorm_alice", [])  # AllowAccounts=chem,physics,root
    assert allowed.denied is None
    rules = read()
    in_science = (*rules.associations, Association(account="science", user="coorm_alice"))
    outside = rules.model_copy(
        update={"default_accounts": (("coorm_alice", "science"),), "associations": in_science}
    )
    assert outside.for_user("coorm_alice", []).denied == (
        "partition AllowAccounts is chem,physics,root (coorm_alice's default account is science)"
    )


def test_without_enforced_accounting_only_the_partition_is_read():
    config = "ClusterName             = coorm\nAccountingStorageEnforce = none\n"
    recorded = Recorded({("scontrol", "config"): config})
    rules = read(recorded, partition=None)  # the default partition
    assert [c[0] for c in recorded.calls] == ["scontrol", "scontrol"]
    assert (rules.cluster, rules.enforce, rules.partition.name) == ("coorm", (), "alpha")
    carol = rules.for_user("coorm_carol", [])
    assert carol.denied is None
    assert carol.hosts is not None
    assert carol.hosts.setting == "partition MaxNodes is 3"


def test_one_read_is_five_commands_argument_vectors_only():
    recorded = Recorded()
    read(recorded)
    assert recorded.calls == [
        ("scontrol", "show", "config"),
        ("scontrol", "-o", "show", "partition"),
        rules_read.show_users(),
        rules_read.show_associations("alpha"),
        rules_read.show_qos(),
    ]


@pytest.mark.parametrize(
    ("key", "text", "said"),
    [
        (("scontrol", "config"), "nothing here\n", "no ClusterName"),
        (("scontrol", "partition"), "Nope=1\n", "a line without PartitionName"),
        (("scontrol", "partition"), "PartitionName=beta Default=NO\n", "no partition alpha"),
        (("scontrol", "partition"), "PartitionName=alpha MaxTime=soon\n", "not a Slurm time"),
        (("scontrol", "partition"), "PartitionName=alpha MaxNodes=-1\n", "not a node count"),
        (("sacctmgr", "assoc"), "alpha|chem|x\n", "3 fields, not 9"),
        (("sacctmgr", "assoc"), "alpha|chem|x||||node=lots||\n", "not a node count"),
        (("sacctmgr", "qos"), "normal|99999999999-00:00:00|||\n", "not a Slurm time"),
        (("sacctmgr", "qos"), "normal|" + "9" * 5000 + "|||\n", "a field of 5000 characters"),
        (("sacctmgr", "user"), "x|y\n" * (rules_read.MAX_LINES + 1), "more than the"),
    ],
    ids=lambda value: str(value)[:20],
)
def test_a_malformed_answer_is_a_failed_read_naming_what_was_wrong(key, text, said):
    adapter = SlurmAdapter(
        SlurmSettings(clusters=(SlurmCluster(name="a", partition="alpha"),)),
        SlurmCliBackend(Recorded({key: text})),
    )
    with pytest.raises(Unavailable, match="a: Slurm's rules: unreadable answer") as failed:
        adapter.rules("a")
    assert said in str(failed.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2-00:00:00", 172800),
        ("01:00:00", 3600),
        ("30:00", 1800),
        ("90", 5400),
        ("1-12", 129600),
        ("1-12:30", 131400),
    ],
)
def test_slurm_times_in_seconds(text, seconds):
    limit = rules_read.time_limit(text, "t")
    assert limit is not None
    assert (limit.value, limit.text) == (seconds, text)
    assert rules_read.time_limit("UNLIMITED", "t") is None


@responses.activate
def test_the_rest_backend_reads_the_rules_through_the_commands():
    """slurmrestd is not asked (no answer is registered: any request would fail the test)."""
    recorded = Recorded()
    rest = RestBackend(RestSettings(url="http://127.0.0.1:9"), SlurmCliBackend(recorded))
    rules = rest.rules(SlurmBinding("a", partition="alpha"))
    assert rules.for_user("coorm_bob", []).hosts is not None
    assert len(recorded.calls) == 5
    assert len(responses.calls) == 0


# -- never more than any one rule allows ----------------------------------------------------

_names = st.sampled_from(["a", "b", "c"])
_qos_names = st.sampled_from(["normal", "a", "b"])
_limits = st.none() | st.builds(
    lambda v: Limit(value=v, text=str(v)), st.integers(min_value=0, max_value=20)
)
_partitions = st.builds(
    Partition,
    name=st.just("p"),
    max_time=_limits,
    max_nodes=_limits,
    allow_accounts=st.none() | st.tuples(_names),
    deny_accounts=st.tuples() | st.tuples(_names),
    allow_groups=st.none() | st.tuples(_names),
    qos=st.none() | _qos_names,
)
_qos = st.builds(
    Qos,
    name=_qos_names,
    max_wall=_limits,
    max_nodes_per_user=_limits,
    max_nodes_per_job=_limits,
    grp_nodes=_limits,
)


@st.composite
def _rules(draw: st.DrawFn) -> SlurmRules:
    accounts = ["a", "b", "c"]
    associations = [
        Association(
            account=name,
            parent=draw(st.none() | st.sampled_from(accounts[:i] or ["root"])),
            max_wall=draw(_limits),
            max_nodes=draw(_limits),
            grp_nodes=draw(_limits),
            default_qos=draw(st.none() | _qos_names),
        )
        for i, name in enumerate(accounts)
    ]
    default = draw(st.sampled_from([None, "a", "b", "c"]))
    users = draw(st.lists(st.none() | _names, max_size=3))  # None: the default account
    associations += [
        Association(
            account=account or default or "a",
            user="u",
            partition=draw(st.none() | st.just("p")),
            max_wall=draw(_limits),
            max_nodes=draw(_limits),
            grp_nodes=draw(_limits),
            default_qos=draw(st.none() | _qos_names),
        )
        for account in users
    ]
    return SlurmRules(
        cluster="x",
        partition=draw(_partitions),
        enforce=draw(
            st.sampled_from([(), ("associations",), ("limits",), ("associations", "limits", "qos")])
        ),
        default_accounts=() if default is None else (("u", default),),
        associations=tuple(associations),
        qos=tuple(draw(st.lists(_qos, max_size=3, unique_by=lambda q: q.name))),
    )


def _every_limit(rules: SlurmRules) -> list[tuple[str, Limit]]:
    """Every limit read that applies to the user, by kind ("hosts" or "duration")."""
    part = rules.partition
    found = [("hosts", part.max_nodes), ("duration", part.max_time)]
    if rules.limits_enforced:
        chain = rules._chain("u", rules.default_account("u"))
        found += [("hosts", a.grp_nodes) for a in chain]
        for field, kind in (("max_nodes", "hosts"), ("max_wall", "duration")):
            nearest = next((getattr(a, field) for a in chain if getattr(a, field)), None)
            found.append((kind, nearest))
        qos = next((a.default_qos for a in chain if a.default_qos), None) or "normal"
        for q in rules.qos:
            if q.name in (qos, part.qos):
                found += [("duration", q.max_wall), ("hosts", q.max_nodes_per_user)]
                found += [("hosts", q.max_nodes_per_job), ("hosts", q.grp_nodes)]
    return [(kind, limit) for kind, limit in found if limit is not None]


@settings(max_examples=300)
@given(_rules(), st.integers(1, 24), st.integers(1, 24))
def test_for_user_never_allows_more_than_any_one_rule_it_read(rules, hosts, duration):
    user = rules.for_user("u", ["a"])
    if user.denied is not None:
        return
    part = rules.partition
    assert part.allow_groups is None or "a" in part.allow_groups
    if rules.associations_enforced:
        account = rules.default_account("u")
        assert part.allow_accounts is None or account in part.allow_accounts
        assert account not in part.deny_accounts
    allowed = user.refusal("x", hosts, duration) is None
    for kind, limit in _every_limit(rules):
        bound = user.hosts if kind == "hosts" else user.duration
        assert bound is not None, (kind, limit)
        assert bound.value <= limit.value, (kind, limit, bound)
        assert not allowed or (hosts if kind == "hosts" else duration) <= limit.value
