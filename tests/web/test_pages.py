"""The web view in a real headless Chromium, against a real daemon on the default (busy) mock
platform, read over its TCP listener with each user's token, as a site's users would.

What a user relies on: the Gantt draws the demo's placeholders on the hosts and at the times the
API reports (checked on the screenshot's pixels and by pointing at them), a new session appears
without a reload, a user sees only their own sessions while an admin sees all."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest
from matplotlib import image

from coorm_bridge.core.model import Filter
from tests import daemons

pytestmark = [pytest.mark.daemon, pytest.mark.browser]

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef0"
ADMIN = "admin-token-0123456789abcde"
#: Playwright's waits: a failsafe only (each waits on what the page does: an attribute, a row).
FAILSAFE = 120_000
#: The installed command (run from the checkout, ``python -m`` would import its folders instead).
COORM_BRIDGE = str(Path(sys.executable).parent / "coorm-bridge")
PLACEHOLDER = (0xF2, 0x8E, 0x2B)  # gantt.js COLOURS.placeholder


@pytest.fixture(scope="module")
def site():
    """A daemon on the default platform (three clusters in use by local jobs), on its socket and
    on TCP with three users' tokens; stopped by its PID afterwards."""
    short = Path(tempfile.mkdtemp(prefix="cbw-", dir="/tmp"))  # a socket's path is short
    platform = (resources.files("coorm_bridge.batchsim") / "default_platform.toml").read_text()
    port = daemons.free_port()
    daemon = daemons.Daemon(
        short,
        daemons.config(
            port=port,
            tokens={ALICE: "coorm_alice", BOB: "coorm_bob", ADMIN: "root"},
            admins=["root"],
        ),
        platform=platform,
        port=port,
    )
    daemon.start()
    yield daemon
    daemon.stop()
    daemons.end_jobs(p.parent for p in short.glob("state/**/jobs/*/spec.json"))
    shutil.rmtree(short, ignore_errors=True)


@pytest.fixture(scope="module")
def demo(site):
    """``coorm-bridge demo`` as alice, running long enough to be looked at: its output up to its
    applications' start (their sessions, placeholders and hosts are then in the API)."""
    process = subprocess.Popen(
        [
            COORM_BRIDGE,
            "demo",
            "--url",
            site.tcp,
            "--token",
            ALICE,
            "--run",
            "90",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("running for"):
            break
    assert any("co-allocated: yes" in x for x in lines), "".join(lines)
    yield "".join(lines)
    process.kill()
    process.wait()


def opened(pages, site, path, token):
    page = pages()
    page.goto(f"{site.tcp}/ui/{path}#token={token}")
    return page


def count(page, name):
    return int(page.evaluate(f"Number(document.body.dataset.{name} ?? 0)"))


def next_draw(page, name, seen):
    page.wait_for_function(
        f"() => Number(document.body.dataset.{name} ?? 0) > {seen}", timeout=FAILSAFE
    )


def test_the_gantt_draws_the_demos_placeholders_where_the_api_puts_them(site, demo, pages):
    with site.client(ALICE) as alice:
        sessions = {s.session: s for s in alice.all_sessions() if s.state.value == "started"}
    held = [p for s in sessions.values() for p in s.placeholders if p.cluster == "alpha"]
    assert len(held) == 2, sessions  # both of the demo's applications, on alpha among others
    page = opened(pages, site, "cluster.html?c=alpha", ALICE)
    next_draw(page, "drawn", 0)
    seen = count(page, "drawn")
    page.click("[data-window='3600']")  # one hour: two minutes are then 30 pixels wide
    next_draw(page, "drawn", seen)
    layout = page.evaluate("coormGantt.layout()")
    hosts = [h["name"] for h in page.evaluate("coormGantt.data.hosts")]
    chart = page.locator("#chart")
    pixels = image.imread(io.BytesIO(chart.screenshot()), format="png")
    box = chart.bounding_box()
    for placeholder in held:
        x0, x1 = (
            layout["left"]
            + (t - layout["t0"])
            / (layout["t1"] - layout["t0"])
            * (layout["width"] - layout["left"])
            for t in (placeholder.start, placeholder.end)
        )
        x = (x0 + x1) / 2
        for host in placeholder.host_names:
            y = (hosts.index(host) + 0.5) * layout["rowHeight"]
            colour = _mostly(pixels, x0 + 3, x1 - 3, y)  # the fill, under the label's letters
            assert _near(colour, PLACEHOLDER), (host, colour)
            # Pointing at it names the session and the host, as the API does.
            page.mouse.move(box["x"] + x, box["y"] + y)
            tip = page.locator("#tooltip")
            assert placeholder.name in tip.text_content()
            assert f"here {host}" in tip.text_content()
            session = next(s for s in sessions.values() if placeholder in s.placeholders)
            assert f"session {session.session} of coorm_alice" in tip.text_content()
        # The hosts the API gives no placeholder at that time are not drawn as one.
        for row, host in enumerate(hosts):
            if any(host in p.host_names for p in held):
                continue
            y = (row + 0.5) * layout["rowHeight"]
            colour = _mostly(pixels, x0 + 3, x1 - 3, y)
            assert not _near(colour, PLACEHOLDER), (host, colour)
    kinds = set(page.evaluate("coormGantt.data.bars.map((b) => b.kind)"))
    assert {"running", "pending", "placeholder"} <= kinds  # among the local jobs, queued ones too
    # Dragged 200 pixels to the left, the chart shows later times by as much.
    seen = count(page, "drawn")
    page.mouse.move(box["x"] + 700, box["y"] + 40)
    page.mouse.down()
    page.mouse.move(box["x"] + 500, box["y"] + 40, steps=4)
    page.mouse.up()
    next_draw(page, "drawn", seen)
    moved = page.evaluate("coormGantt.layout()")["t0"] - layout["t0"]
    per_pixel = (layout["t1"] - layout["t0"]) / (layout["width"] - layout["left"])
    assert moved == pytest.approx(200 * per_pixel, rel=0.02)
    assert page.errors == []


def test_a_new_session_appears_without_a_reload(site, pages):
    page = opened(pages, site, "", ALICE)
    next_draw(page, "refreshed", 0)
    gantt = opened(pages, site, "cluster.html?c=gamma", ALICE)
    next_draw(gantt, "drawn", 0)
    with site.client(ALICE) as alice:
        sid = alice.subscribe(Filter(clusters=("gamma",)), name="late").session
        page.wait_for_selector(f"tr[data-session='{sid}']", timeout=FAILSAFE)
        alice.request(sid, nodes={"gamma": 1}, duration=3600)
        gantt.wait_for_function(
            f"() => coormGantt.data.bars.some((b) => b.session === '{sid}')", timeout=FAILSAFE
        )
        row = page.locator(f"tr[data-session='{sid}']")
        assert "late" in row.text_content()
        finish(alice, sid)
    assert page.errors == []
    assert gantt.errors == []


def test_a_user_sees_only_their_sessions_and_an_admin_all(site, pages):
    with site.client(ALICE) as alice:
        sid = alice.subscribe(Filter(clusters=("beta",)), name="alices").session
        alice.request(sid, nodes={"beta": 1}, duration=3600)
        try:
            bob = opened(pages, site, "", BOB)
            admin = opened(pages, site, "", ADMIN)
            admin.wait_for_selector(f"tr[data-session='{sid}']", timeout=FAILSAFE)
            next_draw(bob, "refreshed", 0)
            assert bob.locator(f"tr[data-session='{sid}']").count() == 0
            assert "alices" not in bob.locator("#sessions").text_content()
            # Her session's page tells bob it is not his; the Gantt shows him where, not whose.
            page = opened(pages, site, f"session.html?id={sid}", BOB)
            page.wait_for_selector("#problem.shown", timeout=FAILSAFE)
            assert "no session" in page.locator("#problem").text_content()
            gantt = opened(pages, site, "cluster.html?c=beta", BOB)
            next_draw(gantt, "drawn", 0)
            shown = gantt.evaluate("coormGantt.data.bars.filter((b) => b.kind === 'placeholder')")
            assert shown
            assert all(b["session"] is None and b["owner"] is None for b in shown)
            assert sid not in gantt.content()
            # Her own page shows her view, her request on it and her estimated start.
            mine = opened(pages, site, f"session.html?id={sid}", ALICE)
            next_draw(mine, "drawn", 0)
            assert mine.locator("[data-fact='owner']").text_content() == "coorm_alice"
            assert "beta:1" in mine.locator("[data-fact='request']").text_content()
            mine.wait_for_selector("#events li", timeout=FAILSAFE)  # her events, as they come
        finally:
            finish(alice, sid)


def test_without_a_token_the_page_asks_for_one(site, pages):
    page = pages()
    page.goto(f"{site.tcp}/ui/")
    page.wait_for_selector("form.token", timeout=FAILSAFE)
    page.fill("form.token input", BOB)
    page.click("form.token button")
    next_draw(page, "refreshed", 0)
    assert page.locator("#health").text_content().startswith(("ok", "degraded"))


def finish(client, sid):
    """Done once started (its hosts become a ghost), else withdrawn."""
    if client.session(sid).state.value == "started":
        client.done(sid)
    else:
        client.withdraw(sid)


def _mostly(pixels, x0, x1, y):
    """The commonest colour of the screenshot's row ``y`` from ``x0`` to ``x1``."""
    seen = Counter(
        tuple(round(c * 255) for c in pixels[int(y), x][:3]) for x in range(int(x0), int(x1) + 1)
    )
    return seen.most_common(1)[0][0]


def _near(colour, wanted, tolerance=24):
    return all(abs(a - b) <= tolerance for a, b in zip(colour, wanted, strict=True))
