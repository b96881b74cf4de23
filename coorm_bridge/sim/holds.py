"""The reservation calls the daemon would make for a simulated run's placeholders.

On a real site each placeholder move is a call to Slurm's or OAR's controller, so a request
cascade is also load on the site. After each pass the ledger works out what the daemon's
enactor holds (``service/passes.py``, ``PassRunner._intend``, with the default placement: the
first waiting application wherever it starts, the others within the placement horizon) and counts
the calls that get there from what it held before, one reservation per cluster:

- **create**: a session held nowhere gets placeholders (a start not held before is one too:
  the allocation is the placeholder);
- **update**: a held one moves (its start or its host count changes); a finished application's
  is shrunk to its ghost;
- **delete**: it is no longer held (its start left the horizon, it is not first any more, its
  ghost ended), or its request moved to other clusters (then created there).

A placeholder whose start and hosts did not change is not touched, as in the daemon.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from coorm_bridge.core.model import Request
from coorm_bridge.core.policy import Application, Plan
from coorm_bridge.core.states import AppState

#: The daemon's defaults (``[placement]``).
HORIZON = 300
HOLD_FIRST = 1


@dataclass
class Holds:
    """What is held per session (cluster -> (start, end, hosts)), and the calls counted."""

    horizon: int = HORIZON
    hold_first: int = HOLD_FIRST
    calls: Counter[str] = field(default_factory=Counter)
    per_session: Counter[str] = field(default_factory=Counter)
    _held: dict[str, dict[str, tuple[int, int, int]]] = field(default_factory=dict)

    def after_pass(self, plan: Plan, table: dict[str, Application], now: int) -> None:
        """Count the calls that bring what is held to what this pass wants."""
        wanted: dict[str, dict[str, tuple[int, int, int]]] = {}
        first = self.hold_first
        for app_id, outcome in plan.outcomes.items():
            app = table.get(app_id)
            if app is None or app.request is None:
                continue
            if outcome.state is AppState.STARTED:
                start = app.started_at if app.started_at is not None else now
                wanted[app_id] = _spans(app.request, start, start + app.request.duration)
            elif outcome.state is AppState.GHOST and outcome.hold_until is not None:
                start = app.started_at if app.started_at is not None else now
                wanted[app_id] = _spans(app.request, start, outcome.hold_until)
            elif outcome.state is AppState.WAITING and outcome.estimated_start is not None:
                start = outcome.estimated_start
                top = first > 0
                if top:
                    first -= 1
                if start <= now + self.horizon or top:
                    wanted[app_id] = _spans(app.request, start, start + app.request.duration)
        for app_id in self._held.keys() | wanted.keys():
            self._move(app_id, self._held.get(app_id, {}), wanted.get(app_id, {}))
        self._held = wanted

    def _move(
        self,
        app_id: str,
        old: dict[str, tuple[int, int, int]],
        new: dict[str, tuple[int, int, int]],
    ) -> None:
        if old.keys() != new.keys():
            self._count(app_id, "delete", len(old))
            self._count(app_id, "create", len(new))
            return
        self._count(app_id, "update", sum(old[c] != span for c, span in new.items()))

    def _count(self, app_id: str, call: str, times: int) -> None:
        if not times:
            return
        self.calls[call] += times
        self.per_session[app_id] += times


def _spans(request: Request, start: int, end: int) -> dict[str, tuple[int, int, int]]:
    return {cluster: (start, end, hosts) for cluster, hosts in request.nodes.items()}
