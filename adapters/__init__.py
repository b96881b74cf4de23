"""Batch-system adapters, installed as ``coorm_bridge.adapters``.

:mod:`coorm_bridge.adapters.base` defines the interface every adapter implements (mock, Slurm,
OAR) and the typed errors the bridge reacts to; :mod:`.registry` finds adapters by kind among
installed plug-ins; :mod:`.batch` is the generic part of every batch-system adapter.
"""

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import (
    AdapterError,
    ClusterSnapshot,
    Job,
    JobSpec,
    JobState,
    Node,
    NodeState,
    PlatformSnapshot,
    Refused,
    Reservation,
    ReservationHandle,
    ReservationSpec,
    Unavailable,
)

__all__ = [
    "Adapter",
    "AdapterError",
    "ClusterSnapshot",
    "Job",
    "JobSpec",
    "JobState",
    "Node",
    "NodeState",
    "PlatformSnapshot",
    "Refused",
    "Reservation",
    "ReservationHandle",
    "ReservationSpec",
    "Unavailable",
]
