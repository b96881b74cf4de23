"""Where a user's bridge lives by default: its socket and its state.

Its own small module because launchers need the default socket too, and importing it must cost
nothing (no configuration models, no adapters).
"""

from __future__ import annotations

import os
from pathlib import Path

SOCKET_NAME = "bridge.sock"


def runtime_dir() -> Path:
    """Where a user's sockets live: ``$XDG_RUNTIME_DIR``, else a private folder under /tmp."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        return Path(base) / "coorm-bridge"
    return Path("/tmp") / f"coorm-bridge-{os.getuid()}"  # noqa: S108 - created 0700, owner checked


def state_dir() -> Path:
    """Where a user's bridge keeps its database: ``$XDG_STATE_HOME``, else ~/.local/state."""
    base = os.environ.get("XDG_STATE_HOME")
    return (Path(base) if base else Path.home() / ".local" / "state") / "coorm-bridge"


def default_socket() -> Path:
    """The socket of a user's own daemon (``coorm-bridge serve`` without a configuration)."""
    return runtime_dir() / SOCKET_NAME
