"""``coorm-bridge serve --check``: the configuration read as the daemon reads it, every batch
system asked what the daemon asks at start, and what was found printed; nothing changed.

An admin runs it before a restart (or a reload), beside the running daemon: it takes no lock of
the state folder, opens no store, binds no socket and holds nothing in any batch system. The
rights are asked with the probe the daemon uses at start (Slurm refuses it before making
anything). A simulated platform is built afresh in a scratch folder from its platform file,
never from the daemon's saved one, which the running daemon holds.

Exit status, as ``serve``'s: 2 when the file or a setting the batch system shows to be wrong
must be corrected, or the bridge's account lacks rights there (an admin must act); 1 when a
batch system does not answer (try again later); 0 when all is well.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.registry import AdapterContext, create_adapter
from coorm_bridge.core.batch import (
    AdapterError,
    LacksRights,
    Misconfigured,
    NodeState,
    Unavailable,
)
from coorm_bridge.service.config import Config, ConfigError, Limits, load_config
from coorm_bridge.service.wiring import misconfigured

OK, SILENT, WRONG = 0, 1, 2


def check_command(path: str | None) -> int:
    """Check the file at ``path`` (None: the defaults) and the batch systems it names; print
    what was found on stdout, the file's mistake on stderr; the exit status."""
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(path)
    except ConfigError as error:
        print(f"coorm-bridge: {error}", file=sys.stderr)
        return WRONG
    print(f"configuration: {config.source}")
    for line in settings_lines(config):
        print(f"  {line}")
    status = _batch_systems(config)
    verdict = {
        OK: "all is well",
        SILENT: "a batch system did not answer: try again once it does (exit 1)",
        WRONG: "the configuration or the bridge's rights must be corrected (exit 2)",
    }
    print(f"check: {verdict[status]}", flush=True)
    return status


def settings_lines(config: Config) -> list[str]:
    """Where the daemon listens, keeps its state, who its admins are and the limits in force."""
    bridge = config.bridge
    who = "every local user" if bridge.socket is not None else "the daemon's own user only"
    lines = [f"listening: unix:{bridge.socket_path} ({who})"]
    if bridge.tcp is not None:
        tcp = bridge.tcp
        kind = "TLS" if tcp.certificate is not None else "plain TCP"
        users = ", ".join(sorted(set(bridge.tokens.values())))
        lines.append(
            f"listening: {tcp.host}:{tcp.port} ({kind}), {len(bridge.tokens)} token(s) for {users}"
        )
    lines.append(f"state: {bridge.state_path} (not opened by the check)")
    lines.append(f"admins: {', '.join(sorted(bridge.admins)) or 'none'}")
    limits = config.limits
    lines.append(f"limits: {_table(_in_force(limits))}")
    for kind, tables in (("group", limits.group), ("user", limits.user)):
        for name, own in sorted(tables.items()):
            lines.append(f"limits.{kind}.{name}: {_table(_in_force(own))}")
    return lines


def _in_force(limits: Limits) -> dict[str, Any]:
    """A table's keys as they apply: its group and user tables are lines of their own, and a
    ``held_share`` beside a ``held_hosts`` is not in force (``held_hosts`` comes first)."""
    values = limits.model_dump(exclude={"user", "group"}, exclude_none=True)
    if "held_hosts" in values:
        values.pop("held_share", None)
    return values


def _table(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{key} = {value}" for key, value in values.items()) or "none"


def _batch_systems(config: Config) -> int:
    """Each cluster's snapshot and the bridge's rights there, printed; the worst status."""
    with tempfile.TemporaryDirectory(prefix="coorm-bridge-check-") as scratch:
        context = AdapterContext(state_dir=Path(scratch), private=config.bridge.private)
        try:
            adapter = create_adapter(config.adapter, context)
        except Misconfigured as error:
            print(f"coorm-bridge: {misconfigured(config, error)}", file=sys.stderr)
            return WRONG
        except AdapterError as error:
            return _unusable(error)
        try:
            return _clusters(config, adapter)
        finally:
            adapter.close()


def _unusable(error: AdapterError) -> int:
    """The batch system as a whole: one that does not answer now (1), or that cannot be used
    as configured (2: a file the settings name, an answer the adapter cannot read)."""
    if isinstance(error, Unavailable):
        print(f"batch system: does not answer: {error}")
        return SILENT
    print(f"coorm-bridge: the batch system cannot be used: {error}", file=sys.stderr)
    return WRONG


def _clusters(config: Config, adapter: Adapter) -> int:
    try:
        infos = adapter.clusters()
    except Misconfigured as error:
        print(f"coorm-bridge: {misconfigured(config, error)}", file=sys.stderr)
        return WRONG
    except AdapterError as error:
        return _unusable(error)
    worst = OK
    for info in infos:
        name = info.name
        try:
            snapshot = adapter.snapshot([name]).clusters[name]
        except Misconfigured as error:
            print(f"coorm-bridge: {misconfigured(config, error)}", file=sys.stderr)
            print(f"cluster {name}: wrong setting: adapter.{error.key}")
            worst = WRONG
            continue
        except Unavailable as error:
            print(f"cluster {name}: does not answer: {error}")
            worst = max(worst, SILENT)
            continue
        except AdapterError as error:
            print(f"cluster {name}: cannot be used: {error}")
            worst = WRONG
            continue
        up = sum(node.state is NodeState.UP for node in snapshot.nodes)
        print(
            f"cluster {name}: reachable, {len(snapshot.nodes)} hosts ({up} up), "
            f"{info.cores_per_host} core(s) per host"
        )
        try:
            adapter.check_rights(name)
        except LacksRights as lacking:
            print(f"  rights: missing: {lacking.reason}")
            worst = WRONG
        except AdapterError as error:
            print(f"  rights: could not be checked: {error}")
            worst = max(worst, SILENT)
        else:
            print("  rights: ok")
    return worst
