"""What the HTTP API would carry for each message of a simulated run, in bytes.

The paper measured message sizes "by encoding COORM messages similarly to CORBA's CDR"; ours are
the daemon's own JSON bodies, built with the same wire models (:mod:`coorm_bridge.protocol`,
:mod:`coorm_bridge.core.messages`) and encoded as the server encodes them. Counted: request and
answer bodies of subscribing (with the interconnect), each request, ``done``, and every event
page a long poll returns (a view change, the start). Not counted: HTTP headers (a few hundred
bytes per exchange with any protocol) and empty long-poll answers, which a launcher waiting
``wait`` seconds at a time sends only when nothing happens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coorm_bridge.core.messages import Allocation, Change, ChangeEvent, StartEvent
from coorm_bridge.core.model import ClusterInfo, Filter, Interconnect, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.placement.coallocation import placeholder_name
from coorm_bridge.protocol import EventPage, RequestAnswer, StateAnswer, SubscribeBody, Subscribed

#: How the daemon's placeholders begin: its default prefix and a 6-character instance id.
PREFIX = "coorm-abcdef-"


@dataclass
class Wire:
    """Counts the messages of one run and their bytes, both ways."""

    clusters: tuple[ClusterInfo, ...]
    interconnect: Interconnect
    host_names: Mapping[str, list[str]]
    messages: int = 0
    bytes: int = 0
    change_events: int = 0
    """Change events sent (each answers one long poll): view changes and new estimates alone."""
    change_bytes: int = 0
    """The bytes of those change events' pages."""

    def _add(self, *bodies: str) -> int:
        size = sum(len(body.encode()) for body in bodies)
        self.messages += 1
        self.bytes += size
        return size

    def subscribe(self, session: str, name: str) -> None:
        """``POST /v1/sessions`` and its answer, then ``GET /v1/interconnect``."""
        self._add(
            SubscribeBody(filter=Filter(), name=name).model_dump_json(),
            Subscribed(session=session, clusters=self.clusters).model_dump_json(),
        )
        self._add(self.interconnect.model_dump_json())

    def change(
        self, seq: int, now: int, changes: list[Change], estimated_start: int | None
    ) -> None:
        """A long poll answered with one change event carrying these changes."""
        event = ChangeEvent(seq=seq, time=now, changes=changes, estimated_start=estimated_start)
        self.change_events += 1
        self.change_bytes += self._add(EventPage(events=[event]).model_dump_json())

    def request(self, session: str, request: Request, estimated_start: int | None) -> None:
        """``PUT .../request`` and its answer."""
        answer = RequestAnswer(
            session=session, state=AppState.REQUEST_SENT, estimated_start=estimated_start
        )
        self._add(request.model_dump_json(), answer.model_dump_json())

    def start(self, seq: int, now: int, session: str, request: Request) -> None:
        """The long poll answered with the start: each cluster's hosts and placeholder."""
        allocations = {
            cluster: Allocation(
                hosts=self.host_names[cluster][:hosts],
                reservation=placeholder_name(PREFIX, session, cluster),
            )
            for cluster, hosts in request.nodes.items()
        }
        event = StartEvent(seq=seq, time=now, end=now + request.duration, allocations=allocations)
        self._add(EventPage(events=[event]).model_dump_json())

    def done(self, session: str) -> None:
        """``POST .../done`` (no body) and its answer."""
        self._add(StateAnswer(session=session, state=AppState.FINISH_SENT).model_dump_json())
