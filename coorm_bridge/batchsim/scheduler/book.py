"""The cluster's advance reservations: which hosts each holds over which window, and for whom.

Only the records: :mod:`.reservations` changes them (with what each change does to the plan and
the jobs), :mod:`.admission` decides which hosts a request gets, and the planners read them to
plan jobs inside a reservation.
"""

from __future__ import annotations

from collections.abc import ValuesView

from coorm_bridge.core.batch import ReservationSpec


class ReservationEntry:
    """One reservation: its window, its hosts (a mask), its users."""

    __slots__ = ("end", "mask", "name", "start", "users", "version")

    def __init__(self, spec: ReservationSpec, mask: int) -> None:
        self.name = spec.name
        self.start = spec.start
        self.end = spec.end
        self.mask = mask
        self.users = spec.users
        self.version = 0  # bumped on update: events of older versions are stale


class ReservationBook:
    """The current reservations by name."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, ReservationEntry] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> ReservationEntry:
        return self._entries[name]

    def get(self, name: str) -> ReservationEntry | None:
        return self._entries.get(name)

    def values(self) -> ValuesView[ReservationEntry]:
        return self._entries.values()

    def add(self, spec: ReservationSpec, mask: int) -> ReservationEntry:
        entry = ReservationEntry(spec, mask)
        self._entries[spec.name] = entry
        return entry

    def change(self, entry: ReservationEntry, spec: ReservationSpec, mask: int) -> None:
        """``entry`` becomes ``spec`` on ``mask``: a new version, whose events alone count."""
        entry.start, entry.end, entry.mask = spec.start, spec.end, mask
        entry.users = spec.users
        entry.version += 1

    def remove(self, name: str) -> None:
        del self._entries[name]

    def is_due(self, name: str, version: int, time: int, *, end: bool) -> bool:
        """Whether ``name``'s start (or ``end``) of ``version`` is still at ``time``. The time
        too: a reservation deleted and created again under its name starts its versions afresh,
        and its namesake's events must not end it."""
        entry = self._entries.get(name)
        if entry is None:
            return False
        return entry.version == version and (entry.end if end else entry.start) == time

    def overlapping(self, start: int, end: int, ignore: str | None) -> int:
        """Hosts of the reservations (but ``ignore``) that overlap ``[start, end)``."""
        mask = 0
        for entry in self._entries.values():
            if entry.name != ignore and entry.start < end and start < entry.end:
                mask |= entry.mask
        return mask

    def in_time_order(self) -> list[ReservationEntry]:
        """By start, then name: as a snapshot lists them."""
        return sorted(self._entries.values(), key=lambda entry: (entry.start, entry.name))
