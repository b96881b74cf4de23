"""The README's admin walk-through ("A walk-through, from nothing"), its commands run as it
writes them, in its order, against a real daemon on the mock platform; what each prints is what
the README shows under it.

The daemon runs from the shipped etc/coorm-bridge.toml and etc/mock-platform.toml, in a folder of
the test's own instead of /etc/coorm-bridge, /var/lib/coorm-bridge and /run/coorm-bridge, as the
test's user, who stands for root (the file's admin), for alice and for the coorm-bridge account:
the README's paths and names are put in the commands and in the samples alike. Installing
(step 1) is the package's own test (tests/daemon/test_packaging.py)."""

from __future__ import annotations

import getpass
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coorm_bridge.launchers.client import BridgeClient
from tests import readme

pytestmark = pytest.mark.daemon

WALK = readme.README[
    readme.README.index("\n#### A walk-through, from nothing\n") : readme.README.index(
        "\n#### The admin commands\n"
    )
]
BIN = Path(sys.executable).parent
ETC = readme.ROOT / "etc"
#: What differs from run to run: each cluster's hosts free now and later, dates and times, the
#: launcher's clock, session ids, the Unix time a drain began, the demo's hosts per cluster.
VARYING = [
    r"\b\d+ (?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d: \d+, )*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d: \d+"
    r"(?: \(\+\d+ more\))?",
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d{3})?",
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d",
    r"\b[a-z0-9]{16}\b",
    r"since \d+\)",
    r"alpha:\d+ beta:\d+",
]
#: How long a step may take before the test gives up on it (a hang, not a verdict).
FAILSAFE = 120
ME = getpass.getuser()
PROMPTS = ("# ", "alice$ ")


class Walk:
    """The walk-through's machine: its paths in the test's folder, its names the test's user."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.paths = {
            "/etc/coorm-bridge/coorm-bridge.toml": str(folder / "coorm-bridge.toml"),
            "/run/coorm-bridge/bridge.sock": str(folder / "bridge.sock"),
            "/var/lib/coorm-bridge/bridge.lock": str(folder / "state" / "bridge.lock"),
            "/var/lib/coorm-bridge": str(folder / "state"),
            "/var/log/coorm-bridge.log": str(folder / "daemon.log"),
        }
        self.sessions: dict[str, str] = {}
        """The README's session ids -> this run's."""
        self.samples = samples()
        self.at = 0
        """The walk-through's samples already run: each command is the next one's."""

    def shown(self, command: str) -> list[str]:
        """What the walk-through shows ``command`` printing, at its next place from here."""
        for k in range(self.at, len(self.samples)):
            if self.samples[k][0] == command:
                self.at = k + 1
                return self.samples[k][1]
        raise AssertionError(f"the walk-through no longer shows `{command}` here")

    def local(self, text: str) -> str:
        """``text`` with the README's paths, names and session ids made this run's."""
        for theirs, ours in self.paths.items():
            text = text.replace(theirs, ours)
        for theirs, ours in self.sessions.items():
            text = text.replace(theirs, ours)
        admins = ", ".join(sorted({"ops", ME}))
        text = text.replace("[ops, root]", f"[{admins}]")
        return re.sub(r"\b(root|alice)\b", ME, text)

    def argv(self, command: str) -> list[str]:
        """A README command as this test runs it: the installation's scripts, as the test's
        user (``runuser`` dropped), on this run's paths."""
        words = shlex.split(self.local(command))
        if words[:3] == ["runuser", "-u", "coorm-bridge"]:
            words = words[4:]
        if words[:3] == ["runuser", "-l", ME]:
            words = shlex.split(words[4])
        if words[0] in ("coorm-bridge", "coorm-launch"):
            words[0] = str(BIN / words[0])
        return words

    def env(self) -> dict[str, str]:
        """What /etc/profile.d/coorm-bridge.sh gives every login shell."""
        return {
            **os.environ,
            "COORM_BRIDGE_URL": f"unix://{self.paths['/run/coorm-bridge/bridge.sock']}",
        }

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """The README's ``command``, checked against what the README shows it printing."""
        done = self.call(command)
        self.compare(self.shown(command), done.stdout)
        return done

    def call(self, command: str) -> subprocess.CompletedProcess[str]:
        """The README's ``command``, run."""
        done = subprocess.run(
            self.argv(command), capture_output=True, text=True, check=False,
            timeout=FAILSAFE, cwd=self.folder, env=self.env(),
        )  # fmt: skip
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def compare(self, sample: list[str], printed: str) -> None:
        local = [flat(self.local(line)) for line in sample]
        lines = [flat(line) for line in printed.splitlines()]
        assert readme.unmatched(local, lines, VARYING) == [], printed


def flat(line: str) -> str:
    """A line with its runs of spaces as one: table columns are as wide as their names."""
    return " ".join(line.split())


def samples() -> list[tuple[str, list[str]]]:
    """Every command of the walk-through's samples, in order, with what it is shown printing:
    the lines after its prompt, up to the next prompt or the block's end."""
    found = []
    for block in re.findall(r"```text\n(.*?)```", WALK, re.DOTALL):
        lines = block.splitlines()
        prompts = [k for k, line in enumerate(lines) if line.startswith(PROMPTS)]
        if not prompts:
            continue  # output alone (see after())
        for k, end in zip(prompts, [*prompts[1:], len(lines)], strict=True):
            prompt = next(p for p in PROMPTS if lines[k].startswith(p))
            found.append((lines[k][len(prompt) :], lines[k + 1 : end]))
    return found


def command(start: str) -> str:
    """The walk-through's command that begins with ``start`` (in a sample or a sh block)."""
    for line in WALK.splitlines():
        for prompt in ("", *PROMPTS):
            if line.startswith(prompt + start):
                return line[len(prompt) :]
    raise AssertionError(f"the walk-through no longer says `{start}...`")


def after(phrase: str) -> list[str]:
    """The first sample block after ``phrase`` in the walk-through's text."""
    found = re.search(r"```text\n(.*?)```", WALK[WALK.index(phrase) :], re.DOTALL)
    assert found is not None, phrase
    return found.group(1).splitlines()


def drained_now(walk: Walk) -> None:
    """Until a pass has shown alpha drained: no host free, now or later (busy CI: `status` ran
    before the pass after the drain and showed alpha's hosts free)."""
    deadline = time.monotonic() + FAILSAFE
    url = f"unix://{walk.paths['/run/coorm-bridge/bridge.sock']}"
    with BridgeClient(url, timeout=10) as client:
        while True:
            (alpha,) = [cap for cap in client.availability() if cap.cluster == "alpha"]
            if [hosts for _, hosts in alpha.steps] == [0]:
                return
            assert time.monotonic() < deadline, alpha
            time.sleep(0.1)


def test_the_admin_walkthrough_runs_as_the_readme_shows(make_daemon, folder: Path) -> None:
    walk = Walk(folder)
    # Step 1, in the test's folder: the shipped file and platform, the folders they name.
    text = (ETC / "coorm-bridge.toml").read_text()
    shutil.copy(ETC / "mock-platform.toml", folder)
    daemon = make_daemon(walk.local(text))
    assert daemon.config == folder / "coorm-bridge.toml"

    # 2. The check, then the daemon.
    check = command("runuser -u coorm-bridge -- coorm-bridge serve --check")
    assert walk.run(check).returncode == 0
    daemon.start()

    # 3. status and sessions as the admin, a user's demo, the admin sees its sessions.
    walk.run("coorm-bridge status")
    walk.run("coorm-bridge sessions")
    assert walk.run("runuser -l alice -c 'coorm-bridge demo'").returncode == 0
    walk.run("coorm-bridge sessions")

    # 4. A limit and an admin changed by the README's own sed, checked, reloaded.
    edit = command("sed -i ")
    subprocess.run(walk.local(edit), shell=True, check=True, timeout=FAILSAFE)
    checked = subprocess.run(
        walk.argv(check), capture_output=True, text=True, check=False, timeout=FAILSAFE
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "hosts = 64," in checked.stdout
    assert daemon.process is not None
    assert command("kill -HUP ") == "kill -HUP $(cat /var/lib/coorm-bridge/bridge.lock)"
    lock = Path(walk.paths["/var/lib/coorm-bridge/bridge.lock"])
    os.kill(int(lock.read_text()), signal.SIGHUP)
    await_line(daemon.log, "reloaded ")
    walk.run("grep reload /var/log/coorm-bridge.log")

    # 5. Drain alpha; status shows it; a user's launch waits, its start never.
    walk.run(command("coorm-bridge drain alpha"))
    drained_now(walk)  # `status` shows the last pass: awaited, the one after the drain
    walk.run("coorm-bridge status")
    shutil.copy(readme.ROOT / "examples" / "hello" / "hello.toml", folder)
    launch = subprocess.Popen(
        walk.argv("coorm-launch hello.toml"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=folder, env=walk.env(),
    )  # fmt: skip
    try:
        assert launch.stdout is not None
        printed = []
        while not printed or "waiting; never" not in printed[-1]:
            line = launch.stdout.readline()
            assert line, "".join(printed)
            printed.append(line)
        walk.compare(walk.shown("coorm-launch hello.toml"), "".join(printed))

        # 6. The admin finds it, cancels it with a reason; the launcher says why, exit 1.
        waiting = walk.run("coorm-bridge sessions --state waiting")
        ours = waiting.stdout.splitlines()[1].split()[0]
        cancel = command("coorm-bridge cancel ")
        walk.sessions[shlex.split(cancel)[2]] = ours
        assert walk.run(cancel).returncode == 0
        rest, _ = launch.communicate(timeout=FAILSAFE)
    finally:
        launch.kill()
        launch.wait()
    assert launch.returncode == 1, rest
    walk.compare(after("ends at once, with exit status 1:"), rest)
    walk.run("coorm-bridge resume alpha")
    status = walk.call("coorm-bridge status")
    assert status.returncode == 0, status.stderr
    assert "drained" not in status.stdout

    # 7. The audit log: the drain, the cancel, the resume. Here alice is the admin herself, and
    # cancelling one's own session is no admin action: that line is not written.
    audit = "grep coorm_bridge.audit /var/log/coorm-bridge.log"
    sample = walk.shown(audit)
    assert any("cancelled session" in line for line in sample)
    own = [line for line in sample if "cancelled session" not in line]
    walk.compare(own, walk.call(audit).stdout)


def await_line(log: Path, text: str) -> None:
    deadline = time.monotonic() + FAILSAFE
    while text not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
