"""SIGTERM and SIGINT for a process that serves until told to stop, then closes what it runs;
SIGHUP for a reload of its settings.

The first signal asks the server to stop; every later one, until the process is done closing, is
noted and ignored. uvicorn's own handling would turn a second SIGINT into a forced exit, which
skips the app's shutdown and cancels the requests still running (each logged with a traceback);
and once the server returned, the default handlers would kill the process (SIGTERM) or raise
KeyboardInterrupt (SIGINT) in the middle of closing the service. The stop is short: a signal
cannot make it shorter, SIGKILL can.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, Self

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """While entered, holds SIGTERM and SIGINT once :meth:`install` was called (by the server
    as it starts: until then they keep their usual effect, so a start-up can be cut short).
    Python functions, not ``SIG_IGN``: processes started meanwhile get the default handlers."""

    def __init__(self) -> None:
        self.received: list[int] = []
        """The signals that came, in order: the first one stopped the server."""
        self._stop: Callable[[], None] | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        self._stop = None
        names = [signal.Signals(sig).name for sig in self.received]
        for name in names[1:]:
            log.info("%s during the stop: ignored", name)
        if names:
            log.info("stopped on %s", names[0])

    def install(self, stop: Callable[[], None]) -> None:
        """From now on the first signal calls ``stop`` (at once if one came already); in the
        main thread only, where Python runs signal handlers (elsewhere nothing changes)."""
        self._stop = stop
        if threading.current_thread() is threading.main_thread() and not self._previous:
            self._previous = {sig: signal.signal(sig, self._handle) for sig in SIGNALS}
        if self.received:
            stop()

    def detach(self) -> None:
        """The server is done: later signals are only noted, until the context exits."""
        self._stop = None

    def _handle(self, sig: int, frame: FrameType | None) -> None:
        self.received.append(sig)
        if len(self.received) == 1 and self._stop is not None:
            self._stop()


class ReloadSignal:
    """While entered, SIGHUP (``systemctl reload``) calls ``reload`` on a thread of its own, one
    reload at a time: reading and checking the file is no work for a signal handler, which
    interrupts the main thread wherever it is (the server's event loop). Outside, SIGHUP keeps
    what it did before; in the main thread only, as for :class:`StopSignals`."""

    def __init__(self, reload: Callable[[], object]) -> None:
        self._reload = reload
        self._one = threading.Lock()
        self._previous: Any = None

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGHUP, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGHUP, self._previous)
            self._previous = None

    def _handle(self, sig: int, frame: FrameType | None) -> None:
        threading.Thread(target=self._run, name="reload", daemon=True).start()

    def _run(self) -> None:
        with self._one:
            try:
                self._reload()
            except Exception:
                log.exception("reload failed; the settings in force stay")
