"""OAR's admission rules and the bridge's containers, on the real test OAR 2.5.9.

The bridge submits each placeholder as its owner (``oarsub -r ... -t container -t noop``, or the
REST API, which runs oarsub): every enabled admission rule runs for it, as for any job of that
user (OAR::IO::add_micheline_job evaluates them all, nothing skips a reservation or a
container). What a rule tests decides whether it can refuse one: a site's bound on walltime,
queue or hosts does; a rule about interactive or batch jobs does not. A refusal ends that
session only, with the cluster and the rule's own words, and is not tried again; so does a
rule that shortens the container instead of refusing it.

The rules added here are removed after each test, and the set of rules is checked to be OAR's
defaults again: the session's OAR is shared by every OAR test file (tests/oar/conftest.py).
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from coorm_bridge.adapters.oar.adapter import OarAdapter
from coorm_bridge.core.batch import NotPermitted, ReservationSpec
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.client import BridgeClient
from tests import daemons
from tests.oar.lab import OarInstance
from tests.oar.test_oar_adapter import BACKENDS, adapter_for, wait
from tests.oar.test_oar_start import follow

pytestmark = pytest.mark.oar

#: OAR 2.5.9's enabled default rules (rule 13 is a disabled example).
DEFAULT_RULES = [*range(1, 13), 14, 15, 16, 17]
#: Rules of the kinds sites write, each with the words it dies with. Priority 18 and up: after
#: OAR's own (rule 1 sets the queue).
WALLTIME = """# coorm-bridge test: at most one hour of walltime for coorm_alice
if ($user eq "coorm_alice") {
    my $max_walltime = OAR::IO::sql_to_duration("1:00:00");
    foreach my $mold (@{$ref_resource_list}) {
        if (defined($mold->[1]) and $mold->[1] > $max_walltime) {
            die("[ADMISSION RULE] $user may not ask for more than 1:00:00 of walltime\\n");
        }
    }
}
"""
WALLTIME_SAID = "[ADMISSION RULE] coorm_alice may not ask for more than 1:00:00 of walltime"
QUEUE = """# coorm-bridge test: coorm_bob may not use the default queue
if ($queue_name eq "default" and $user eq "coorm_bob") {
    die("[ADMISSION RULE] only members of the group coorm_ok may submit to the queue default\\n");
}
"""
QUEUE_SAID = "[ADMISSION RULE] only members of the group coorm_ok may submit to the queue default"
HOSTS = """# coorm-bridge test: at most 4 hosts a job for everyone
foreach my $mold (@{$ref_resource_list}) {
    foreach my $r (@{$mold->[0]}) {
        foreach my $res (@{$r->{resources}}) {
            if ($res->{resource} eq "host" and $res->{value} > 4) {
                die("[ADMISSION RULE] at most 4 hosts a job for $user\\n");
            }
        }
    }
}
"""
#: A rule about batch jobs only (not reservations): it never sees the bridge's containers.
BATCH_ONLY = """# coorm-bridge test: batch jobs last 10 minutes at most
if ($reservationField eq "None") {
    foreach my $mold (@{$ref_resource_list}) {
        if (defined($mold->[1]) and $mold->[1] > 600) {
            die("[ADMISSION RULE] batch jobs last 10 minutes at most\\n");
        }
    }
}
"""
#: A rule that changes the job instead of refusing it.
QUIET_CAP = """# coorm-bridge test: walltimes above one hour are cut to one hour
foreach my $mold (@{$ref_resource_list}) {
    if (defined($mold->[1]) and $mold->[1] > 3600) {
        $mold->[1] = 3600;
    }
}
"""
_CREATED = re.compile(r"New admission rule created: #([0-9]+)")


def enabled_rules(oar: OarInstance) -> list[int]:
    shown = oar.run("oaradmissionrules", "-S", "-Y", check=True).stdout
    return [int(n) for n in re.findall(r"^--- \([0-9]+\) RULE #([0-9]+)$", shown, re.M)]


@pytest.fixture
def site_rules(oar: OarInstance) -> Iterator[Callable[[str], int]]:
    """Adds a site's rule (after OAR's own); every one added is deleted afterwards."""
    assert enabled_rules(oar) == DEFAULT_RULES
    added: list[int] = []

    def add(rule: str) -> int:
        path = oar.base / "site-rule.pl"  # oaradmissionrules reads it as the user oar
        path.write_text(rule)
        path.chmod(0o644)
        made = oar.run("oaradmissionrules", "-n", "-P", "18", "-r", str(path), check=True)
        found = _CREATED.search(made.stdout)
        assert found, made.stdout
        added.append(int(found.group(1)))
        return added[-1]

    oar.reset()
    try:
        yield add
    finally:
        for rule in added:
            oar.run("oaradmissionrules", "-d", str(rule), check=True)
        oar.reset()
    assert enabled_rules(oar) == DEFAULT_RULES


def spec(user: str, hosts: int, seconds: int, name: str) -> ReservationSpec:
    start = int(time.time()) + 3600
    return ReservationSpec(name=name, start=start, end=start + seconds, hosts=hosts, users=(user,))


@pytest.fixture(params=BACKENDS)
def adapter(request: pytest.FixtureRequest, oar: OarInstance) -> Iterator[OarAdapter]:
    made = adapter_for(oar, request.param)
    yield made
    made.close()


def test_oars_default_rules_shape_the_container_and_refuse_none_of_the_bridges(
    oar: OarInstance, adapter: OarAdapter, site_rules: Callable[[str], int]
) -> None:
    """Of OAR's defaults, rule 1 (the default queue), 3 (no draining resources), 11 (no
    desktop-computing resources) and 17 (resources of type default) change the container;
    2 (not root or oar) and 12 (2 waiting reservations unless listed) can refuse it, and are
    tested with the start (test_oar_start.py) and the lab (test_oar_lab.py); the rest are about
    job types the bridge does not ask for (besteffort, deploy, inner, desktop_computing),
    properties it does not name, interactive jobs (14) or a missing walltime (15)."""
    made = adapter.create_reservation("alpha", spec(oar.users[0], 2, 1800, "coorm-rules-1"))
    job_id, job = next((k, j) for k, j in oar.active_jobs().items() if j["name"] == made.name)
    details = oar.job(int(job_id))
    assert details["queue"] == "default"
    assert "desktop_computing = 'NO'" in details["properties"]
    assert "drain='NO'" in details["properties"]
    assert sorted(job["types"]) == ["container", "noop"]
    assert details["walltime"] == 1800  # as asked: rule 15 sets none where one is given


def test_a_sites_rules_refuse_the_container_with_their_words(
    oar: OarInstance, adapter: OarAdapter, site_rules: Callable[[str], int]
) -> None:
    for rule in (WALLTIME, QUEUE, HOSTS, BATCH_ONLY):
        site_rules(rule)
    alice, bob = oar.users[0], oar.users[1]
    refused = {
        (alice, 1, 7200): f"alpha: OAR's admission rules refused it: {WALLTIME_SAID}",
        (bob, 1, 1800): f"alpha: OAR's admission rules refused it: {QUEUE_SAID}",
        (alice, 5, 1800): (
            f"alpha: OAR's admission rules refused it: [ADMISSION RULE] at most 4 hosts a job "
            f"for {alice}"
        ),
    }
    for (user, hosts, seconds), said in refused.items():
        with pytest.raises(NotPermitted) as raised:
            adapter.create_reservation("alpha", spec(user, hosts, seconds, "coorm-rules-2"))
        assert str(raised.value) == said
    # within every bound (and past the batch jobs' one, which is not the container's)
    made = adapter.create_reservation("alpha", spec(alice, 4, 1800, "coorm-rules-3"))
    assert len(made.host_names) == 4


def test_a_container_a_sites_rule_shortens_is_refused_for_good_and_deleted(
    oar: OarInstance, adapter: OarAdapter, site_rules: Callable[[str], int]
) -> None:
    site_rules(QUIET_CAP)
    with pytest.raises(NotPermitted, match=r"given a walltime of 3600 s instead of 7200 s"):
        adapter.create_reservation("alpha", spec(oar.users[0], 1, 7200, "coorm-rules-4"))
    # oardel is carried out at OAR's next pass
    wait(lambda: not [j for j in oar.active_jobs().values() if j["name"] == "coorm-rules-4"])


def config(oar: OarInstance, port: int, token: str) -> str:
    adapter = {"kind": "oar", "reservation_lead": 5, "cluster": daemons.oar_clusters(oar)}
    return daemons.config(
        adapter,
        port=port,
        tokens={token: oar.users[0]},
        policy=daemons.BATCH_POLICY,
        placement={"poll_interval": 1, "horizon": 3600},
    )


@pytest.mark.daemon
def test_a_session_past_a_sites_rule_ends_alone_with_the_rules_words(
    oar: OarInstance, make_daemon, site_rules: Callable[[str], int]
) -> None:
    """Alice may ask OAR for an hour at most: her two-hour session gets an error naming the
    cluster and the rule's words, once; her other session, of ten minutes, asked at the same
    time, starts; the bridge stays healthy."""
    site_rules(WALLTIME)
    token = "oar-rules-test-token-0123456789abcdef"
    port = daemons.free_port()
    daemon = make_daemon(config(oar, port, token), port=port)
    daemon.start()
    try:
        with BridgeClient(daemon.tcp, token=token, timeout=10) as client:
            # asked together: the error of one is no delay of the other
            long = client.subscribe(Filter(clusters=("alpha",)), "too-long").session
            client.request(long, Request(nodes={"alpha": 1}, duration=7200))
            short = client.subscribe(Filter(clusters=("alpha",)), "within").session
            client.request(short, Request(nodes={"alpha": 1}, duration=600))
            error, _, seen = follow(client, long, ("error", "start"))
            assert error.type == "error", seen
            print(f"\nerror event: {error.reason}")
            assert error.reason == (
                "co-allocation failed, nothing held: alpha will not: "
                f"OAR's admission rules refused it: {WALLTIME_SAID}"
            )
            assert not [e for e in seen if e.type == "placement_failed"]  # not tried again
            started, _, seen = follow(client, short, ("start", "error", "killed"))
            assert started.type == "start", seen
            health = client.health()
            assert health.status == "ok", health
            assert not health.problems
            client.done(short)
    finally:
        daemon.stop(signal.SIGKILL)
