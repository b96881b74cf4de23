"""The bridge's configuration: one TOML file, validated by pydantic, errors naming file and key.

With no file at all the bridge runs the default mock platform for the current user, on a Unix
socket in the user's runtime directory, keeping its state in the user's state directory: a user
can try it with nothing installed. A site admin writes the file (see ``etc/``) to choose the
adapter, where to listen, who may connect over TCP, and the policy's parameters.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import stat
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    BaseModel,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from coorm_bridge.adapters.registry import AdapterSettings, read_settings
from coorm_bridge.core.model import MAX_DURATION, Frozen, Name, UserName, describe
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.paths import default_socket, state_dir

#: Longest placeholder prefix: instance (6), session (16), two dashes and a cluster's name (at
#: least 12 characters, a digest completing a longer one) must still fit in 63 characters.
MAX_PREFIX = 24
#: Tokens grant a user's rights over TCP: short ones are guessable.
MIN_TOKEN_LENGTH = 16
#: Linux's limits on a path and on one of its parts, in bytes (PATH_MAX counts the final NUL).
PATH_MAX = 4096
NAME_MAX = 255


class ConfigError(Exception):
    """The configuration cannot be used; the message says which file, which key and why."""


class TcpListen(Frozen):
    """``[bridge.tcp]``: remote launchers, over TLS unless only this host can connect."""

    port: Annotated[int, Field(ge=1, le=65535, strict=True)] = 8642
    certificate: Path | None = None
    """PEM certificate the daemon presents (its chain after it): TCP is then TLS."""
    key: Path | None = None
    """PEM private key of the certificate; it must not be readable by every user."""
    insecure_plaintext: bool = False
    """Allow plain TCP on an address other hosts reach: bearer tokens then cross the network in
    clear, for anyone on the path to copy. Only for a network the site trusts entirely."""
    host: str = "127.0.0.1"
    """Address to listen on; only a loopback address may go without TLS (or the above)."""

    @model_validator(mode="after")
    def _key_with_certificate(self) -> Self:
        if (self.certificate is None) != (self.key is None):
            raise ValueError("give certificate and key together (TLS), or neither")
        return self

    @field_validator("host")
    @classmethod
    def _plaintext_stays_local(cls, host: str, info: ValidationInfo) -> str:
        tls = info.data.get("certificate") is not None or info.data.get("key") is not None
        if not (tls or info.data.get("insecure_plaintext") or is_loopback(host)):
            raise ValueError(
                f"plain TCP on {host!r} would send bearer tokens in clear over the network: "
                "give bridge.tcp.certificate and bridge.tcp.key to serve TLS, listen on "
                "127.0.0.1, or set bridge.tcp.insecure_plaintext = true if you must"
            )
        return host


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: a loopback address or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ConnectionSettings(Frozen):
    """``[bridge.connections]``: how many connections the HTTP server holds and for how long, so
    that one peer's slow or silent connections cannot keep others out. A peer is a uid on the
    Unix socket, an address on TCP (known at connect, before any token). The caps in force are
    also kept below the open-file limit (see coorm_bridge/http/connections.py)."""

    max_total: Annotated[int, Field(ge=2, le=1_000_000, strict=True)] = 8192
    """Connections open at once; more are closed as they come."""
    max_per_peer: Annotated[int, Field(ge=1, le=1_000_000, strict=True)] = 1024
    """Connections of one uid (socket) or one address (TCP) at once; a launcher holds one."""
    request_timeout: Annotated[float, Field(gt=0, le=600, allow_inf_nan=False)] = 10.0
    """Seconds from a request's first byte until its headers and body are all in (and for a
    TLS handshake); past it the connection is closed (408). A long poll's wait comes after."""
    idle_timeout: Annotated[int, Field(ge=1, le=3600, strict=True)] = 75
    """Seconds a connection may stay open sending nothing: from connect to its first request,
    and between requests (a launcher's keep-alive connection between its calls)."""
    log_interval: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 60.0
    """Refused connections and accept errors are logged at most once per this many seconds
    each, with a count."""


#: Default ``bridge.retention``: ended sessions are kept a week.
DEFAULT_RETENTION = 7 * 24 * 3600


class BridgeSettings(Frozen):
    """``[bridge]``: where to listen, where to keep state, who is who."""

    socket: Path | None = None
    """Unix socket for local launchers (identity from the peer's uid); default: runtime dir."""
    tcp: TcpListen | None = None
    """TCP listener for remote launchers (identity from bearer tokens); off by default."""
    connections: ConnectionSettings = Field(default_factory=ConnectionSettings)
    """Caps and time limits on the HTTP server's connections."""
    state_dir: Path | None = None
    admins: tuple[UserName, ...] = ()
    """Users who may see and act on every session."""
    tokens: dict[str, UserName] = Field(default_factory=dict)
    """Bearer token -> user, for TCP. Keep this file private (mode 600)."""
    session_timeout: Annotated[int, Field(ge=10, le=366 * 24 * 3600, strict=True)] | None = None
    """Withdraw a waiting session whose launcher was not heard from for this many seconds (a
    launcher long-polls its events, so a live one is heard from every minute); None: never."""
    retention: Annotated[int, Field(ge=60, le=366 * 24 * 3600, strict=True)] = DEFAULT_RETENTION
    """Seconds an ended session (finished, cancelled, failed) is kept, with its events, for
    ``coorm-bridge sessions`` and its launcher; then it is deleted (checked every hour), and
    ``GET /v1/sessions/{id}`` answers 404. One still holding a placeholder or running a job
    is kept until those end."""
    placeholder_prefix: Annotated[Name, Field(max_length=MAX_PREFIX)] = "coorm-"
    """How the bridge's reservations are named: ``<prefix><instance>-<session>-<cluster>``, the
    instance being this bridge's id (in its database): another bridge's are foreign load."""

    @model_validator(mode="after")
    def _tokens_usable(self) -> Self:
        short = [user for token, user in self.tokens.items() if len(token) < MIN_TOKEN_LENGTH]
        if short:
            raise ValueError(
                f"tokens must be at least {MIN_TOKEN_LENGTH} characters; "
                f"too short for: {', '.join(sorted(short))}"
            )
        if self.tcp is not None and not self.tokens:
            raise ValueError("listening on TCP needs [bridge.tokens]: nobody could authenticate")
        return self

    @property
    def socket_path(self) -> Path:
        return self.socket or default_socket()

    @property
    def private(self) -> bool:
        """Whether only the daemon's own user can reach it: its default socket (in that user's
        runtime folder, mode 600) and no TCP. A configured socket is for every local user."""
        return self.socket is None and self.tcp is None

    @property
    def state_path(self) -> Path:
        return self.state_dir or state_dir()

    @property
    def database(self) -> Path:
        return self.state_path / "bridge.sqlite"


class PlacementSettings(Frozen):
    """``[placement]``: how placeholders are held in the batch systems."""

    horizon: Annotated[int, Field(ge=0, le=MAX_DURATION, strict=True)] = 300
    """Hold placeholders for applications starting within this many seconds."""
    hold_first: Annotated[int, Field(ge=0, le=1000, strict=True)] = 1
    """The first this many waiting applications hold placeholders at their estimated start
    even beyond the horizon (as a batch scheduler reserves for its top jobs), so that local jobs
    submitted after them can never delay them; 0 holds only within the horizon."""
    attempts: Annotated[int, Field(ge=1, le=100, strict=True)] = 5
    """Co-allocation tries (reserve everywhere or roll back) before recomputing later."""
    poll_interval: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 10.0
    """Seconds between two snapshots of a cluster (backed off while it does not answer; at
    most an hour, or a cluster's state is no longer worth the name)."""


Bound = Annotated[int, Field(ge=1, le=10**9, strict=True)]
#: Host-seconds: 10^9 hosts for about 30 years fits, and sums of them stay far from overflow.
HostSeconds = Annotated[int, Field(ge=1, le=10**18, strict=True)]
Share = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]

#: Default ``limits.duration``: a week, the longest wall time shared clusters commonly allow;
#: longer work checkpoints and asks again.
DEFAULT_DURATION = 7 * 24 * 3600
#: Default ``limits.held_share``: one user holds at most half the platform's hosts at once.
DEFAULT_HELD_SHARE = 0.5


class Limits(Frozen):
    """What one user may ask for and hold (None: not set in this table)."""

    sessions: Bound | None = None
    """Sessions not ended at once."""
    hosts: Bound | None = None
    """Hosts in one request, all clusters together."""
    duration: Bound | None = None
    """Seconds of one request."""
    held_hosts: Bound | None = None
    """Hosts held at once by the user's started sessions and ghosts, all clusters together."""
    held_share: Share | None = None
    """``held_hosts`` as a share of the platform's hosts (rounded down, at least one), for a
    table that does not set ``held_hosts`` itself."""
    reserved: HostSeconds | None = None
    """Host-seconds of the user's requests not over yet: hosts times the time left (the whole
    duration for one not started), summed over the user's sessions, the new request included."""
    waiting: Bound | None = None
    """Sessions with a request not started yet, at once."""


class LimitSettings(Limits):
    """``[limits]``: the same for every user, ``[limits.group.NAME]`` tables for the members of
    a Unix group and ``[limits.user.NAME]`` tables for some users. Without the file one user
    may still hold at most half the platform, a week at a time (see the README)."""

    duration: Bound | None = DEFAULT_DURATION
    held_share: Share | None = DEFAULT_HELD_SHARE
    user: dict[UserName, Limits] = Field(default_factory=dict)
    group: dict[UserName, Limits] = Field(default_factory=dict)


def _default_adapter() -> AdapterSettings:
    return read_settings({})


class Config(Frozen):
    """The whole file: ``[bridge]``, ``[policy]``, ``[placement]``, ``[limits]``, ``[adapter]``."""

    bridge: BridgeSettings = BridgeSettings()
    policy: PolicyConfig = PolicyConfig()
    placement: PlacementSettings = PlacementSettings()
    limits: LimitSettings = LimitSettings()
    adapter: SerializeAsAny[AdapterSettings] = Field(default_factory=_default_adapter)
    """Validated by the settings model of the installed adapter its ``kind`` names."""
    source: str = "(defaults)"
    """Where it was read from, for messages."""

    @field_validator("adapter", mode="before")
    @classmethod
    def _plugin_settings(cls, value: Any) -> Any:
        # Errors come out located under adapter.<kind> (adapter.kind when unknown).
        return read_settings(value) if isinstance(value, Mapping) else value


def parse_config(text: str, source: str = "<config>", base_dir: Path | None = None) -> Config:
    """Parse a configuration; relative paths in it are taken from ``base_dir``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: not valid TOML: {error}") from error
    if "source" in data:
        raise ConfigError(f"{source}: source: not a setting")
    try:
        config = Config.model_validate({**data, "source": source})
    except ValidationError as error:
        raise ConfigError(f"{source}: {describe(error)}") from error
    problems = list(_unusable_paths(config, ()))
    if problems:
        raise ConfigError(f"{source}: {'; '.join(problems)}")
    return _resolved(config, base_dir) if base_dir is not None else config


def load_config(path: str | Path | None = None) -> Config:
    """Read the configuration file, or the defaults when ``path`` is None.

    A file that holds tokens must not be readable by other users: they would be anyone's keys.
    """
    if path is None:
        return Config()
    path = Path(path)
    try:
        text = path.read_text()
        mode = path.stat().st_mode
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the configuration: {error.strerror}") from error
    except ValueError as error:  # a NUL byte, text that is not UTF-8
        raise ConfigError(f"{str(path)!r}: cannot read the configuration: {error}") from error
    config = parse_config(text, source=str(path), base_dir=path.resolve().parent)
    missing = config.adapter.local_problems()
    if missing:
        raise ConfigError(f"{path}: {'; '.join(f'adapter.{problem}' for problem in missing)}")
    if config.bridge.tokens and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"{path}: bridge.tokens: the file is readable by other users; "
            f"make it private (chmod 600 {path})"
        )
    tcp = config.bridge.tcp
    if tcp is not None and tcp.certificate is not None and tcp.key is not None:
        problem = tls_problem(tcp.certificate, tcp.key)
        if problem is not None:
            raise ConfigError(f"{path}: {problem}")
    return config


def tls_problem(certificate: Path, key: Path) -> str | None:
    """``key: why`` when the certificate and key cannot serve TLS (unreadable, not PEM, not a
    pair) or the key is readable by every user; None when they can."""
    try:
        if key.stat().st_mode & stat.S_IROTH:
            return f"bridge.tcp.key: {key} is readable by every user; chmod o-r {key}"
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(certificate, key)
    except ssl.SSLError as error:
        return f"bridge.tcp.certificate: {certificate} and its key do not load: {error.reason}"
    except OSError as error:
        which = "key" if error.filename == str(key) else "certificate"
        return f"bridge.tcp.{which}: cannot read {error.filename or certificate}: {error.strerror}"
    return None


def _unusable_paths(model: BaseModel, where: tuple[str, ...]) -> Iterator[str]:
    """``key: why`` for every path of every table (the adapter's included) that the system
    would refuse: found now, not as a traceback when the daemon first uses it."""
    for name, field in type(model).model_fields.items():
        yield from _unusable(getattr(model, name), (*where, field.alias or name))


def _unusable(value: object, where: tuple[str, ...]) -> Iterator[str]:
    if isinstance(value, Path):
        why = path_refusal(value)
        if why is not None:
            yield f"{'.'.join(where)}: {str(value)!r} {why}"
    elif isinstance(value, BaseModel):
        yield from _unusable_paths(value, where)
    elif isinstance(value, tuple | list):
        for index, item in enumerate(value):
            yield from _unusable(item, (*where, str(index)))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _unusable(item, (*where, str(key)))


def path_refusal(path: Path) -> str | None:
    """Why the system would refuse ``path`` whatever the files (None: it would not)."""
    try:
        raw = os.fsencode(path)
    except UnicodeError:
        return "cannot be encoded for the file system"
    if b"\0" in raw:
        return "holds a NUL byte, which no path can hold"
    if len(raw) >= PATH_MAX:
        return f"is longer than the {PATH_MAX - 1} bytes a path may have"
    if any(len(part) > NAME_MAX for part in raw.split(b"/")):
        return f"has a part longer than the {NAME_MAX} bytes a file name may have"
    return None


def _resolved(config: Config, base: Path) -> Config:
    """Relative paths in the file mean relative to the file, not to the daemon's cwd: every
    path of every table, however deep (the adapter's tables and arrays of tables included)."""
    return _absolute_paths(config, base)


M = TypeVar("M", bound=BaseModel)


def _absolute_paths(model: M, base: Path) -> M:
    update = {name: _absolute(getattr(model, name), base) for name in type(model).model_fields}
    return model.model_copy(update=update)


def _absolute(value: object, base: Path) -> object:
    if isinstance(value, Path):
        return value if value.is_absolute() else base / value
    if isinstance(value, BaseModel):
        return _absolute_paths(value, base)
    # Exact types only: a named tuple is one value.
    if type(value) is tuple:
        return tuple(_absolute(item, base) for item in value)
    if type(value) is list:
        return [_absolute(item, base) for item in value]
    if type(value) is dict:
        return {key: _absolute(item, base) for key, item in value.items()}
    return value
