"""The simulated platform's limits: every number that enters it, from a file or a call, is bounded.

The bridge keeps times as int64 (SQLite rows, numpy availability profiles, with ``2**62`` as
"forever") and prints them as dates, so the mock never reports a time it could not store or
print: Unix times stay within :data:`MAX_TIME`, durations and offsets within
:data:`MAX_DURATION`, so that a time plus a few durations stays far below ``2**62``. Sizes are
bounded because the simulator works per host and per job: a typo (``hosts = 1e9``) must be an
error that names the key, not a daemon that never starts.

:func:`at_most` gives pydantic fields these bounds with a message a site admin can act on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

#: 9999-12-31 23:59:59 UTC: the last second Python's ``datetime`` (and ``coorm-bridge status``)
#: can print; 2**62 / MAX_TIME is about 18 million, so sums of times never overflow int64.
MAX_TIME: Final = 253_402_300_799
MAX_TIME_TEXT: Final = "the end of year 9999 UTC"

#: 100 years: longer than any job, trace or outage; small enough to add to MAX_TIME.
MAX_DURATION: Final = 100 * 365 * 86_400

#: Simulated seconds per real second. The bridge runs a policy pass about every second and polls
#: every few: at 10,000 a pass already spans almost three simulated hours (views are stale before
#: launchers read them), and a platform started now would reach MAX_TIME within a year.
MAX_SPEEDUP: Final = 10_000.0

#: Hosts of one cluster: the scheduler plans with one bit per host and names every host.
MAX_HOSTS: Final = 100_000

#: Jobs of one load: each one is built, validated and queued when the platform starts.
MAX_JOBS: Final = 1_000_000

#: Any other count or size (cores, MiB, processors per host, seeds): fits int64 with room.
MAX_COUNT: Final = 2**53

N = TypeVar("N", int, float)


def at_most(limit: float, why: str) -> AfterValidator:
    """A pydantic check that a number is at most ``limit``; the message says the limit and why."""

    def check(value: N) -> N:
        if value > limit:
            shown = f"{limit:g}" if isinstance(limit, float) else str(limit)
            raise PydanticCustomError(
                "too_large",
                "must be at most {limit} ({why}), got {value}",
                {"limit": shown, "why": why, "value": value},
            )
        return value

    checker: Callable[[N], N] = check
    return AfterValidator(checker)


TIME_LIMIT: Final = at_most(MAX_TIME, MAX_TIME_TEXT)
DURATION_LIMIT: Final = at_most(MAX_DURATION, "100 years")
SPEEDUP_LIMIT: Final = at_most(MAX_SPEEDUP, "simulated seconds per real second")
