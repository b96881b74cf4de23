"""A full state folder, on a real ``coorm-bridge serve`` whose state lives on a small tmpfs (root
only: mounting needs it; CI runs as root): the API answers 503 and changes nothing, the daemon
and the mock platform recover by themselves once space is freed, and the log has no traceback.

The test starts its own daemon and stops only that process, by PID; it unmounts its tmpfs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.client import BridgeError
from tests import daemons
from tests.daemons import wait_for

pytestmark = [
    pytest.mark.daemon,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root"),
]

FAILSAFE = 60


@pytest.fixture
def small_state(folder: Path) -> Iterator[Path]:
    """The daemon's state folder on a 16 MiB tmpfs of its own, unmounted afterwards."""
    state = folder / "state"
    state.mkdir(mode=0o700)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(state)], check=True
    )
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


def fill(folder: Path) -> Path:
    """A file that takes every free byte of ``folder``'s filesystem."""
    filler = folder / "filler"
    chunk = b"\0" * (1 << 16)
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(chunk)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    with contextlib.suppress(OSError), filler.open("ab", buffering=0) as out:
        while True:
            out.write(b"\0")  # the last bytes too
    return filler


def eventually(check, what: str):  # type: ignore[no-untyped-def]
    """``check()``'s first answer that is not None, asked as the daemon works (a failsafe only)."""
    deadline = time.monotonic() + FAILSAFE
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(0.2)
    raise AssertionError(f"never: {what}")


def test_a_full_state_folder_refuses_with_503_and_the_bridge_recovers_once_freed(
    make_daemon, small_state
):
    daemon = make_daemon(daemons.config(), daemons.PLATFORM).start()
    with daemon.client() as client:
        before = len(client.sessions())
        filler = fill(small_state)
        made, refused = 0, None
        for _ in range(50):  # a write may still find room in a page: until one needs more
            try:
                client.subscribe(Filter(), name="while full")
            except BridgeError as error:
                refused = error
                break
            made += 1
        assert refused is not None
        assert (refused.status, refused.code) == (503, "storage_full")
        assert "nothing was changed" in refused.detail
        assert len(client.sessions()) == before + made  # the refused one left nothing
        filler.unlink()

        def healthy() -> bool | None:
            return True if client.health().status == "ok" else None

        eventually(healthy, "health ok again")
        sid = client.subscribe(Filter(), name="after").session
        client.request(sid, Request(nodes={"c1": 1}, duration=60))
        wait_for(client, sid, "start")
    log = daemon.log.read_text()
    assert "Traceback" not in log
    assert "storage_full" not in log or "state folder is full" in log
