"""The launcher's side of selection: the current view, kept from ``change`` events, and the
selector run on it.

The bridge sends a view once in full, then only what changed (paper §III-B: a CHANGE carries a
cluster's new CAP, its new properties, or its new links): :class:`CurrentView` applies each to
what the launcher holds. :class:`Selection` runs the selector through the selectors'
memoization, so a view seen before costs nothing (the paper's computed configurations count the
views it really ran on). A request that the components cannot use is refused here,
before the bridge is asked for hosts the application would leave idle.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coorm_bridge.core.messages import CAP, ChangeEvent, ChangeKind, applied
from coorm_bridge.core.model import MAX_SEQ, ClusterInfo, Interconnect, Request
from coorm_bridge.launchers.app import AppSpec
from coorm_bridge.launchers.layout import LayoutError, layout

if TYPE_CHECKING:
    from coorm_bridge.core.profile import Profile
    from coorm_bridge.launchers.selectors.base import Selector


class SelectorError(Exception):
    """The selector cannot be loaded or built, or it answered something unusable."""


def build_selector(app: AppSpec) -> Selector:
    """The file's selector, built from its parameters. The file's ``duration`` is given to a
    selector that takes one (unless its parameters set it); a selector without one computes
    its own (a duration model), and a ``duration`` in the file would then be ignored: refused."""
    from coorm_bridge.launchers.selectors import (  # noqa: PLC0415 - only to build it
        SelectorParamsError,
        create_selector,
        load_selector,
    )

    name = app.selector.name
    try:
        params = dict(app.selector.params)
        if app.duration is not None:
            if "duration" not in load_selector(name).Params.model_fields:
                raise SelectorError(
                    f"duration: selector {name!r} computes its own duration (it has no "
                    "duration parameter): leave duration out"
                )
            params.setdefault("duration", app.duration)
        return create_selector(name, params, where="selector.params")
    except SelectorParamsError as error:
        raise SelectorError(str(error)) from error
    except (ImportError, LookupError, TypeError) as error:
        raise SelectorError(f"selector.name: {error}") from error


@dataclass
class CurrentView:
    """What the launcher knows of the clusters it subscribed to, kept up to date by events."""

    clusters: dict[str, ClusterInfo]
    interconnect: Interconnect
    caps: dict[str, CAP] = field(default_factory=dict)

    def apply(self, event: ChangeEvent) -> bool:
        """Apply a ``change`` event; whether anything a selector sees changed."""
        changed = False
        for change in event.changes:
            if change.kind is ChangeKind.AVAILABILITY and change.profile is not None:
                cap = applied(self.caps.get(change.cluster), change)
                changed |= self.caps.get(change.cluster) != cap
                self.caps[change.cluster] = cap
            elif change.kind is ChangeKind.INFO and change.info is not None:
                changed |= self.clusters.get(change.cluster) != change.info
                self.clusters[change.cluster] = change.info
            elif change.kind is ChangeKind.INTERCONNECT and change.links is not None:
                others = [
                    link for link in self.interconnect.links if change.cluster not in link.clusters
                ]
                links = Interconnect(links=(*others, *change.links))
                changed |= links != self.interconnect
                self.interconnect = links
        return changed

    def profiles(self) -> dict[str, Profile]:
        return {name: cap.profile() for name, cap in self.caps.items() if name in self.clusters}


class Selection:
    """The selector, memoized per view (the selectors' :class:`Memoized`), whose requests are
    checked against the components before they are sent."""

    def __init__(self, selector: Selector, app: AppSpec) -> None:
        from coorm_bridge.launchers.selectors.memo import Memoized  # noqa: PLC0415

        self.memo = Memoized(selector)
        self.app = app
        self.min_gain = app.selector.min_gain
        self.horizon: int | None = None
        """The horizon of the last decision (None: any change of the view may alter it): the
        selector's, when the request it leaves in force is the selector's answer."""

    @property
    def computed(self) -> int:
        """Computed configurations: the views the selector really ran on."""
        return self.memo.computed

    def select(self, view: CurrentView, now: int, current: Request | None = None) -> Request | None:
        """The request for this view (None: the selector keeps the current one); ``current``
        again when the new selection is not worth sending (:func:`worth_sending`)."""
        profiles = view.profiles()
        self.horizon = None
        try:
            choice = self.memo.choose(view.clusters, view.interconnect, profiles, now)
        except Exception as error:  # a selector's bug must end the run cleanly, withdrawn
            raise SelectorError(f"the selector failed on this view: {error!r}") from error
        request = choice.request
        if request is not None:
            check_request(self.app, request, view.clusters)
        if not worth_sending(profiles, current, request, now, self.min_gain):
            # Kept for min_gain: the decision reads the current request's end too.
            self.horizon = choice.horizon if request == current else None
            return current
        self.horizon = choice.horizon
        return request


def worth_sending(
    view: Mapping[str, Profile],
    current: Request | None,
    new: Request | None,
    now: int,
    min_gain: int,
) -> bool:
    """Whether ``new`` should replace ``current``: it differs and, with a ``min_gain``, it ends
    at least ``min_gain`` seconds earlier than ``current`` would in this ``view``.

    Both are placed as the bridge places them, at their earliest common start from ``now``.
    When either never fits the view (a cluster gone, fewer hosts than asked) the threshold
    does not apply: the current request cannot be kept, or the selector knows better.
    """
    if new is None or new == current:
        return False
    if min_gain <= 0 or current is None:
        return True
    from coorm_bridge.core.profile import earliest_start  # noqa: PLC0415 - launchers skip numpy

    old_start = earliest_start(view, current.nodes, current.duration, now)
    new_start = earliest_start(view, new.nodes, new.duration, now)
    if old_start is None or new_start is None:
        return True
    return new_start + new.duration <= old_start + current.duration - min_gain


def check_request(app: AppSpec, request: Request, clusters: Mapping[str, Any]) -> None:
    """SelectorError when the bridge should not be asked for ``request``: clusters the
    session does not see, or hosts the components cannot use."""
    unknown = sorted(set(request.nodes) - set(clusters))
    if unknown:
        raise SelectorError(f"the selector asked for clusters not in the view: {unknown}")
    try:
        layout(app.components, request.nodes)
    except LayoutError as error:
        raise SelectorError(
            f"the selector's request does not fit the components: {error}"
        ) from error


class Horizons:
    """The horizon of the launcher's decision on the view after each event it handled, from
    the main thread (which decides) to the event thread (which polls with it, ``?horizon=``).

    The event thread waits a moment for the main thread to handle what it just got before it
    polls again: a poll sent before the decision would carry no horizon, and the bridge would
    send every change until the next poll."""

    def __init__(self, patience: float = 2.0) -> None:
        self.patience = patience
        self._changed = threading.Condition()
        self._handled = 0
        self._horizon: int | None = None

    def decided(self, seq: int, horizon: int | None) -> None:
        """The main thread handled event ``seq``; its decision's horizon."""
        with self._changed:
            self._handled, self._horizon = seq, horizon
            self._changed.notify_all()

    def stop(self) -> None:
        """No more decisions (the application started): polls go without waiting."""
        self.decided(MAX_SEQ, None)

    def for_poll(self, after: int) -> int | None:
        """The horizon to poll with after event ``after``: None when the main thread has not
        decided on that view yet."""
        with self._changed:
            self._changed.wait_for(lambda: self._handled >= after, timeout=self.patience)
            return self._horizon if self._handled == after else None
