"""``[limits]``: what one user may hold at once and ahead, with defaults a shared site can keep,
tables per user and per Unix group, refusals that name the cap and the user's use, and passes
that never start a session past its owner's cap."""

from __future__ import annotations

import grp
import os
import pwd
import threading

import pytest

from coorm_bridge.core.states import AppState
from coorm_bridge.service.config import Config, Limits, LimitSettings, parse_config
from coorm_bridge.service.errors import OverLimit
from coorm_bridge.service.groups import Groups, unix_groups
from coorm_bridge.service.limits import resolve
from tests import sites

T0 = sites.T0
#: The issue's case: three sessions of at most 4 hosts for 10 minutes, 8 hosts held at once.
ISSUE = LimitSettings(sessions=3, hosts=4, duration=600, held_hosts=8)


def make(tmp_path, limits: LimitSettings) -> sites.Site:
    site = sites.Site(tmp_path, config={"limits": limits})  # 12 hosts: c1 8, c2 4
    site.step(T0)
    return site


def test_the_defaults_keep_one_user_from_the_whole_platform(tmp_path):
    limits = Config().limits  # no [limits] in the file
    assert (limits.duration, limits.held_share) == (7 * 24 * 3600, 0.5)
    assert parse_config("").limits == limits
    site = make(tmp_path, limits)
    sid = site.subscribe()
    with pytest.raises(OverLimit, match=r"limits\.duration allows 604800 s"):
        site.request(sid, {"c1": 1, "c2": 1}, 10 * 365 * 86400)  # every host for 10 years
    with pytest.raises(
        OverLimit,
        match=r"limits\.held_share allows 6 hosts held at once \(0\.5 of the platform's 12\); "
        r"the request asks for 8 \(alice holds 0 now\), so it could never start",
    ):
        site.request(sid, {"c1": 8}, 600)
    assert site.state(sid) is AppState.SUBMITTED  # nothing was written
    site.request(sid, {"c1": 6}, 604800)  # half the platform for a week: allowed
    # Ahead, by default, what one request as large and as long as allowed would take.
    later = site.subscribe()
    with pytest.raises(
        OverLimit,
        match=r"limits\.reserved allows 3628800 host-seconds ahead \(by default "
        r"limits\.held_share x limits\.duration\); alice has 3628800 .* asks for 100 more",
    ):
        site.request(later, {"c2": 1}, 100)
    site.step(T0 + 1)
    assert site.state(sid) is AppState.STARTED


def test_the_issues_case_the_third_session_is_refused_and_another_user_starts(tmp_path):
    site = make(tmp_path, ISSUE)
    first, second, third = site.subscribe(), site.subscribe(), site.subscribe()
    site.request(first, {"c1": 4}, 600)
    site.request(second, {"c1": 4}, 600)
    site.step(T0 + 1)
    assert {site.state(first), site.state(second)} == {AppState.STARTED}
    with pytest.raises(
        OverLimit,
        match=r"limits\.reserved allows 4800 host-seconds ahead \(by default "
        r"limits\.held_hosts x limits\.duration\); alice has 4800 .* asks for 2400 more",
    ):
        site.request(third, {"c2": 4}, 600)
    bob = site.subscribe(user="bob")
    site.request(bob, {"c2": 1}, 600, user="bob")
    site.step(T0 + 2)
    assert site.state(bob) is AppState.STARTED
    # Her first one done and its ghost gone: room again.
    site.bridge.done("alice", first)
    site.step(T0 + 40)
    site.request(third, {"c2": 3}, 600)


def test_a_request_accepted_while_the_others_waited_starts_when_they_leave_room(tmp_path):
    site = make(tmp_path, ISSUE.model_copy(update={"reserved": 10**9}))
    sessions = [site.subscribe() for _ in range(3)]
    for sid in sessions:  # none holds anything yet: each is accepted
        site.request(sid, {"c1": 2, "c2": 2} if sid == sessions[2] else {"c1": 4}, 600)
    site.step(T0 + 1)
    assert [site.state(sid) for sid in sessions] == [
        AppState.STARTED,
        AppState.STARTED,
        AppState.WAITING,
    ]
    first = site.store.session(sessions[0])
    assert site.store.session(sessions[2]).estimated_start == first.started_at + 600
    bob = site.subscribe(user="bob")
    site.request(bob, {"c2": 1}, 60, user="bob")
    site.step(T0 + 2)
    assert site.state(bob) is AppState.STARTED  # the free hosts are not kept for her third


def test_reserved_and_waiting_name_the_cap_and_the_use(tmp_path):
    limits = LimitSettings(held_share=1.0, reserved=3000, waiting=2)
    site = make(tmp_path, limits)
    a, b, c = site.subscribe(), site.subscribe(), site.subscribe()
    site.request(a, {"c1": 8}, 100)  # 800 host-seconds
    site.request(b, {"c1": 8}, 200)  # 1600
    with pytest.raises(
        OverLimit,
        match=r"limits\.reserved allows 3000 host-seconds ahead; alice has 2400 .* asks for 800",
    ):
        site.request(c, {"c1": 8}, 100)
    with pytest.raises(OverLimit, match=r"limits\.waiting allows 2 sessions waiting at once"):
        site.request(c, {"c1": 1}, 100)
    site.request(b, {"c1": 8}, 100)  # a new request replaces its own: 1600 is not counted
    assert site.state(c) is AppState.SUBMITTED


def test_tables_per_user_and_per_group_most_generous_group_per_key():
    settings = LimitSettings(
        held_hosts=4,
        duration=600,
        group={
            "hpc": Limits(held_hosts=16, duration=60),
            "big": Limits(held_share=1.0, duration=3600),
        },
        user={"carol": Limits(held_hosts=2)},
    )
    alice = resolve(settings, "alice", ["hpc", "big"], total=12)
    assert (alice.held.value, alice.held.name) == (16, "limits.group.hpc.held_hosts")
    assert (alice.duration.value, alice.duration.name) == (3600, "limits.group.big.duration")
    carol = resolve(settings, "carol", ["hpc"], total=12)
    assert (carol.held.value, carol.held.name) == (2, "limits.user.carol.held_hosts")
    assert carol.duration.name == "limits.group.hpc.duration"  # not set in her own table
    nobody = resolve(settings, "nobody", [], total=12)
    assert (nobody.held.name, nobody.duration.value) == ("limits.held_hosts", 600)
    # held_hosts set in [limits] replaces the default share there.
    assert resolve(LimitSettings(held_hosts=8), "x", [], 12).held.value == 8


def test_group_tables_apply_to_the_unix_groups_of_the_user(tmp_path):
    me = pwd.getpwuid(os.getuid()).pw_name
    primary = grp.getgrgid(os.getgid()).gr_name
    assert primary in unix_groups(me)
    assert unix_groups("no-such-user-here") == ()  # unknown: the defaults apply
    limits = LimitSettings(group={primary: Limits(held_share=1.0)})
    site = make(tmp_path, limits)
    sid = site.subscribe(user=me)
    site.request(sid, {"c1": 8, "c2": 4}, 600, user=me)  # the whole platform, as a member
    other = site.subscribe(user="no-such-user-here")
    with pytest.raises(OverLimit, match=r"limits\.held_share allows 6"):
        site.request(other, {"c1": 8}, 600, user="no-such-user-here")


def test_a_slow_group_lookup_holds_nobody_up():
    release = threading.Event()
    answers = {"alice": ("hpc",)}

    def lookup(user: str) -> tuple[str, ...]:
        release.wait()
        return answers[user]

    now = [0.0]
    groups = Groups(lookup, ttl=60, wait=0.01, clock=lambda: now[0])
    assert groups.of("alice") == ()  # not known yet: the defaults, at once
    lookup_done = groups._pending["alice"]
    release.set()
    lookup_done.result()  # the lookup ends in the background
    assert groups.of("alice") == ("hpc",)
    release.clear()
    answers["alice"] = ("other",)
    now[0] = 120.0  # stale: the old answer serves while it is read again
    assert groups.of("alice") == ("hpc",)
    lookup_done = groups._pending["alice"]
    release.set()
    lookup_done.result()
    assert groups.of("alice") == ("other",)
    groups.close()
