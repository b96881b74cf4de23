"""``coorm-bridge web`` as a user runs it: a page server on loopback reading the bridge's socket
with that user's identity, guarded by the token of the link it prints, found by the user's demo
and launchers; the README's walk-through (serve, web, demo, open the link) in a real Chromium."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

import pytest
import requests

from coorm_bridge.core.model import Filter
from tests import daemons
from tests.web.test_pages import COORM_BRIDGE, FAILSAFE, finish, next_draw

pytestmark = [pytest.mark.daemon, pytest.mark.browser]

BOB = "bob-token-0123456789abcdef0"


@pytest.fixture(scope="module")
def bridge():
    """A daemon on the default platform: on its socket for this test's user, on TCP for bob."""
    folder = Path(tempfile.mkdtemp(prefix="cbx-", dir="/tmp"))
    folder.chmod(0o755)  # other users reach its socket (0666), as on a site
    platform = (resources.files("coorm_bridge.batchsim") / "default_platform.toml").read_text()
    port = daemons.free_port()
    daemon = daemons.Daemon(
        folder, daemons.config(port=port, tokens={BOB: "coorm_bob"}), platform=platform, port=port
    )
    daemon.start()
    yield daemon
    daemon.stop()
    daemons.end_jobs(p.parent for p in folder.glob("state/**/jobs/*/spec.json"))
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def web(bridge, tmp_path):
    """``coorm-bridge web`` on the bridge's socket, in a runtime folder of the test's own: its
    printed link, its address file, its process (stopped by PID afterwards)."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    process = subprocess.Popen(
        [COORM_BRIDGE, "web", "--url", bridge.unix],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    first = process.stdout.readline()
    assert first.startswith("coorm-bridge web: http://127.0.0.1:"), first
    link = first.split()[2]
    yield link, runtime / "coorm-bridge" / "web.json", process, env
    if process.poll() is None:
        process.kill()
        process.wait()


def test_the_link_opens_this_users_sessions_and_no_one_elses(bridge, web, pages):
    link, address, process, _ = web
    assert address.stat().st_mode & 0o777 == 0o600
    written = json.loads(address.read_text())
    assert written["bridge"] == bridge.unix
    assert written["pid"] == process.pid
    with bridge.client() as me, bridge.client(BOB) as bob:
        mine = me.subscribe(Filter(clusters=("gamma",)), name="mine").session
        theirs = bob.subscribe(Filter(clusters=("gamma",)), name="bobs").session
        try:
            page = pages()
            page.goto(link)
            page.wait_for_selector(f"tr[data-session='{mine}']", timeout=FAILSAFE)
            assert page.locator(f"tr[data-session='{theirs}']").count() == 0
            assert "#token=" not in page.url  # taken from the address bar once read
            # The session's page, then its request drawn on its view, live.
            page.click(f"a[href='session.html?id={mine}']")
            next_draw(page, "drawn", 0)
            seen = int(page.evaluate("Number(document.body.dataset.drawn)"))
            me.request(mine, nodes={"gamma": 2}, duration=1800)
            page.wait_for_selector("[data-fact='request']:has-text('gamma:2')", timeout=FAILSAFE)
            next_draw(page, "drawn", seen)
            assert page.errors == []
        finally:
            finish(me, mine)
            finish(bob, theirs)


def test_only_the_pages_reads_go_through_and_only_with_the_token(web):
    link, _, _, _ = web
    base, token = link.split("/ui/")[0], link.split("#token=")[1]
    bearer = {"Authorization": f"Bearer {token}"}
    assert requests.get(f"{base}/v1/health", timeout=30).status_code == 401
    wrong = {"Authorization": "Bearer " + "x" * len(token)}
    assert requests.get(f"{base}/v1/health", headers=wrong, timeout=30).status_code == 401
    assert requests.get(f"{base}/v1/health", headers=bearer, timeout=30).json()["status"]
    assert requests.get(f"{base}/v1/metrics", headers=bearer, timeout=30).status_code == 404
    assert requests.post(
        f"{base}/v1/sessions", headers=bearer, json={}, timeout=30
    ).status_code in (
        404,
        405,
    )
    assert requests.get(f"{base}/ui/", timeout=30).status_code == 200  # pages hold no data


def test_the_demo_links_to_its_placeholders_among_the_local_jobs(bridge, web, pages):
    _link, address, process, env = web
    demo = subprocess.Popen(
        [
            COORM_BRIDGE,
            "demo",
            "--url",
            bridge.unix,
            "--run",
            "60",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        said = []
        for line in demo.stdout:
            said.append(line)
            if line.startswith("running for"):
                break
        links = [x.split(": ", 1)[1].strip() for x in said if x.startswith("see them among")]
        assert len(links) == 2, "".join(said)
        sessions = {x.split()[2].rstrip(":") for x in said if " session " in x}
        page = pages()
        page.goto(links[0])
        page.wait_for_function(
            "() => coormGantt.data && coormGantt.data.bars.filter((b) => b.kind === 'placeholder'"
            " && b.session).length >= 2",
            timeout=FAILSAFE,
        )
        shown = page.evaluate(
            "coormGantt.data.bars.filter((b) => b.kind === 'placeholder').map((b) => b.session)"
        )
        assert sessions <= set(shown), (sessions, shown)
        kinds = set(page.evaluate("coormGantt.data.bars.map((b) => b.kind)"))
        assert "running" in kinds  # among the local jobs
    finally:
        demo.kill()
        demo.wait()
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    assert not address.exists()  # launchers no longer link to a server that is gone


#: An ordinary user's account, when the tests run as root.
NOBODY = 65534


@pytest.fixture
def as_nobody(tmp_path):
    """The words that run a command as ``nobody``, and a runtime folder it owns."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as another user")
    words = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    tried = subprocess.run(
        [*words, sys.executable, "-c", ""], capture_output=True, text=True, check=False, cwd="/"
    )
    if tried.returncode != 0:
        pytest.skip(f"nobody cannot run {sys.executable}: {tried.stderr.strip()}")
    runtime = Path(tempfile.mkdtemp(prefix="cbn-", dir="/tmp"))
    os.chown(runtime, NOBODY, NOBODY)
    yield words, runtime
    shutil.rmtree(runtime, ignore_errors=True)


def test_an_ordinary_users_pages_show_that_users_sessions(bridge, as_nobody, pages):
    """``coorm-bridge web`` run by another user than the daemon's: the bridge knows it by its
    uid on the socket, and its pages show its sessions, not root's."""
    words, runtime = as_nobody
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(runtime)}
    process = subprocess.Popen(
        [*words, COORM_BRIDGE, "web", "--url", bridge.unix],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd="/",
    )
    try:
        link = process.stdout.readline().split()[2]
        assert (runtime / "coorm-bridge" / "web.json").stat().st_uid == NOBODY
        subscribe = (
            "import sys; from coorm_bridge.launchers.client import BridgeClient; "
            "print(BridgeClient(sys.argv[1]).subscribe(name='nobodys').session)"
        )
        theirs = subprocess.run(
            [*words, sys.executable, "-c", subscribe, bridge.unix],
            capture_output=True, text=True, check=True, env=env, cwd="/", timeout=120,
        ).stdout.strip()  # fmt: skip
        with bridge.client() as me:
            mine = me.subscribe(name="roots").session
            try:
                page = pages()
                page.goto(link)
                page.wait_for_selector(f"tr[data-session='{theirs}']", timeout=FAILSAFE)
                assert page.locator(f"tr[data-session='{theirs}'] td").nth(1).text_content() == (
                    "nobody"
                )
                assert page.locator(f"tr[data-session='{mine}']").count() == 0
            finally:
                finish(me, mine)
    finally:
        process.kill()
        process.wait()
