"""``coorm-bridge``: run the daemon (``serve``), look at it (``status``), try it (``demo``), and
the admin commands (``sessions``, ``cancel``, ``drain``, ``resume``)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence

from coorm_bridge import __version__
from coorm_bridge.core.states import AppState

CONFIG_ENV = "COORM_BRIDGE_CONFIG"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coorm-bridge",
        description="CooRM views and co-allocation beside Slurm and OAR.",
    )
    parser.add_argument("--version", action="version", version=f"coorm-bridge {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="run the daemon",
        description="Run the bridge. Without a configuration it runs the built-in mock platform "
        "for you alone, on a Unix socket in your runtime directory.",
    )
    serve.add_argument(
        "-c",
        "--config",
        default=os.environ.get(CONFIG_ENV),
        help=f"TOML configuration (default: ${CONFIG_ENV}, else built-in defaults)",
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    serve.add_argument(
        "--check",
        action="store_true",
        help="check the configuration and every batch system it names (reachable, the bridge's "
        "rights), print what was found and exit: 0 all is well, 2 something to correct, 1 a batch "
        "system that does not answer; changes nothing, works beside the running daemon",
    )

    for name, text in (
        ("status", "show clusters, their availability and sessions"),
        ("demo", "two applications co-allocated across two clusters"),
        ("sessions", "list every session with its placeholders (admins; a user sees their own)"),
        ("cancel", "end a session by force; its launcher is told the reason"),
        ("drain", "make no new placeholder on a cluster until it is resumed (admins)"),
        ("resume", "let placeholders be made on a drained cluster again (admins)"),
        ("web", "Gantt charts of the clusters and your sessions, live in a browser"),
    ):
        sub = commands.add_parser(name, help=text, description=text)
        sub.add_argument(
            "--url",
            default=None,
            help="the bridge: unix:///path or https://host:port (default: $COORM_BRIDGE_URL, "
            "else your own daemon's socket)",
        )
        sub.add_argument(
            "--token", default=os.environ.get("COORM_BRIDGE_TOKEN"), help="bearer token for TCP"
        )
        sub.add_argument(
            "--ca",
            default=None,
            metavar="FILE",
            help="PEM file to verify an https bridge's certificate against (default: "
            "$REQUESTS_CA_BUNDLE, else the system's CAs)",
        )
        if name == "sessions":
            sub.add_argument("--user", default=None, help="only this user's sessions")
            sub.add_argument(
                "--state", default=None, choices=[s.value for s in AppState], help="only these"
            )
        if name == "cancel":
            sub.add_argument("session", help="the session's id (see coorm-bridge sessions)")
            sub.add_argument(
                "--reason", required=True, help="why, told to its launcher (1 to 500 characters)"
            )
        if name in ("drain", "resume"):
            sub.add_argument("cluster", help="the cluster's name")
        if name == "drain":
            sub.add_argument("--reason", default=None, help="why (shown with the drain, logged)")
        if name == "web":
            sub.add_argument(
                "--listen",
                default="127.0.0.1",
                help="the loopback address to serve on (default 127.0.0.1; others are refused: "
                "the token would cross the network in clear)",
            )
            sub.add_argument(
                "--port", type=int, default=0, help="the port (default: any free one, printed)"
            )
        if name == "status":
            sub.add_argument(
                "--watch",
                action="store_true",
                help="keep the display up to date, redrawn after each of the bridge's passes "
                "(at most once a second), until Ctrl-C",
            )
            sub.add_argument(
                "--hours",
                type=_hours,
                default=6.0,
                metavar="H",
                help="with --watch: the hours each cluster's chart of free hosts covers "
                "(default 6)",
            )
        if name == "demo":
            sub.add_argument(
                "--start-daemon",
                action="store_true",
                help="start a private daemon on the mock platform for the demo, stop it after",
            )
            sub.add_argument(
                "--run",
                type=int,
                default=3,
                metavar="SECONDS",
                help="how long the applications run (default 3; up to 90, to watch them in "
                "coorm-bridge web)",
            )
    return parser


def _hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {text!r}") from None
    if not 0.01 <= hours <= 24 * 28:
        raise argparse.ArgumentTypeError(f"between 0.01 and {24 * 28} hours, got {text}")
    return hours


# Each command imports what it needs when it runs: the daemon's (FastAPI, the policy, the
# adapters) costs about a second and a half of CPU, which ``status`` or ``--version`` need not pay.


def _serve(a: argparse.Namespace) -> int:
    if a.check:
        from coorm_bridge.cli.check import check_command  # noqa: PLC0415 - when it runs

        return check_command(a.config)
    from coorm_bridge.cli.serve import serve_command  # noqa: PLC0415 - when it runs

    return serve_command(a.config, a.log_level)


def _status(a: argparse.Namespace) -> int:
    if a.watch:
        from coorm_bridge.cli.watch import watch  # noqa: PLC0415 - when it runs

        return watch(a.url, a.token, a.ca, hours=a.hours)
    from coorm_bridge.cli.status import show_status  # noqa: PLC0415 - when it runs

    return show_status(a.url, a.token, a.ca)


def _demo(a: argparse.Namespace) -> int:
    from coorm_bridge.cli.demo import run_demo  # noqa: PLC0415 - when it runs

    return run_demo(a.url, a.token, start_daemon=a.start_daemon, ca=a.ca, run=a.run)


def _web(a: argparse.Namespace) -> int:
    from coorm_bridge.web.server import serve_pages  # noqa: PLC0415 - when it runs

    return serve_pages(a.url, a.token, a.ca, a.listen, a.port)


def _admin(a: argparse.Namespace) -> int:
    from coorm_bridge.cli import admin  # noqa: PLC0415 - when it runs

    if a.command == "sessions":
        return admin.list_sessions(a.url, a.token, a.ca, a.user, a.state)
    if a.command == "cancel":
        return admin.cancel_session(a.url, a.token, a.ca, a.session, a.reason)
    if a.command == "drain":
        return admin.drain_cluster(a.url, a.token, a.ca, a.cluster, a.reason)
    return admin.resume_cluster(a.url, a.token, a.ca, a.cluster)


#: Each command, from its parsed arguments.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _serve,
    "status": _status,
    "demo": _demo,
    "web": _web,
    **dict.fromkeys(("sessions", "cancel", "drain", "resume"), _admin),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in COMMANDS:
        return COMMANDS[args.command](args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
