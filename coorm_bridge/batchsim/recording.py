"""A site's journal in use: each call recorded as it is carried out, a saved history replayed.

Apart from :mod:`.journal` (the file: its format, its lock, its transactions) because this is the
site's side of it: what is recorded with a call (its answer as text, and where the wall clock
stood), and how a saved history is rebuilt: every call applied again at its simulated time onto
a new :class:`.Simulation` of the same platform, each answer checked against the saved one, so
that a simulator that no longer gives the same history back is an error that says so, never a
silently different site. The same history also gives the wall clock a restarted site resumes on
(:func:`resumed_clock`).
"""

from __future__ import annotations

import json
import logging
import time

from pydantic import BaseModel

from coorm_bridge.batchsim.calls import Call
from coorm_bridge.batchsim.clock import Clock, WallClock
from coorm_bridge.batchsim.journal import Anchor, Journal
from coorm_bridge.batchsim.platform import PlatformSpec
from coorm_bridge.batchsim.simulation import Simulation
from coorm_bridge.core.batch import AdapterError, Unavailable

logger = logging.getLogger(__name__)


class CallRecorder:
    """Records a site's calls into ``journal`` and rebuilds the site it saved.

    Once a write fails, or the journal is closed, :attr:`broken` says why: the site is then out
    of step with its saved state, and must refuse every call until it is rebuilt from the
    journal (:meth:`writable` says when a failed write, a full disk, may be over).
    """

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.broken: str | None = None
        self.closed = False

    def writable(self) -> bool:
        """Whether the journal takes a write again after one failed (space freed on a full
        disk): then the site can be rebuilt from it (never once closed)."""
        if self.closed:
            return False
        try:
            self.journal.probe()
        except AdapterError:
            return False
        return True

    def open(self, spec: PlatformSpec, now: int) -> Simulation:
        """The simulation the journal saved, replayed up to ``now``; a new journal is given the
        platform's identity and ``now`` as its start. AdapterError when it is another
        platform's, when ``now`` is before the saved start or a saved call, or when a call
        replays differently."""
        journal = self.journal
        saved = journal.origin is not None
        start = journal.claim(spec.identity(), now)
        if start > now:
            raise AdapterError(f"the clock ({now}) is before the platform's start ({start})")
        simulation = Simulation(spec, start)
        if saved:
            self._replay(simulation, now)
        return simulation

    def record(self, now: int, call: Call, result: object, clock: Clock) -> None:
        """Journal a call that changed the site, and where a wall clock stands, durably;
        Unavailable (and :attr:`broken`) when that fails."""
        anchor = None
        if isinstance(clock, WallClock):
            sim, wall = clock.reading()
            anchor = Anchor(time=sim, wall=wall, speedup=clock.speedup)
        try:
            self.journal.append(now, call, outcome(result), anchor)
        except AdapterError as error:
            self.broken = str(error)
            raise Unavailable(f"the simulated platform cannot save its state: {error}") from error

    def close(self) -> None:
        """Close the journal (its lock is released; the site is kept in it)."""
        self.journal.close()
        self.broken = "the simulated platform is closed"
        self.closed = True

    def _replay(self, simulation: Simulation, now: int) -> None:
        """Re-apply every journaled call at its time; each must answer as it did then."""
        journal = self.journal
        began = time.perf_counter()
        replayed = 0
        for entry in journal.entries():
            where = f"{journal.path}: call {entry.seq} ({entry.call.op} at {entry.at})"
            if entry.at > now:
                raise AdapterError(f"{where} is after the clock ({now}): time went back")
            simulation.advance(entry.at)
            try:
                answer = outcome(simulation.apply(entry.call, entry.at))
            except (AdapterError, ValueError, KeyError) as error:
                answer = f"error: {error}"
            if answer != entry.outcome:
                raise AdapterError(
                    f"{where} replays as {answer}, not {entry.outcome}: this simulator "
                    "does not give the saved history back; move the file away to start "
                    "the platform afresh"
                )
            replayed += 1
        simulation.advance(now)
        logger.info(
            "mock platform resumed from %s: started at %d, %d calls replayed up to %d in %.2f s",
            journal.path,
            simulation.start,
            replayed,
            now,
            time.perf_counter() - began,
        )


def outcome(result: object) -> str:
    """What a call answered, as journaled text: replaying it must answer the same."""
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    return json.dumps(result)


def resumed_clock(journal: Journal, spec: PlatformSpec, speedup: float) -> WallClock:
    """The wall clock, at ``speedup``, of the site saved in ``journal`` (which must be of
    ``spec``: AdapterError, before anything is written, if not): where its time would be had it
    kept running, never before a time it recorded; a new journal starts at the platform file's
    ``start``, else now. The anchor is recorded before the clock is used."""
    journal.check(spec.identity())
    wall = time.time()
    resumed = journal.resume_time(wall)
    now = resumed if resumed is not None else spec.start if spec.start is not None else wall
    clock = WallClock(speedup=speedup, origin=int(now))
    journal.set_anchor(Anchor(time=int(now), wall=wall, speedup=speedup))
    return clock
