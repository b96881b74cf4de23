"""One daemon per state folder: an exclusive lock held for the daemon's whole life.

Two daemons on one database would each believe its placeholders are the only ones and delete
the other's as orphans; the second one is refused at start with a message naming the first.
``flock`` is released by the kernel when the process dies, ``kill -9`` included, so a crash
never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from coorm_bridge.store.database import StoreError

LOCK_NAME = "bridge.lock"


class StateLock:
    """Holds ``folder/bridge.lock`` exclusively; the file says which process holds it."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreError(
                f"another coorm-bridge (pid {holder}) already uses the state folder "
                f"{self.path.parent}: stop it first, or give this one its own bridge.state_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None
