"""Checks on names that reach a batch system's commands (reservations, partitions, properties,
hosts, users): the data model's patterns, so that no argument can smuggle a space, a quote, ``=``,
``,`` or a shell metacharacter into a command, a ``key=value`` token or an SQL expression."""

from __future__ import annotations

from coorm_bridge.core.model import NAME_PATTERN, USER_NAME_PATTERN

__all__ = ["check_name", "check_user"]


def check_name(value: str, what: str) -> str:
    """``value`` when it is a valid name (NAME_PATTERN), else ValueError naming ``what``."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"invalid {what} {value!r}: use 1 to 63 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit"
        )
    return value


def check_user(value: str) -> str:
    """``value`` when it is a usable user name (USER_NAME_PATTERN), else ValueError."""
    if not isinstance(value, str) or not USER_NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"invalid user name {value!r}: up to 255 letters, digits, '_', '.', '@' or '-' and "
            "a final '$', starting with a letter, digit or '_', not digits alone"
        )
    return value
