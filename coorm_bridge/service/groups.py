"""Which Unix groups a user is in, for ``[limits.group.NAME]``: read once in a while, never on
a request's path for long.

The system's user and group databases may be remote (LDAP, sssd) and slow to answer. A lookup
runs in a worker thread. Answers are kept ``ttl`` seconds, then read again in the background
while the old answer still serves, so a change of membership takes effect within about that
time and no request waits for it. Only a user never seen before waits, at most ``wait`` seconds;
past that the defaults apply to them until the answer comes.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as LookupTimeout

log = logging.getLogger(__name__)

#: Seconds a membership is kept before it is read again.
TTL = 300.0
#: Seconds a caller waits for a lookup under way before going on without it.
WAIT = 0.5


def unix_groups(user: str) -> tuple[str, ...]:
    """The user's primary and supplementary groups, by name; none for a user the system does
    not know (the defaults then apply)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return ()
    names = []
    for gid in os.getgrouplist(user, entry.pw_gid):
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue  # a gid without a name: no table can name it
    return tuple(dict.fromkeys(names))


class Groups:
    """Cached group membership; ``lookup`` reads one user's groups (tests give their own)."""

    def __init__(
        self,
        lookup: Callable[[str], tuple[str, ...]] = unix_groups,
        ttl: float = TTL,
        wait: float = WAIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = lookup
        self._ttl = ttl
        self._wait = wait
        self._clock = clock
        self._known: dict[str, tuple[float, tuple[str, ...]]] = {}
        self._pending: dict[str, Future[tuple[str, ...]]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="groups")

    def of(self, user: str) -> tuple[str, ...]:
        """The user's groups. A stale answer is returned at once and read again meanwhile;
        with none yet, the lookup is waited for at most ``wait`` seconds."""
        with self._lock:
            known = self._known.get(user)
            if known is not None and self._clock() - known[0] < self._ttl:
                return known[1]
            future = self._pending.get(user)
            if future is None:
                future = self._pending[user] = self._pool.submit(self._read, user)
        if known is not None:
            return known[1]
        try:
            return future.result(timeout=self._wait)
        except LookupTimeout:
            log.warning("the groups of %s take long to read: the limits go on without them", user)
            return ()

    def _read(self, user: str) -> tuple[str, ...]:
        try:
            found = self._lookup(user)
        except Exception:  # the system's databases failing must not fail a request
            log.exception("cannot read the groups of %s", user)
            found = ()
        with self._lock:
            self._known[user] = (self._clock(), found)
            self._pending.pop(user, None)
        return found

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
