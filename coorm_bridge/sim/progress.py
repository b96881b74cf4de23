"""What a sweep shows while it runs: a bar on a terminal, a few plain lines otherwise (CI logs).

Failures are always told at once, with the spec's key, so that a long sweep's first error is
seen before the end.
"""

from __future__ import annotations

import sys
from typing import Protocol, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coorm_bridge.sim.runners import RunStatus


class Reporter(Protocol):
    """Told of the sweep's start and of every run as it ends."""

    def start(self, total: int, stored: int) -> None:
        """``total`` runs planned, ``stored`` of them already done by an earlier sweep."""

    def finished(self, outcome: RunStatus) -> None:
        """One run ended."""

    def close(self) -> None:
        """The sweep ended (or was interrupted)."""


def failure_line(outcome: RunStatus) -> str:
    """One line on a failed run: which spec, what error, where its traceback is."""
    where = f" (traceback: {outcome.log})" if outcome.log else ""
    return f"run failed: {outcome.key}: {outcome.error}{where}"


class LogReporter:
    """Plain lines: one when a tenth more of the runs has ended (and the last), one per failure."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total = self.ended = self.failed = self.shown = 0

    def start(self, total: int, stored: int) -> None:
        """See :class:`Reporter`."""
        self.total, self.ended = total, stored
        self.shown = stored
        self._say(f"{total} runs, {stored} already stored, {total - stored} to do")

    def finished(self, outcome: RunStatus) -> None:
        """See :class:`Reporter`."""
        self.ended += 1
        if outcome.error is not None:
            self.failed += 1
            self._say(failure_line(outcome))
        step = max(1, self.total // 10)
        if self.ended == self.total or self.ended - self.shown >= step:
            self.shown = self.ended
            failed = f", {self.failed} failed" if self.failed else ""
            self._say(f"{self.ended}/{self.total} runs ended{failed}")

    def close(self) -> None:
        """See :class:`Reporter`."""

    def _say(self, line: str) -> None:
        print(f"coorm-sim: {line}", file=self.stream, flush=True)


class BarReporter:
    """A rich progress bar on the terminal's standard error."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.bar = Progress(
            TextColumn("[bold]runs"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self.task = self.bar.add_task("runs", total=0, failed="")
        self.failed = 0

    def start(self, total: int, stored: int) -> None:
        """See :class:`Reporter`."""
        self.bar.update(self.task, total=total, completed=stored)
        self.bar.start()

    def finished(self, outcome: RunStatus) -> None:
        """See :class:`Reporter`."""
        if outcome.error is not None:
            self.failed += 1
            self.bar.console.print(failure_line(outcome), style="red", markup=False)
        self.bar.update(self.task, advance=1, failed=f"{self.failed} failed" if self.failed else "")

    def close(self) -> None:
        """See :class:`Reporter`."""
        self.bar.stop()


def reporter_for(stream: TextIO | None = None) -> Reporter:
    """A bar if ``stream`` (standard error by default) is a terminal, else plain lines."""
    stream = stream or sys.stderr
    if stream.isatty():
        return BarReporter(Console(file=stream))
    return LogReporter(stream)
