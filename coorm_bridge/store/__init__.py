"""The store: sessions, their numbered events, the placeholders and the front end's jobs, in
SQLite (WAL).

It knows rows and transactions, not the policy: a row is checked against the application state
machine (:mod:`coorm_bridge.core.states`) before it is written.
"""

from coorm_bridge.store.database import SchemaVersionError, StoreError, StoreFull
from coorm_bridge.store.rows import (
    DrainRow,
    JobCommand,
    JobRow,
    PlaceholderRow,
    PlaceholderStatus,
    SessionRow,
    Typed,
    new_job_id,
    new_session_id,
)
from coorm_bridge.store.schema import SCHEMA_VERSION
from coorm_bridge.store.store import Store

__all__ = [
    "SCHEMA_VERSION",
    "DrainRow",
    "JobCommand",
    "JobRow",
    "PlaceholderRow",
    "PlaceholderStatus",
    "SchemaVersionError",
    "SessionRow",
    "Store",
    "StoreError",
    "StoreFull",
    "Typed",
    "new_job_id",
    "new_session_id",
]
