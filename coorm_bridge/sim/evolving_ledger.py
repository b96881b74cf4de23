"""What ``coorm-sim evolving`` counts: the parameter sweep's tasks, and hosts over time.

The sweep (PSA) is a bag of tasks of one host and ``task`` seconds each, more than it will ever
run. A :class:`Batch` is the tasks it started at one moment (one preemptible request in v2); each
task ends exactly once, completed or killed, so none is counted twice: :class:`Bag` keeps
``started == completed + killed + running``. A killed task's work is lost (it starts again from
scratch later, as a new task).

The :class:`Ledger` integrates, between events, what the AMR code's allocations hold, what the
code uses of them, and what the sweep runs, to give node-hours.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HOUR = 3600


@dataclass
class Batch:
    """Tasks the sweep started together; ``hosts`` shrinks as tasks are killed."""

    id: str
    hosts: int
    asked: int
    start: int
    end: int


@dataclass
class Bag:
    """The sweep's tasks: those running, and every ending so far."""

    task: int
    until: int
    """No task starts that would end after this (the sweep's window)."""
    running: list[Batch] = field(default_factory=list)
    started: int = 0
    completed: int = 0
    killed: int = 0
    lost_s: int = 0
    """Host-seconds of killed tasks' work."""
    _count: int = 0

    @property
    def hosts(self) -> int:
        return sum(batch.hosts for batch in self.running)

    def can_start(self, now: int) -> bool:
        return now + self.task <= self.until

    def next_id(self) -> str:
        """The id the next batch will have (its preemptible request's, in v2)."""
        return f"t{self._count + 1}"

    def start(self, now: int, hosts: int) -> Batch | None:
        """Start ``hosts`` tasks now (None: none, or too late in the window)."""
        if hosts <= 0 or not self.can_start(now):
            return None
        batch = Batch(self.next_id(), hosts, hosts, now, now + self.task)
        self._count += 1
        self.running.append(batch)
        self.started += hosts
        return batch

    def complete(self, now: int) -> None:
        """Batches whose tasks are done by ``now`` end, completed."""
        keep = []
        for batch in self.running:
            if batch.end <= now:
                self.completed += batch.hosts
            else:
                keep.append(batch)
        self.running = keep

    def kill(self, now: int, hosts: int, batch_id: str | None = None) -> int:
        """Kill ``hosts`` tasks, those of ``batch_id`` or else the latest started (they lose
        the least work); returns how many were killed."""
        order = [b for b in reversed(self.running) if batch_id is None or b.id == batch_id]
        done = 0
        for batch in order:
            take = min(hosts - done, batch.hosts)
            if take <= 0:
                break
            batch.hosts -= take
            done += take
            self.killed += take
            self.lost_s += take * (now - batch.start)
        self.running = [b for b in self.running if b.hosts > 0]
        return done

    def next_end(self) -> int | None:
        return min((batch.end for batch in self.running), default=None)


@dataclass(frozen=True)
class State:
    """What holds from one event to the next (host counts)."""

    held: int = 0
    """Hosts the AMR code's allocations hold (placeholders started)."""
    used: int = 0
    """Hosts the AMR code uses (computing or restarting) out of ``held``."""
    sweep: int = 0
    """Hosts the sweep runs tasks on."""
    lent: int = 0
    """Hosts the sweep runs on out of those the AMR code holds and does not use (v2's
    pre-allocation lends them; counted after every idle host outside, as the daemon hands
    them out)."""


@dataclass
class Ledger:
    """Host-seconds of each :class:`State` field, integrated over time."""

    now: int
    state: State = State()
    held_s: int = 0
    used_s: int = 0
    sweep_s: int = 0
    lent_s: int = 0

    def record(self, now: int, state: State) -> None:
        """``state`` holds from ``now`` on (the one before held until ``now``)."""
        span = now - self.now
        if span < 0:
            raise ValueError(f"the ledger cannot go back from {self.now} to {now}")
        if not 0 <= state.lent <= state.held - state.used:
            raise ValueError(f"the sweep cannot borrow {state.lent} hosts in {state}")
        old = self.state
        self.held_s += span * old.held
        self.used_s += span * old.used
        self.sweep_s += span * old.sweep
        self.lent_s += span * old.lent
        self.now, self.state = now, state

    @property
    def unused_s(self) -> int:
        """Held by the AMR code and not used by it."""
        return self.held_s - self.used_s

    @property
    def idle_held_s(self) -> int:
        """Held by the AMR code and used by nobody."""
        return self.unused_s - self.lent_s
