"""The store: sessions, their numbered events and the placeholders, in SQLite (WAL).

It knows rows and transactions, not the policy: a row is checked against the application state
machine (:mod:`coorm_bridge.core.states`) before it is written.
"""

from coorm_bridge.store.database import SchemaVersionError, StoreError
from coorm_bridge.store.rows import (
    PlaceholderRow,
    PlaceholderStatus,
    SessionRow,
    new_session_id,
)
from coorm_bridge.store.schema import SCHEMA_VERSION
from coorm_bridge.store.store import Store

__all__ = [
    "SCHEMA_VERSION",
    "PlaceholderRow",
    "PlaceholderStatus",
    "SchemaVersionError",
    "SessionRow",
    "Store",
    "StoreError",
    "new_session_id",
]
