"""``python -P -m coorm_bridge.adapters.mock.supervisor FOLDER``: one front-end job's process.

The daemon does not start a job's command itself but this small process, which starts it and
stays its parent, for two reasons. A job outlives the daemon, as a batch system's job outlives
its client: after a ``kill -9`` and a restart the daemon cannot wait for a process it did not
start, so the supervisor writes the exit status where the new daemon reads it (``status.json``,
atomically). And stopping a job is a sequence (SIGTERM to all its processes, SIGKILL after a
grace), which the supervisor carries out even while no daemon runs.

``FOLDER/spec.json`` says what to run (a :class:`~coorm_bridge.adapters.frontend.ProcessSpec`
and the grace). The command runs in a process group of its own (in the supervisor's session),
with no shell, in its working folder, its output to the files named (created or truncated). The
supervisor ignores SIGINT and SIGHUP (a terminal closing must not end a job); SIGTERM stops the
job: SIGTERM to its process group, then SIGKILL after the grace. When the command ends,
whatever it left in its group is killed, as a batch system ends a job's processes with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

#: How often the supervisor looks at its command and its stop flag, in seconds.
TICK = 0.1


class _Stop:
    """Set by SIGTERM: the handler only records it, the loop acts on it."""

    asked = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.asked = True


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A Python handler rather than SIG_IGN: handlers are reset at exec, SIG_IGN would be
    inherited by the command."""


def write_status(folder: Path, status: dict[str, object]) -> None:
    """Write ``status.json`` atomically and durably: the daemon reads it whole or not at all."""
    partial = folder / "status.json.part"
    with partial.open("w") as out:
        json.dump(status, out)
        out.flush()
        os.fsync(out.fileno())
    partial.replace(folder / "status.json")


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(group, signum)


def _open_output(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)


def supervise(folder: Path) -> dict[str, object]:
    """Run the command of ``folder/spec.json`` to its end; returns the status to write."""
    spec = json.loads((folder / "spec.json").read_text())
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, _ignore)
    signal.signal(signal.SIGHUP, _ignore)
    argv: list[str] = spec["argv"]
    try:
        out = _open_output(spec["stdout"])
        err = out if spec["stderr"] == spec["stdout"] else _open_output(spec["stderr"])
        try:
            child = subprocess.Popen(  # noqa: S603 - an argument vector, no shell
                argv,
                cwd=spec["workdir"],
                env=spec["environment"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                close_fds=True,
                process_group=0,
            )
        finally:
            os.close(out)
            if err != out:
                os.close(err)
    except OSError as error:
        where = error.filename or argv[0]
        return {"exit_code": None, "signal": None, "reason": f"{where}: {error.strerror}"}
    (folder / "job.pid").write_text(str(child.pid))
    grace = float(spec["grace"])
    killed_at: float | None = None
    stopping = False
    while child.poll() is None:
        if stop.asked and not stopping:
            stopping = True
            _signal_group(child.pid, signal.SIGTERM)
            killed_at = time.monotonic() + grace
        if killed_at is not None and time.monotonic() >= killed_at:
            _signal_group(child.pid, signal.SIGKILL)
            killed_at = None
        time.sleep(TICK)
    _signal_group(child.pid, signal.SIGKILL)  # what the command left behind goes with it
    code = child.returncode
    reason = "stopped (SIGTERM, then SIGKILL after the grace)" if stopping else None
    if code < 0:
        return {"exit_code": None, "signal": -code, "reason": reason}
    return {"exit_code": code, "signal": None, "reason": reason}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -P -m coorm_bridge.adapters.mock.supervisor FOLDER", file=sys.stderr)
        return 2
    folder = Path(args[0])
    # First thing: a daemon that crashed before it recorded this pid finds it here.
    (folder / "supervisor.pid").write_text(str(os.getpid()))
    try:
        status = supervise(folder)
    except Exception as error:  # a broken spec: say so where the daemon looks
        status = {"exit_code": None, "signal": None, "reason": f"supervisor failed: {error}"}
    write_status(folder, status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
