"""The session's page on the live line: its short form (no scheme, no token) at the line's end
when it fits, a link to the whole one; the whole link said once on stderr."""

from __future__ import annotations

import time

from coorm_bridge.core.model import Request
from coorm_bridge.launchers.display import LiveDisplay, short_link

TOKEN = "t0k3n" * 4
LINK = f"http://127.0.0.1:8123/ui/session.html?id=s1#token={TOKEN}"


def test_the_short_form_drops_the_scheme_and_the_token():
    assert short_link(LINK) == "127.0.0.1:8123/ui/session.html?id=s1"


def test_the_live_line_ends_with_the_short_link_when_it_fits(capsys):
    display = LiveDisplay()
    try:
        display.console.width = 200
        display.status("waiting", Request(nodes={"c1": 2}, duration=60), int(time.time()) + 60)
        without = display._render().plain
        display.page("s1", LINK)
        line = display._render()
        assert line.plain == f"{without}  ·  127.0.0.1:8123/ui/session.html?id=s1"
        assert [s.style.link for s in line.spans if not isinstance(s.style, str)] == [LINK]
        display.console.width = len(without) + 10  # too narrow for the link: the line as before
        assert display._render().plain == without
    finally:
        display.close()
    said = capsys.readouterr()
    assert said.err == f"coorm-launch: session s1: {LINK}\n"  # stderr is no terminal here
    assert TOKEN not in said.out
