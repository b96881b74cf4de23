"""What the user sees while the launcher waits and runs: a live line on a terminal, log lines
otherwise.

On a terminal (``rich``) one line stays at the bottom and is redrawn every second: the state,
the estimated start with its countdown, and the hosts requested per cluster; notes (a new
request, a refused placement, the start, each job's fate) scroll above it. When stdout is a
file or a pipe (a batch job, a CI log), the same facts come as plain time-stamped lines, one per
change and never one per second, so that a log stays readable.
"""

from __future__ import annotations

import sys
import time
from typing import IO, TYPE_CHECKING, Protocol

from coorm_bridge.core.model import Request

if TYPE_CHECKING:
    from rich.live import Live
    from rich.text import Text


class Display(Protocol):
    def status(
        self, state: str, request: Request | None, estimated: int | None, detail: str = ""
    ) -> None:
        """The waiting line: what the launcher is doing, what it asked for, when it starts."""

    def note(self, text: str) -> None:
        """Something that happened, kept in the scroll-back."""

    def warn(self, text: str) -> None:
        """Something that went wrong (on stderr when not a terminal)."""

    def tick(self) -> None:
        """Once a second: a live line redraws its countdown."""

    def page(self, session: str, link: str) -> None:
        """The session's page (``coorm-bridge web``): said once, on stderr; a live line ends
        with its short form."""

    def close(self) -> None: ...


def session_page(bridge: str, session: str) -> str | None:
    """The link to the session's page on the user's ``coorm-bridge web``, if one runs for this
    bridge (its address file names it, its process is alive)."""
    from coorm_bridge.launchers.web_address import find  # noqa: PLC0415 - once, when subscribed

    address = find(bridge)
    link = None if address is None else address.session_page(session)
    return link if link is not None and link.isprintable() else None


def short_link(link: str) -> str:
    """A page link as the live line shows it: without its scheme and its token (the fragment)."""
    return link.partition("#")[0].partition("://")[2] or link


def clock(t: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def countdown(seconds: int) -> str:
    """``2h03m``, ``4m05s``, ``12s``: how long until a start, at a glance."""
    seconds = max(0, seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def estimate_text(estimated: int | None, now: float, requested: bool, state: str = "") -> str:
    if state == "running":
        return "started" if estimated is None else f"started {clock(estimated)}"
    if not requested:
        return "no request yet"
    if estimated is None:
        return "never for now (larger than the platform, or a cluster drained for maintenance)"
    left = int(estimated - now)
    return (
        f"start {clock(estimated)} (now)"
        if left <= 0
        else (f"start {clock(estimated)} (in {countdown(left)})")
    )


def request_text(request: Request | None) -> str:
    if request is None:
        return "-"
    hosts = " + ".join(f"{n} on {c}" for c, n in request.nodes.items())
    return f"{hosts} for {countdown(request.duration)}"


class PlainDisplay:
    """Time-stamped lines, one per change (stdout for facts, stderr for problems)."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._last: tuple[object, ...] | None = None

    def _line(self, stream: IO[str], text: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        print(f"{stamp} coorm-launch: {text}", file=stream, flush=True)

    def status(
        self, state: str, request: Request | None, estimated: int | None, detail: str = ""
    ) -> None:
        now = (state, request, estimated, detail)
        if now == self._last:
            return
        self._last = now
        said = f"{state}; {estimate_text(estimated, time.time(), request is not None, state)}"
        if request is not None:
            said += f"; asking {request_text(request)}"
        self._line(self.out, f"{said}{f'; {detail}' if detail else ''}")

    def note(self, text: str) -> None:
        self._line(self.out, text)

    def warn(self, text: str) -> None:
        self._line(self.err, text)

    def tick(self) -> None:
        pass

    def page(self, session: str, link: str) -> None:
        self._line(self.err, f"session {session}: {link}")

    def close(self) -> None:
        pass


class LiveDisplay:
    """One live line at the bottom of the terminal, redrawn every second, notes above it."""

    def __init__(self) -> None:
        from rich.console import Console  # noqa: PLC0415 - only a terminal pays for rich
        from rich.live import Live  # noqa: PLC0415

        self.console = Console(highlight=False)
        self._state: tuple[str, Request | None, int | None, str] = ("starting", None, None, "")
        self._link: str | None = None
        self.live: Live = Live(
            self._render(), console=self.console, auto_refresh=False, transient=True
        )
        self.live.start()

    def _render(self) -> Text:
        from rich.markup import escape  # noqa: PLC0415
        from rich.style import Style  # noqa: PLC0415
        from rich.text import Text  # noqa: PLC0415

        state, request, estimated, detail = self._state
        parts = [
            f"[bold]{escape(state)}[/bold]",
            escape(estimate_text(estimated, time.time(), request is not None, state)),
            f"asking {escape(request_text(request))}",
        ]
        if detail:
            parts.append(escape(detail))
        line = Text.from_markup("  ·  ".join(parts))
        if self._link is not None:  # the short form, a link to the whole one where terminals can
            page = Text.assemble("  ·  ", (short_link(self._link), Style(link=self._link)))
            if line.cell_len + page.cell_len <= self.console.width:
                line.append_text(page)
        return line

    def status(
        self, state: str, request: Request | None, estimated: int | None, detail: str = ""
    ) -> None:
        self._state = (state, request, estimated, detail)
        self.tick()

    def note(self, text: str) -> None:
        from rich.markup import escape  # noqa: PLC0415

        self.console.print(f"[dim]{clock(int(time.time()))}[/dim] {escape(text)}")

    def warn(self, text: str) -> None:
        from rich.markup import escape  # noqa: PLC0415

        self.console.print(f"[dim]{clock(int(time.time()))}[/dim] [yellow]{escape(text)}[/yellow]")

    def tick(self) -> None:
        self.live.update(self._render(), refresh=True)

    def page(self, session: str, link: str) -> None:
        from rich.text import Text  # noqa: PLC0415

        self._link = link
        said = f"session {session}: {link}"
        if sys.stderr.isatty():  # the terminal: above the live line, whole on one line to copy
            stamp = Text(clock(int(time.time())), "dim")
            self.console.print(Text.assemble(stamp, " ", said), soft_wrap=True)
        else:  # the real stderr, which rich sends to the terminal while the live line shows
            err = getattr(sys.stderr, "rich_proxied_file", sys.stderr)
            print(f"coorm-launch: {said}", file=err, flush=True)
        self.tick()

    def close(self) -> None:
        self.live.stop()


def make_display(stream: IO[str] | None = None, plain: bool | None = None) -> Display:
    """A live line when ``stream`` (stdout) is a terminal, plain lines otherwise."""
    stream = stream or sys.stdout
    if plain is None:
        plain = not stream.isatty()
    if plain:
        return PlainDisplay()
    return LiveDisplay()
