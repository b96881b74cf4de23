"""The selector interface: what ``coorm-launch`` calls on every new view, and what it builds from.

A selector is the application-specific part of CooRM (paper §III-A): it sees the clusters the
application subscribed to, their links and the current view, and answers the request to send.
It is a *pure function* of ``(clusters, interconnect, view, now)``: same inputs, same request,
nothing mutated, no state kept between calls. That is what lets the launcher memoize it per view
(:class:`~coorm_bridge.launchers.selectors.memo.Memoized`), the paper's "computed configurations".

Returning ``None`` means "this view offers nothing I can use": no cluster the selector may use is
in the view, or none of them ever has enough hosts. The launcher then sends no new request (it
keeps the current one, if any) and waits for the next change. A selector that merely finds the
best request unchanged returns it again; the launcher skips re-sending an equal request.

A selector class may also set ``time_invariant = True``: shifting ``now`` and every profile of
the view by the same amount never changes its answer. The memo then recognises a view that only
slid in time (see :mod:`~coorm_bridge.launchers.selectors.memo`).

A selector may also say which changes of the view can matter to it, with a method
``horizon(clusters, interconnect, view, now, request) -> int | None``: the time from which on no
change of ``view`` can alter the answer ``request`` it gave on it, at any moment from ``now``
until ``request`` would start (None, or no such method: any change may). The launcher tells the
bridge, which then does not send changes that lie wholly past it (the quiet protocol, README
"HTTP API"). It must be exact: a selector answers the same on every view that agrees with
``view`` before the horizon. The built-ins: ``rigid`` reads nothing of the view (the horizon is
``now``); ``moldable``, an exact search for the earliest end, reads nothing past the end of its
answer; ``cem``'s heuristic search depends on the whole view and on ``now``, so it says nothing.

A selector class is built from one validated ``Params`` model (pydantic v2, frozen, unknown keys
refused, every number bounded like the rest of the project): the application file's
``[selector]`` table is validated against it, with errors naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from coorm_bridge.core.model import (
    MAX_COUNT,
    MAX_DURATION,
    ClusterInfo,
    Interconnect,
    Name,
    Request,
)

if TYPE_CHECKING:
    from coorm_bridge.core.profile import Profile


class Selector(Protocol):
    """What the launcher calls on every new view; see the module docstring."""

    def select(
        self,
        clusters: Mapping[str, ClusterInfo],
        interconnect: Interconnect,
        view: Mapping[str, Profile],
        now: int,
    ) -> Request | None:
        """The request to send for this view (None: nothing fits, keep the current request)."""
        ...


def horizon_of(  # noqa: PLR0917 - the selector's own arguments, in its order
    selector: object,
    clusters: Mapping[str, ClusterInfo],
    interconnect: Interconnect,
    view: Mapping[str, Profile],
    now: int,
    request: Request | None,
) -> int | None:
    """The selector's horizon for its answer ``request`` on this view (see the module
    docstring); None when it has no ``horizon`` method or gave no answer."""
    method = getattr(selector, "horizon", None)
    if method is None or request is None:
        return None
    found = method(clusters, interconnect, view, now, request)
    return None if found is None else max(int(found), now)


class SelectorClass(Protocol):
    """A selector class: its ``Params`` model, and a constructor taking one validated instance."""

    @property
    def Params(self) -> type[BaseModel]:  # noqa: N802 - the class attribute it stands for
        """The parameter model (a read-only member: each class narrows it to its own)."""
        ...

    def __call__(self, params: Any) -> Selector: ...


class Params(BaseModel):
    """Base of the selectors' parameter models: immutable, and a mistyped key is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")


#: A whole host count a selector may ask for on one cluster or in total.
Hosts = Annotated[int, Field(gt=0, le=MAX_COUNT, strict=True)]
#: Requested walltime = the model's run time x margin, rounded up (1: the estimate as is).
Margin = Annotated[float, Field(ge=1.0, le=10.0, allow_inf_nan=False)]
#: Sequential work in seconds on a speed-1 host: at most a decade on every host of the largest
#: cluster, so that no run time a selector computes exceeds what a request may carry by much.
MAX_WORK = float(MAX_DURATION) * MAX_COUNT
Work = Annotated[float, Field(gt=0, le=MAX_WORK, allow_inf_nan=False)]


def _distinct(names: tuple[str, ...]) -> tuple[str, ...]:
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"clusters are named once each; {', '.join(twice)} repeat")
    return names


#: Clusters a selector may use (absent: every cluster of the view it knows).
Clusters = Annotated[tuple[Name, ...], Field(min_length=1), AfterValidator(_distinct)]
