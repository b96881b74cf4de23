"""When the next pass is due: something changed since the last one, or a moment it named came.

Passes run at most once per ``policy.interval``, and only when they have work. Whatever changes
what a pass would find (a session operation, a poll that saw free hosts move, an outcome in the
batch systems, a repair, news of the clusters) calls :meth:`Due.trigger`; each pass names the
next moment it has work even if nothing changes (a start, a horizon reached, a ghost's end, a
retry). The composition root hands this one object to every part that triggers, so that none of
them needs the pass runner itself.
"""

from __future__ import annotations


class Due:
    """Whether a pass is due. A flag and a time, each set whole: any thread may trigger."""

    def __init__(self) -> None:
        self._changed = True
        self._next: int | None = None

    def trigger(self) -> None:
        """Something changed: a pass runs at the next tick."""
        self._changed = True

    def due(self, now: int) -> bool:
        return self._changed or (self._next is not None and now >= self._next)

    def taken(self) -> None:
        """A pass begins: what changed so far is in it (a trigger during it counts for the
        next)."""
        self._changed = False

    def next_at(self, moment: int | None) -> None:
        """The next moment the last pass has work at even if nothing changes (None: none)."""
        self._next = moment
