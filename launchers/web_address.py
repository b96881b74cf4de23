"""Where a user's ``coorm-bridge web`` listens, so that ``coorm-launch`` can link to its session's
page: a file in the user's runtime folder (0600, like the socket beside it), naming the page
server, its token, the bridge it reads and its process.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from pydantic import Field, ValidationError

from coorm_bridge.core.model import Frozen
from coorm_bridge.paths import runtime_dir

FILE_NAME = "web.json"


class WebAddress(Frozen):
    url: str = Field(max_length=200)
    """The page server's base URL (``http://127.0.0.1:<port>``)."""
    token: str = Field(min_length=16, max_length=200)
    bridge: str = Field(max_length=4096)
    """The bridge URL its pages read (a socket's ``unix://`` path)."""
    pid: int = Field(gt=0)

    def page(self, path: str) -> str:
        """A page's link, the token in its fragment: a browser sends it to no server, the page
        reads it."""
        return f"{self.url}/ui/{path}#token={self.token}"

    def session_page(self, session: str) -> str:
        return self.page(f"session.html?id={session}")


def address_file() -> Path:
    return runtime_dir() / FILE_NAME


def announce(address: WebAddress, path: Path | None = None) -> Path:
    """Write the address for this user's launchers (replacing an older one at once)."""
    target = path or address_file()
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(address.model_dump_json())
    partial.replace(target)
    return target


def withdraw(pid: int, path: Path | None = None) -> None:
    """Remove the address if it is still this process's (a newer server may have replaced it)."""
    target = path or address_file()
    found = _read(target)
    if found is not None and found.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()


def find(bridge: str, path: Path | None = None) -> WebAddress | None:
    """The running page server reading ``bridge``, if there is one: its file is there, names
    this bridge, and its process is alive."""
    found = _read(path or address_file())
    if found is None or found.bridge != bridge:
        return None
    try:
        os.kill(found.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return found  # alive, if another user's (the file is ours: unusual, but alive)
    return found


def _read(path: Path) -> WebAddress | None:
    try:
        return WebAddress.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError):
        return None
