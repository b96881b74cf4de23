"""Co-allocation: placeholders on every cluster of a request at one start, or on none.

One attempt of the VIOLA negotiation loop: reserve cluster by cluster in a fixed order, verify
what each batch system actually made (Slurm 22.05 silently creates a smaller reservation than
asked when the partition is short; a start may be rounded), and at the first refusal, silence or
mismatch delete everything taken so far. The caller (the bridge's placement loop) decides what to
do next: the refusal carries each batch system's hint of when the same request could succeed, so
the policy can recompute with it instead of retrying blindly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import (
    AdapterError,
    LacksRights,
    NotPermitted,
    Refused,
    ReservationHandle,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.model import MAX_NAME, NAME_PATTERN

_DIGEST = 10


class CoAllocationFailed(Exception):
    """Nothing is held: some cluster refused, did not answer, or made something else.

    ``retry_after`` maps each cluster that gave a hint to the earliest start it suggested;
    ``unavailable`` lists the clusters that did not answer (views should be marked stale).
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: Mapping[str, int] | None = None,
        unavailable: tuple[str, ...] = (),
        leftovers: tuple[tuple[str, str], ...] = (),
        permanent: bool = False,
        lacking: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        """A batch system will never hold hosts for this owner: retrying cannot help."""
        self.lacking = dict(lacking or {})
        """Per cluster that will not let the bridge itself hold reservations, what an admin
        must do: not the session's fault, so it keeps its place and retries."""
        self.retry_after = dict(retry_after or {})
        self.unavailable = unavailable
        self.leftovers = leftovers
        """(cluster, name) of placeholders the rollback could not delete: reconcile them."""


def placeholder_name(prefix: str, session_id: str, cluster: str) -> str:
    """The reservation name of a session's placeholder on a cluster: ``prefix`` (the bridge's
    own, instance included), the session, the cluster. Valid for batch-system commands whatever
    the cluster's name: one too long to fit is cut and completed by a digest of itself, so two
    clusters never share a name."""
    head = f"{prefix}{session_id}-"
    room = MAX_NAME - len(head)
    if room < _DIGEST + 2 or not NAME_PATTERN.fullmatch(f"{head}x"):
        raise ValueError(f"placeholder name {head!r}... is not a valid batch-system name")
    if len(cluster) > room:
        digest = hashlib.sha256(cluster.encode()).hexdigest()[:_DIGEST]
        cluster = f"{cluster[: room - _DIGEST - 1]}-{digest}"
    name = f"{head}{cluster}"
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"placeholder name {name!r} is not a valid batch-system name")
    return name


@dataclass
class _Taken:
    handles: dict[str, ReservationHandle] = field(default_factory=dict)


def hold(
    adapter: Adapter,
    *,
    prefix: str,
    session_id: str,
    owner: str,
    nodes: Mapping[str, int],
    start: int,
    end: int,
    host_names: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, ReservationHandle]:
    """Reserve ``nodes[c]`` hosts on every cluster ``c`` over ``[start, end)`` for ``owner``
    (exactly ``host_names[c]`` where given: an announced update on its related request's hosts).

    Returns the handles when every cluster holds exactly what was asked; otherwise deletes what
    was taken and raises :class:`CoAllocationFailed`. Clusters are tried in name order so that
    two bridges never take partial allocations in opposite orders.
    """
    taken = _Taken()
    for cluster in sorted(nodes):
        spec = ReservationSpec(
            name=placeholder_name(prefix, session_id, cluster),
            start=start,
            end=end,
            hosts=nodes[cluster],
            host_names=(host_names or {}).get(cluster, ()),
            users=(owner,),
        )
        try:
            handle = adapter.create_reservation(cluster, spec)
        except Refused as refused:
            hints = {cluster: refused.retry_after} if refused.retry_after is not None else {}
            raise _rolled_back(adapter, taken, f"{cluster} refused: {refused}", hints) from refused
        except Unavailable as silent:
            raise _rolled_back(
                adapter, taken, f"{cluster} did not answer: {silent}", unavailable=(cluster,)
            ) from silent
        except LacksRights as lacking:
            raise _rolled_back(
                adapter,
                taken,
                f"{cluster} will not let the bridge hold reservations: {lacking.reason}",
                lacking={cluster: lacking.reason},
            ) from lacking
        except NotPermitted as never:
            # Say an owner the batch system does not know: nothing can ever be held for this
            # one, but the others' passes must go on.
            said = str(never).removeprefix(f"{cluster}: ")  # adapters name the cluster too
            raise _rolled_back(
                adapter, taken, f"{cluster} will not: {said}", permanent=True
            ) from never
        except AdapterError as error:
            raise _rolled_back(adapter, taken, f"{cluster} failed: {error}") from error
        taken.handles[cluster] = handle
        problem = spec.unmet_by(handle)
        if problem:
            raise _rolled_back(adapter, taken, f"{cluster} made {problem}")
    return taken.handles


def release(adapter: Adapter, handles: Mapping[str, ReservationHandle]) -> list[tuple[str, str]]:
    """Delete placeholders; returns those that could not be deleted now (to retry later)."""
    left: list[tuple[str, str]] = []
    for cluster, handle in sorted(handles.items()):
        try:
            adapter.delete_reservation(cluster, handle.name)
        except AdapterError:
            left.append((cluster, handle.name))
    return left


def _rolled_back(
    adapter: Adapter,
    taken: _Taken,
    message: str,
    retry_after: Mapping[str, int] | None = None,
    unavailable: tuple[str, ...] = (),
    *,
    permanent: bool = False,
    lacking: Mapping[str, str] | None = None,
) -> CoAllocationFailed:
    left = release(adapter, taken.handles)
    return CoAllocationFailed(
        f"co-allocation failed, nothing held: {message}",
        retry_after=retry_after,
        unavailable=unavailable,
        leftovers=tuple(left),
        permanent=permanent,
        lacking=lacking,
    )
