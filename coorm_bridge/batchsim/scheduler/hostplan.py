"""Per-host time slots for the mock scheduler: which hosts are held when, as bit masks.

The scheduler plans every job on named hosts, not on a host count, so that a predicted start is
one that host assignment honours: reservations hold specific hosts and fragment the cluster, and a
count-based profile would promise starts that no set of hosts can give. Host sets are Python ints
used as bit masks (bit ``i`` is host ``i``): a union or an intersection over a 128-host cluster
is a few words of C work, and ``int.bit_count`` counts hosts. :class:`HostPlan` keeps and searches
the slots; :class:`.compression.Compression` finds the few jobs that freed capacity can move
earlier.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

#: Stand-in for "no limit" in searches (far beyond any Unix time).
FOREVER = 2**62

#: Above this many bits, host masks are decoded with numpy rather than bit by bit.
_WIDE = 1024

#: Capacity a plan just gave back: hosts, the window they were freed over, and bounds on the free
#: runs of those hosts around it (see :meth:`HostPlan.free_run`).
Region = tuple[int, int, int, int, int]


def lowest_bits(mask: int, count: int) -> int:
    """The ``count`` lowest set bits of ``mask`` (all of them when it has fewer).

    Lowest host index first keeps the choice deterministic; bisecting on a prefix length costs a
    few operations on the mask whatever ``count`` is, which matters on 100,000-host clusters.
    """
    if count <= 0:
        return 0
    if mask.bit_count() <= count:
        return mask
    low, high = count, mask.bit_length()
    while low < high:
        middle = (low + high) // 2
        if (mask & ((1 << middle) - 1)).bit_count() >= count:
            high = middle
        else:
            low = middle + 1
    return mask & ((1 << low) - 1)


def bit_indices(mask: int) -> list[int]:
    """Indexes of the set bits of ``mask``, increasing."""
    if mask.bit_length() > _WIDE:
        raw = np.frombuffer(mask.to_bytes((mask.bit_length() + 7) // 8, "little"), np.uint8)
        found: list[int] = np.flatnonzero(np.unpackbits(raw, bitorder="little")).tolist()
        return found
    indices = []
    while mask:
        low = mask & -mask
        indices.append(low.bit_length() - 1)
        mask ^= low
    return indices


class HostPlan:
    """Slots of time with, for each, the hosts held by jobs and by reservations.

    Slot ``k`` covers ``[times[k], times[k+1])`` (the last one lasts forever). For each slot the
    plan keeps masks of hosts held by jobs (running ones until their walltime bound, planned ones
    over their planned window), held by reservations, their union, the union's hosts that were
    not held in the slot before (so that the union over a window is the first slot's union plus
    the additions after it, which are mostly zero), and how many up hosts are free for a job
    outside every reservation. Holds are not checked against each other: the scheduler only adds
    a job where a search found room.
    """

    __slots__ = (
        "_added",
        "_busy",
        "_free",
        "_held",
        "_reserved",
        "_times",
        "_up",
        "_up_count",
    )

    def __init__(self, start: int, up: int) -> None:
        self._times = [start]
        self._busy = [0]
        self._reserved = [0]
        self._held = [0]
        self._added = [0]
        self._up = up
        self._up_count = up.bit_count()
        self._free = [self._up_count]

    # -- reading ----------------------------------------------------------------------------

    @property
    def up(self) -> int:
        """Hosts that may take a new job (neither down nor drained)."""
        return self._up

    def __len__(self) -> int:
        return len(self._times)

    def reserved_overlap(self, mask: int, start: int, end: int) -> bool:
        """Whether a reservation holds one of ``mask`` somewhere in ``[start, end)``."""
        times, reserved = self._times, self._reserved
        k = max(bisect_right(times, start) - 1, 0)
        while k < len(times) and times[k] < end:
            if reserved[k] & mask:
                return True
            k += 1
        return False

    def may_fit_before(self, hosts: int, after: int, before: int) -> bool:
        """Cheap necessary condition for a local job to start in ``[after, before)``: some slot
        there has ``hosts`` free hosts (checked before taking a hold out of the plan to search).
        """
        times = self._times
        first = bisect_right(times, after) - 1
        last = bisect_left(times, before)
        return last > first and max(self._free[first:last]) >= hosts

    def free_run(self, mask: int, start: int, end: int, after: int) -> tuple[int, int]:
        """Bounds on the free runs of ``mask``'s up hosts that meet ``[start, end)``: none starts
        before the first (nor before ``after``) or ends after the second (FOREVER: never ends).
        """
        times, held = self._times, self._held
        alive = mask & self._up
        size = len(times)
        k = bisect_right(times, end - 1) - 1 if end < FOREVER else size
        live = alive
        high = FOREVER
        while k < size:
            live &= ~held[k]
            if not live:
                high = times[k]
                break
            k += 1
        k = max(bisect_right(times, start) - 1, 0)
        floor = max(bisect_right(times, after) - 1, 0)
        live = alive & ~held[k]
        low = max(start, after) if not live else max(times[floor], after)
        while live and k > floor:
            k -= 1
            live &= ~held[k]
            if not live:
                low = times[k + 1]
        return low, high

    # -- changing ---------------------------------------------------------------------------

    def set_up(self, up: int) -> None:
        """Change the hosts that are up; free counts are recomputed everywhere (rare)."""
        self._up = up
        self._up_count = count = up.bit_count()
        self._free = [count - (held & up).bit_count() for held in self._held]

    def hold(self, mask: int, start: int, end: int) -> None:
        """A job takes ``mask`` over ``[start, end)``."""
        self._update(mask, start, end, reservation=False, add=True)

    def release(self, mask: int, start: int, end: int) -> None:
        """A job gives ``mask`` back over ``[start, end)`` (what it held there)."""
        self._update(mask, start, end, reservation=False, add=False)

    def reserve(self, mask: int, start: int, end: int) -> None:
        """A reservation takes ``mask`` over ``[start, end)``."""
        self._update(mask, start, end, reservation=True, add=True)

    def unreserve(self, mask: int, start: int, end: int) -> None:
        """A reservation gives ``mask`` back over ``[start, end)``."""
        self._update(mask, start, end, reservation=True, add=False)

    def prune(self, now: int) -> None:
        """Forget slots that ended before ``now`` (batched: deleting a list's head copies it)."""
        k = bisect_right(self._times, now) - 1
        if k >= 32:
            for column in self._columns():
                del column[:k]

    def _columns(self) -> tuple[list[int], ...]:
        return (self._times, self._busy, self._reserved, self._held, self._added, self._free)

    def _split(self, t: int) -> int:
        """The index of the slot that starts at ``t``, splitting the slot around it if needed."""
        times = self._times
        k = bisect_right(times, t) - 1
        if times[k] == t:
            return k
        k += 1
        times.insert(k, t)
        self._busy.insert(k, self._busy[k - 1])
        self._reserved.insert(k, self._reserved[k - 1])
        self._held.insert(k, self._held[k - 1])
        self._added.insert(k, 0)
        self._free.insert(k, self._free[k - 1])
        return k

    def _update(self, mask: int, start: int, end: int, *, reservation: bool, add: bool) -> None:
        times = self._times
        start = max(start, times[0])  # the past is forgotten
        if end <= start or not mask:
            return
        first = self._split(start)
        last = self._split(end)
        busy, reserved, held, added, free = (
            self._busy,
            self._reserved,
            self._held,
            self._added,
            self._free,
        )
        target, other = (reserved, busy) if reservation else (busy, reserved)
        up, up_count = self._up, self._up_count
        for k in range(first, last):
            value = target[k] | mask if add else target[k] & ~mask
            target[k] = value
            union = value | other[k]
            held[k] = union
            free[k] = up_count - (union & up).bit_count()
        size = len(times)
        for k in range(max(first, 1), min(last + 1, size)):
            added[k] = held[k] & ~held[k - 1]
        # Merge slots that became equal to the one before, so the plan does not keep growing.
        for k in (last, first):
            if 0 < k < len(times) and busy[k] == busy[k - 1] and reserved[k] == reserved[k - 1]:
                for column in self._columns():
                    del column[k]

    # -- searching --------------------------------------------------------------------------

    def earliest(  # noqa: PLR0912, PLR0915 - one tight loop on purpose: calls per slot cost
        self,
        hosts: int,
        duration: int,
        after: int,
        limit: int | None = None,
        *,
        own: int = 0,
        own_start: int = FOREVER,
    ) -> tuple[int, int] | None:
        """The first start in ``[after, limit)`` where ``hosts`` up hosts are held by nothing
        (job or reservation) for ``duration``, with the mask of all such hosts; None if none.

        ``own`` hosts, held from ``own_start`` (at or after ``limit``) by the job being moved,
        count as free from there: compression asks whether a job can move earlier without
        taking its hold out of the plan first.

        Candidate starts are ``after`` and the slot boundaries after it. The union of what is
        held over a sliding window is kept with two stacks (suffix unions in front, a running
        union behind), so a search costs a few operations per slot however long the windows are.
        A slot with too few free hosts ends every window across it: the search jumps past it.
        """
        spare = self._up_count - hosts  # at most this many up hosts may be held in the window
        if spare < 0:
            return None
        times, held, added, free, up = self._times, self._held, self._added, self._free, self._up
        size = len(times)
        stop = FOREVER if limit is None else limit
        own_first = bisect_left(times, own_start) if own else size
        own_count = (own & up).bit_count()
        k = bisect_right(times, after) - 1
        start = after
        j = k  # slots [k, j) are checked and cover [start, end)
        middle = base = k + 1  # additions of slots (k, middle) are in front, [middle, j) behind
        front: list[int] = []
        behind = 0
        while start < stop:
            end = start + duration
            jumped = False
            while j < size and times[j] < end:
                if (free[j] + own_count if j >= own_first else free[j]) < hosts:
                    jumped = True
                    break
                if j > k and (addition := added[j]):
                    behind |= addition & ~own if j >= own_first else addition
                j += 1
            if jumped:
                k = j + 1
                if k >= size:
                    return None
                start = times[k]
                j = k
                middle = base = k + 1
                front = []
                behind = 0
                continue
            union = held[k] | behind
            if k + 1 < middle:
                union |= front[k + 1 - base]
            if (union & up).bit_count() <= spare:
                return start, up & ~union
            k += 1
            if k >= size:
                return None
            start = times[k]
            if k >= j:
                j = k
                middle = base = k + 1
                front = []
                behind = 0
            elif k + 1 >= middle:
                front = [0] * (j - k - 1)
                acc = 0
                for i in range(j - 1, k, -1):
                    if addition := added[i]:
                        acc |= addition & ~own if i >= own_first else addition
                    front[i - k - 1] = acc
                middle, base, behind = j, k + 1, 0
        return None

    def count_fits(
        self,
        hosts: int,
        duration: int,
        after: int,
        limit: int,
        *,
        own_count: int = 0,
        own_start: int = FOREVER,
    ) -> bool:
        """Whether some start in ``[after, limit)`` has ``hosts`` free hosts by count all along
        ``duration`` (``own_count`` more from ``own_start``): necessary for :meth:`earliest`,
        and several times cheaper (one comparison per slot), so compression asks it first.
        """
        times, free = self._times, self._free
        size = len(times)
        own_first = bisect_left(times, own_start)
        k = bisect_right(times, after) - 1
        start = after
        while start < limit:
            end = start + duration
            while k < size and times[k] < end:
                count = free[k]
                if count < hosts and (k < own_first or count + own_count < hosts):
                    break
                k += 1
            else:
                return True
            k += 1  # every window across slot k fails: start after it
            if k >= size:
                return False
            start = times[k]
        return False

    def free_at(self, t: int) -> int:
        """How many up hosts no job or reservation holds at ``t``."""
        return self._free[bisect_right(self._times, t) - 1]

    def earliest_within(
        self,
        region: int,
        hosts: int,
        duration: int,
        after: int,
        *,
        cap: int,
        limit: int | None,
        reserved: bool = False,
    ) -> tuple[int, int] | None:
        """:meth:`earliest` for a job inside a reservation: only ``region`` (its up hosts),
        ignoring reservation holds, starting before ``cap`` (its end), which also cuts the window.
        With ``reserved``, reservations' holds count too: a job outside reservations on hosts it
        names (``region``; ``cap`` :data:`FOREVER`).

        A plain scan with early exits: a reservation's queue and slots are few, and so are jobs
        that name their hosts.
        """
        if region.bit_count() < hosts:
            return None
        times, busy = self._times, self._held if reserved else self._busy
        size = len(times)
        stop = cap if limit is None else min(cap, limit)
        k = bisect_right(times, after) - 1
        start = after
        while start < stop:
            end = min(start + duration, cap)
            free = region & ~busy[k]
            j = k + 1
            while j < size and times[j] < end and free.bit_count() >= hosts:
                free &= ~busy[j]
                j += 1
            if free.bit_count() >= hosts:
                return start, free
            k += 1
            if k >= size:
                return None
            start = times[k]
        return None
