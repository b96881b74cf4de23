"""The settings a running daemon can change without a restart: ``[limits]``, ``bridge.admins`` and
``bridge.tokens``, re-read from the file on SIGHUP (``systemctl reload``).

The bridge and the HTTP identity read them here at each request, never a copy made at start, so
that a reload takes effect at the next request. A reload swaps them all at once, under a lock: a
request sees the old settings or the new ones, never half of each. Every other key needs a
restart (the socket, the adapter, the policy are built once): a reload names those that changed,
and leaves them as they were.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coorm_bridge.service.config import Config, ConfigError, LimitSettings, load_config

log = logging.getLogger(__name__)

#: The keys a reload applies (dotted, as the file writes them).
RELOADABLE = ("limits", "bridge.admins", "bridge.tokens")
#: A configuration's ``source`` when it was not read from a file.
NO_FILE = Config.model_fields["source"].default


@dataclass(frozen=True)
class Live:
    """One consistent set of the reloadable settings."""

    limits: LimitSettings
    admins: frozenset[str]
    tokens: Mapping[str, str]
    """Bearer token -> user."""

    @classmethod
    def of(cls, config: Config) -> Live:
        return cls(
            limits=config.limits,
            admins=frozenset(config.bridge.admins),
            tokens=dict(config.bridge.tokens),
        )


@dataclass(frozen=True)
class Reloaded:
    """What a reload did: the changes applied (``key: old -> new``, never a token), and the
    keys that changed but need a restart."""

    applied: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()


class Settings:
    """The reloadable settings in force, swapped whole under a lock; thread-safe."""

    def __init__(self, config: Config) -> None:
        self._lock = threading.Lock()
        self._config = config
        self._live = Live.of(config)

    @property
    def current(self) -> Live:
        with self._lock:
            return self._live

    @property
    def config(self) -> Config:
        """The configuration in force: the one the daemon started with, with the reloadable
        settings of the last reload."""
        with self._lock:
            return self._config

    def apply(self, new: Config) -> Reloaded:
        """Take the reloadable settings of ``new``; the others stay as they are."""
        with self._lock:
            old = self._config
            bridge = old.bridge.model_copy(
                update={"admins": new.bridge.admins, "tokens": new.bridge.tokens}
            )
            self._config = old.model_copy(update={"limits": new.limits, "bridge": bridge})
            self._live = Live.of(self._config)
        applied = [*changes(old.limits, new.limits, "limits")]
        if set(old.bridge.admins) != set(new.bridge.admins):
            applied.append(
                f"bridge.admins: {_names(old.bridge.admins)} -> {_names(new.bridge.admins)}"
            )
        if old.bridge.tokens != new.bridge.tokens:
            applied.append(f"bridge.tokens: {_tokens(old.bridge.tokens, new.bridge.tokens)}")
        restart = [
            key
            for key in _keys(old.model_dump(mode="json"), new.model_dump(mode="json"), "")
            if key != "source" and not key.startswith(RELOADABLE)
        ]
        return Reloaded(applied=tuple(applied), restart=tuple(restart))

    def reload(self, by: str) -> Reloaded | None:
        """Re-read the file the daemon started with and apply it (``by``: who asked, for the
        log); a file that cannot be used is refused with one line naming file and key, and the
        settings in force stay (None)."""
        source = self.config.source
        if source == NO_FILE:
            log.warning("reload (%s): nothing to re-read, the daemon runs without a file", by)
            return None
        try:
            new = load_config(source)
        except ConfigError as error:
            log.error("reload (%s) refused, the settings in force stay: %s", by, error)
            return None
        done = self.apply(new)
        what = "; ".join(done.applied) or "nothing changed that a reload applies"
        if done.restart:
            log.warning(
                "reloaded %s (%s): %s; changed but needs a restart, left as it was: %s",
                source, by, what, ", ".join(done.restart),
            )  # fmt: skip
        else:
            log.info("reloaded %s (%s): %s", source, by, what)
        return done


def changes(old: Any, new: Any, where: str) -> list[str]:
    """``key: old -> new`` for every setting that differs between two tables."""
    before, after = old.model_dump(mode="json"), new.model_dump(mode="json")
    return [
        f"{key}: {_at(before, key, where)} -> {_at(after, key, where)}"
        for key in _keys(before, after, where)
    ]


def _keys(old: Any, new: Any, where: str) -> list[str]:
    """The dotted keys whose values differ, as deep as both sides are tables."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in sorted(old.keys() | new.keys(), key=str):
            found += _keys(old.get(key), new.get(key), f"{where}.{key}" if where else str(key))
        return found
    return [] if old == new else [where]


def _at(data: Any, key: str, where: str) -> Any:
    for part in key.removeprefix(where).strip(".").split("."):
        if not isinstance(data, dict) or part not in data:
            return "unset"
        data = data[part]
    return "unset" if data is None else data


def _names(users: tuple[str, ...]) -> str:
    return "[" + ", ".join(sorted(users)) + "]"


def _tokens(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """How tokens changed, by user: a token itself is never logged."""
    gained = sorted({user for token, user in new.items() if old.get(token) != user})
    lost = sorted({user for token, user in old.items() if new.get(token) != user})
    parts = [f"{len(old)} -> {len(new)} tokens"]
    if gained:
        parts.append(f"new for {', '.join(gained)}")
    if lost:
        parts.append(f"withdrawn for {', '.join(lost)}")
    return "; ".join(parts) if len(parts) > 1 else parts[0]
