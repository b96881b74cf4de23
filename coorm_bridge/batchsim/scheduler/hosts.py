"""A cluster's hosts: their names in index order, their node states, and the faults to come.

Everything else in the scheduler names hosts by index, as bits of a mask (bit ``i`` is host
``i``, see :mod:`.hostplan`); this is where an index becomes a name again, for snapshots and
reservation handles, and where a name given by a caller becomes an index.
"""

from __future__ import annotations

from collections.abc import Sequence

from coorm_bridge.batchsim.scheduler.hostplan import bit_indices
from coorm_bridge.core.batch import Node, NodeState
from coorm_bridge.core.model import NAME_PATTERN


class Hosts:
    """The hosts of ``cluster``, all UP at first; names must be valid and distinct."""

    __slots__ = ("_changes", "_index", "_names", "_nodes", "_states")

    def __init__(self, cluster: str, names: Sequence[str]) -> None:
        for name in (cluster, *names):
            if not NAME_PATTERN.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid cluster or host name")
        if not names:
            raise ValueError(f"cluster {cluster} has no host")
        if len(set(names)) != len(names):
            raise ValueError(f"cluster {cluster} names a host twice")
        self._names = tuple(names)
        self._index = {name: i for i, name in enumerate(self._names)}
        self._states = [NodeState.UP] * len(self._names)
        self._nodes: tuple[Node, ...] | None = None
        self._changes: list[tuple[int, NodeState]] = []

    def __len__(self) -> int:
        return len(self._names)

    @property
    def every(self) -> int:
        """The mask of every host."""
        return (1 << len(self._names)) - 1

    def index(self, name: str) -> int:
        """The index of host ``name``; KeyError for a host the cluster does not have."""
        return self._index[name]

    def find(self, name: str) -> int | None:
        """The index of host ``name``, or None."""
        return self._index.get(name)

    def names_of(self, mask: int) -> tuple[str, ...]:
        """The names of the hosts of ``mask``, in index order."""
        names = self._names
        return tuple(names[i] for i in bit_indices(mask))

    def nodes(self) -> tuple[Node, ...]:
        """Every host with its state, as a snapshot shows them."""
        if self._nodes is None:
            self._nodes = tuple(
                Node(name=name, state=state)
                for name, state in zip(self._names, self._states, strict=True)
            )
        return self._nodes

    def state(self, index: int) -> NodeState:
        return self._states[index]

    def set_state(self, index: int, state: NodeState) -> None:
        self._states[index] = state
        self._nodes = None

    def schedule(self, index: int, state: NodeState) -> int:
        """Keep a change to come; returns its token, for the calendar's event."""
        self._changes.append((index, state))
        return len(self._changes) - 1

    def scheduled(self, token: int) -> tuple[int, NodeState]:
        """The change kept under ``token``: the host's index and its new state."""
        return self._changes[token]
