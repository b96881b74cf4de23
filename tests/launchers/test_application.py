"""The application API for evolving codes (launchers/application.py) against a real daemon on the
mock platform, as an adaptive code and a parameter sweep use it: pre-allocate, grow and shrink
inside the pre-allocation, announce the next step, answer a preemption in time; its notices go
on through a daemon killed with -9 and restarted, and a new process picks the session up.

Every wait reads the application's notices (long polls); none sleeps.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from coorm_bridge.core.messages import CAP
from coorm_bridge.core.model import Filter
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import Relation, RequestType
from coorm_bridge.launchers.application import (
    Application,
    ApplicationEnded,
    Killed,
    Notice,
    Preempted,
    Started,
    Views,
    ViewsChanged,
)
from coorm_bridge.launchers.evolving import EvolvingClient
from tests import daemons
from tests.readme import README

pytestmark = pytest.mark.daemon
N = TypeVar("N")


class Daemon(daemons.Daemon):
    """Two clusters (c1: 8 hosts, c2: 4) on the mock, over the Unix socket."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder, daemons.config(), daemons.PLATFORM)

    def client(self) -> EvolvingClient:
        return EvolvingClient(self.unix, timeout=10)


@pytest.fixture
def daemon(make_daemon):  # type: ignore[no-untyped-def]
    return functools.partial(make_daemon, cls=Daemon)().start()


def first(notices: Iterator[Notice], kind: type[N], where: Callable[[N], bool] = bool) -> N:
    """The next notice of ``kind`` that ``where`` accepts (the others are applied and passed)."""
    for notice in notices:
        assert not isinstance(notice, ApplicationEnded), notice
        if isinstance(notice, kind) and where(notice):
            return notice
    raise AssertionError(f"the session ended before a {kind.__name__}")


def test_an_adaptive_code_grows_and_shrinks_inside_its_pre_allocation_and_announces_a_step(
    daemon,  # type: ignore[no-untyped-def]
) -> None:
    with daemon.client() as client:
        app = Application.subscribe(client, Filter(clusters=("c1",)), name="amr")
        notices = app.notices(wait=5)
        views = first(notices, ViewsChanged)
        assert app.views.non_preemptible.keys() == {"c1"}
        assert app.views.free("c1", views.time) >= 6  # room for the pre-allocation now
        pa = app.pre_allocate("c1", 6, 3600)
        started = first(notices, Started, lambda n: n.request == pa.request)
        held = started.hosts["c1"]
        assert len(held) == 6
        assert app.requests[pa.request].state is AppState.STARTED
        assert app.unused(pa.request) == 6

        # Growing inside it: started in the call, on its hosts.
        grown = app.grow("c1", 4, 600)
        assert grown.state is AppState.STARTED
        assert grown.inside == pa.request
        assert set(grown.host_names) <= set(held)
        assert app.unused(pa.request) == 2
        # Shrinking: one host back, three kept.
        shrunk = app.shrink(grown.request, 1)
        assert len(shrunk.host_names) == 3
        assert set(shrunk.host_names) < set(grown.host_names)
        assert app.unused(pa.request) == 3

        # The next step, announced: held from the pre-allocation's end on its hosts, and
        # started on them at its early end.
        step = app.announce(pa.request, 6, 1800)
        assert step.related_to == pa.request
        assert step.related_how is Relation.NEXT
        assert step.type is RequestType.PRE_ALLOCATION
        assert step.state is not AppState.STARTED
        app.done(grown.request)
        app.done(pa.request)
        following = first(notices, Started, lambda n: n.request == step.request)
        assert set(following.hosts["c1"]) == set(held)
        assert app.requests[step.request].state is AppState.STARTED
        assert app.requests[grown.request].state is not AppState.STARTED

        app.end()
        ended = list(notices)
        assert isinstance(ended[-1], ApplicationEnded)
        assert ended[-1].state is AppState.FINISHED
        assert app.state is AppState.FINISHED
        # Its requests ended with it (their ghosts, if any, are the bridge's business).
        assert not [r for r in app.refresh().requests if r.state in (AppState.STARTED,)]


def test_a_sweep_gives_preempted_hosts_back_in_time_and_keeps_the_others(daemon) -> None:  # type: ignore[no-untyped-def]
    with daemon.client() as one, daemon.client() as two:
        sweep = Application.subscribe(one, Filter(clusters=("c2",)), name="sweep")
        sweeping = sweep.notices(wait=5)
        work = sweep.preemptible("c2", 4, 3600)
        began = first(sweeping, Started, lambda n: n.request == work.request)
        assert len(began.hosts["c2"]) == 4  # every host was idle

        solver = Application.subscribe(two, Filter(clusters=("c2",)), name="solver")
        solving = solver.notices(wait=5)
        need = solver.grow("c2", 3, 600)
        assert need.state is not AppState.STARTED  # not before hosts come back

        preempted = first(sweeping, Preempted, lambda n: n.request == work.request)
        assert preempted.hosts == 3
        assert preempted.deadline >= preempted.time
        assert len(preempted.host_names) == 3
        kept = sweep.give_back(preempted)
        assert kept.state is AppState.STARTED
        assert set(kept.host_names) == set(began.hosts["c2"]) - set(preempted.host_names)

        taken = first(solving, Started, lambda n: n.request == need.request)
        assert set(taken.hosts["c2"]) == set(preempted.host_names)
        assert sweep.requests[work.request].state is AppState.STARTED  # not killed
        solver.end()
        sweep.end()
        assert [n.state for n in sweeping if isinstance(n, ApplicationEnded)] == [AppState.FINISHED]


def test_a_preemption_not_answered_kills_the_work_past_its_deadline(daemon) -> None:  # type: ignore[no-untyped-def]
    with daemon.client() as one, daemon.client() as two:
        sweep = Application.subscribe(one, Filter(clusters=("c2",)), name="sweep")
        sweeping = sweep.notices(wait=5)
        work = sweep.preemptible("c2", 4, 3600)
        first(sweeping, Started, lambda n: n.request == work.request)
        solver = Application.subscribe(two, Filter(clusters=("c2",)), name="solver")
        need = solver.grow("c2", 4, 600)
        preempted = first(sweeping, Preempted, lambda n: n.request == work.request)
        killed = first(sweeping, Killed, lambda n: n.request == work.request)
        assert killed.time >= preempted.deadline
        assert sweep.requests[work.request].state is not AppState.STARTED
        taken = first(solver.notices(wait=5), Started, lambda n: n.request == need.request)
        assert taken.time >= preempted.deadline
        sweep.end()
        solver.end()


def test_notices_go_on_through_a_kill_9_and_a_new_process_picks_the_session_up(daemon) -> None:  # type: ignore[no-untyped-def]
    with daemon.client() as client:
        app = Application.subscribe(client, Filter(clusters=("c1",)), name="amr")
        notices = app.notices(wait=5)
        pa = app.pre_allocate("c1", 6, 3600)
        first(notices, Started, lambda n: n.request == pa.request)
        sent: list[str] = []

        def restart_then_grow() -> None:  # while the application waits in a long poll
            daemon.kill(signal.SIGKILL)
            daemon.start()
            with daemon.client() as other:
                sent.append(other.send_request(app.session, id="g", cluster="c1", hosts=2,
                                               duration=600).request)  # fmt: skip

        meanwhile = threading.Thread(target=restart_then_grow)
        meanwhile.start()
        grown = first(notices, Started, lambda n: n.request == "g")
        meanwhile.join()
        assert sent == ["g"]
        assert app.requests["g"].state is AppState.STARTED
        assert app.requests["g"].inside == pa.request
        told = app.after

    with daemon.client() as again:
        later = Application.resume(again, app.session)
        assert later.after >= told
        assert {k: (r.state, r.host_names) for k, r in later.requests.items()} == {
            k: (r.state, r.host_names) for k, r in app.requests.items()
        }
        assert later.views.non_preemptible.keys() == {"c1"}
        assert set(later.requests["g"].host_names) == set(grown.hosts["c1"])
        later.end()
        assert isinstance(list(later.notices(wait=5))[-1], ApplicationEnded)


def test_the_views_answer_when_hosts_stay_free_long_enough() -> None:
    views = Views(non_preemptible={"c1": CAP(cluster="c1", steps=((100, 2), (200, 6), (300, 1)))})
    assert views.free("c1", 99) == 0  # before the view begins
    assert views.free("c1", 250) == 6
    assert views.free("c1", 10**9) == 1  # the last step lasts for ever
    assert views.earliest("c1", 2, 150, after=100) == 100  # 2 then 6 free
    assert views.earliest("c1", 2, 500, after=100) is None  # 1 free from 300 on, for ever
    assert views.earliest("c1", 1, 500, after=150) == 150
    assert views.earliest("c1", 4, 50, after=100) == 200
    assert views.earliest("c1", 4, 150, after=100) is None  # 6 hosts for 100 s only
    assert views.earliest("c1", 1, 10, after=1000) == 1000
    assert views.earliest("c2", 1, 10, after=0) is None
    assert views.free("c1", 250, preemptible=True) == 0


def readme_block(marker: str) -> str:
    """The fenced block right after ``<!-- marker -->`` in the README."""
    text = README.split(f"<!-- {marker} -->\n", 1)[1]
    return text.split("```", 2)[1].split("\n", 1)[1]


def test_the_readmes_example_prints_what_the_readme_shows(daemon) -> None:  # type: ignore[no-untyped-def]
    code, shown = readme_block("application-example"), readme_block("application-output")
    ran = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "COORM_BRIDGE_URL": daemon.unix},
        cwd="/",  # not the checkout: its coorm_bridge/ folder is not the installed package
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == shown
