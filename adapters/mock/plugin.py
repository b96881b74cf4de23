"""``[adapter]`` with ``kind = "mock"``: the simulated platform, on the wall clock, kept in the
daemon's state folder so that it outlives the daemon as a real batch system would.

At start the platform is rebuilt from its journal (:class:`coorm_bridge.batchsim.Journal`): its
jobs and reservations are back, and its time is where it would be had it kept running while the
daemon was down (the downtime at the speed-up that was in force then), never earlier than a time
it recorded (:func:`coorm_bridge.batchsim.resumed_clock`). A
platform file with a fixed ``start`` sets the time of the very first start only. A changed
platform file (or trace) is refused with a message saying how to start afresh.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.adapters.registry import AdapterContext, AdapterPlugin, AdapterSettings
from coorm_bridge.batchsim import (
    FILE_NAME,
    SPEEDUP_LIMIT,
    Journal,
    PlatformSpec,
    load_platform,
    resumed_clock,
)


class MockSettings(AdapterSettings):
    """The platform file and how fast its time runs."""

    kind: Literal["mock"] = "mock"
    platform: Path | None = None
    """Platform file; None: the packaged default (three clusters)."""
    speedup: Annotated[float, Field(gt=0, allow_inf_nan=False), SPEEDUP_LIMIT] = 1.0
    """Simulated seconds per real second (see limits.MAX_SPEEDUP for the bound)."""
    run_jobs: bool | None = None
    """Whether the bridge's front end runs the jobs launchers submit, as processes of the
    daemon's account on this host: unset, only its own user's, and as root only when the
    daemon is private (no configured socket, no TCP); true, everyone's, even as root; false,
    none (see :mod:`.frontend`)."""

    def clock_problems(self) -> list[str]:
        """A speed-up other than 1 runs the platform's time away from the host's."""
        if self.speedup == 1:
            return []
        times = f"{self.speedup:g}"
        return [f"speedup: {times} runs the platform's time {times} times as fast as the host's"]


log = logging.getLogger(__name__)

#: The front end's job folders, in the state folder.
JOBS_FOLDER = "jobs"


def create(settings: MockSettings, context: AdapterContext) -> MockAdapter:
    """The platform saved in the state folder, resumed now (a new one when there is none),
    with its front end's jobs beside it."""
    spec = load_platform(settings.platform)
    state = context.state_dir
    adapter = resume(
        spec,
        state / FILE_NAME,
        settings.speedup,
        jobs=state / JOBS_FOLDER,
        run_jobs=settings.run_jobs,
        private=context.private,
    )
    if settings.run_jobs is None and not context.private and os.geteuid() == 0:
        log.warning(
            "this daemon runs as root and other users can reach it: its mock platform runs "
            "no launchers' jobs (they would run as root) unless [adapter] run_jobs = true"
        )
    return adapter


def resume(
    spec: PlatformSpec,
    path: Path,
    speedup: float,
    *,
    jobs: Path | None = None,
    run_jobs: bool | None = None,
    private: bool = False,
) -> MockAdapter:
    """The platform ``spec`` saved in the journal at ``path``, on a wall clock at ``speedup``
    that goes on from the saved time (with a front end whose job folders are in ``jobs``, if
    given); raises AdapterError if the journal is of another platform, in use by another
    process, or unreadable."""
    journal = Journal(path)
    try:
        clock = resumed_clock(journal, spec, speedup)
        return MockAdapter(
            spec, clock, journal=journal, jobs=jobs, run_jobs=run_jobs, private=private
        )
    except BaseException:
        journal.close()
        raise


PLUGIN = AdapterPlugin(kind="mock", settings=MockSettings, create=create)
