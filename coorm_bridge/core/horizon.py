"""Whether a change of a session's view can alter its launcher's choice (the quiet protocol).

One rule for the daemon (``service/telling.py``) and the simulator (``sim/engine.py``), so that
what the simulator measures is what the bridge does: a change is left unsent when every difference
from the view last sent lies at or after the horizon the launcher gave for its choice on that
view, and the choice has not reached its start there (a selector's horizon holds until then).
"""

from __future__ import annotations

from collections.abc import Mapping

from coorm_bridge.core.messages import first_difference
from coorm_bridge.core.model import Request
from coorm_bridge.core.profile import Profile, earliest_start


def unheeded(  # noqa: PLR0917 - what was sent, when, what is new, and the launcher's word
    sent: Mapping[str, Profile],
    sent_at: int,
    view: Mapping[str, Profile],
    request: Request | None,
    horizon: int | None,
    now: int,
) -> bool:
    """True when no change of ``view`` since ``sent`` (sent at ``sent_at``) can alter the choice
    ``request`` whose horizon is ``horizon``: the launcher chose after ``sent_at``, so its choice
    starts no later than it would from then."""
    if horizon is None or request is None or sent.keys() != view.keys():
        return False
    start = earliest_start(sent, request.nodes, request.duration, sent_at)
    if start is None or start < now:
        return False
    for cluster, profile in view.items():
        since = first_difference(sent[cluster].steps(now), profile.steps(now))
        if since is not None and since < horizon:
            return False
    return True
