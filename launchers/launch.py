"""``coorm-launch APP.toml``: run an application through the bridge (docs/design.md §7).

``--check`` reads the file, checks the programs it gives relative to itself (they must be
executable files there: a typo would otherwise fail every job once the hosts are held) and
builds its selector without contacting the bridge: exit status 0 when the file is usable, 2 with
one line naming the file and the key when it is not; a launch checks the same first. Without
it, the launch loop (:mod:`.session`) runs: exit status 0 when every component succeeded, 1 when
the run failed (a component, or the bridge ended the session), 2 for a bad file, 130 when
interrupted.

This module starts fast: the client, the selector (numpy, for the views), rich (a terminal)
and each kind of deployment are imported when they are needed, never for ``--help``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from coorm_bridge import __version__
from coorm_bridge.launchers.app import AppError, AppSpec, load_app

if TYPE_CHECKING:
    from coorm_bridge.launchers.growth import GrowthRule
    from coorm_bridge.launchers.selectors.base import Selector
    from coorm_bridge.launchers.tasks import Task

    #: What decides the requests, by kind.
    Plan = Selector | GrowthRule | list[Task]

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coorm-launch",
        description="Run an application through coorm-bridge: subscribe, select hosts on every "
        "view, wait for the start, deploy one job per cluster, send done.",
    )
    parser.add_argument("app", metavar="APP.toml", help="the application description")
    parser.add_argument("--version", action="version", version=f"coorm-launch {__version__}")
    parser.add_argument(
        "--check", action="store_true", help="validate the file and its selector, then exit"
    )
    parser.add_argument(
        "--url",
        default=None,
        help="the bridge: unix:///path or https://host:port (default: $COORM_BRIDGE_URL, "
        "else your own daemon's socket)",
    )
    parser.add_argument(
        "--token", default=os.environ.get("COORM_BRIDGE_TOKEN"), help="bearer token for TCP"
    )
    parser.add_argument("--ca", default=None, metavar="FILE", help="PEM file to verify https")
    parser.add_argument(
        "--run-root",
        type=Path,
        default=None,
        metavar="DIR",
        help="where run directories go (default: the file's deployment.run_root, "
        "else ./coorm-runs)",
    )
    parser.add_argument(
        "--plain", action="store_true", help="log lines even on a terminal (no live line)"
    )
    parser.add_argument(
        "--start-daemon",
        action="store_true",
        help="start a private daemon on the embedded mock platform for this run, and stop it "
        "after (the first run needs nothing set up)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        app = load_app(args.app, programs=True)
        plan = _plan(app, Path(args.app))
    except AppError as error:
        print(f"coorm-launch: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.check:
        print(f"{args.app}: ok ({len(app.components)} component(s), {_told(app)})")
        return 0
    if args.start_daemon:
        if args.url is not None:
            print("coorm-launch: --start-daemon and --url exclude each other", file=sys.stderr)
            return EXIT_USAGE
        return _with_private_daemon(app, plan, args)
    return _launch(app, plan, args)


def _told(app: AppSpec) -> str:
    if app.growth is not None:
        return f"evolving, growth rule {app.growth.name}"
    if app.tasks is not None:
        return f"malleable, task list {app.tasks.name}"
    return f"selector {app.selector.name}"


def _plan(app: AppSpec, path: Path) -> Plan:
    """What decides the requests: the selector (rigid, moldable), the growth rule (evolving)
    or the task list (malleable), built; errors as AppError naming the file."""
    if app.growth is None and app.tasks is None:
        return _selector(app, path)
    from coorm_bridge.launchers.growth import ReportError, create_rule  # noqa: PLC0415
    from coorm_bridge.launchers.plugins import PluginParamsError  # noqa: PLC0415
    from coorm_bridge.launchers.tasks import create_task_list  # noqa: PLC0415

    _search_next_to(path)
    try:
        if app.growth is not None:
            return create_rule(app.growth.name, app.growth.params)
        assert app.tasks is not None
        return create_task_list(app.tasks.name, app.tasks.params)
    except (LookupError, TypeError, PluginParamsError, ReportError, ValueError) as error:
        raise AppError(f"{path}: {error}") from error


def _search_next_to(path: Path) -> None:
    """A ``module:Class`` plug-in is looked for next to the application file first."""
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)


def _with_private_daemon(app: AppSpec, plan: Plan, args: Any) -> int:
    """The run against a daemon of our own (our own jobs, so its front end runs them even when
    we are root)."""
    from coorm_bridge.launchers.private import PrivateDaemonError, private_daemon  # noqa: PLC0415

    try:
        with private_daemon(run_jobs=True) as url:
            args.url = url
            return _launch(app, plan, args)
    except PrivateDaemonError as error:
        print(f"coorm-launch: {error}", file=sys.stderr)
        return 1


def _selector(app: AppSpec, path: Path) -> Selector:
    """The file's selector, built; errors as AppError naming the file. A ``module:Class``
    selector is looked for next to the application file first."""
    from coorm_bridge.launchers.selection import SelectorError, build_selector  # noqa: PLC0415

    _search_next_to(path)
    try:
        return build_selector(app)
    except SelectorError as error:
        raise AppError(f"{path}: {error}") from error


def _launch(app: AppSpec, plan: Plan, args: Any) -> int:
    if app.kind in ("evolving", "malleable"):
        return _adapt(app, plan, args)
    selector = cast("Selector", plan)
    from coorm_bridge.launchers.client import BridgeClient  # noqa: PLC0415
    from coorm_bridge.launchers.display import make_display  # noqa: PLC0415
    from coorm_bridge.launchers.selection import Selection  # noqa: PLC0415
    from coorm_bridge.launchers.session import Launch  # noqa: PLC0415

    def connect(**options: Any) -> BridgeClient:
        return BridgeClient(args.url, token=args.token, verify=args.ca, **options)

    try:
        probe = connect()  # a bad URL is a usage error, before anything is shown
    except ValueError as error:
        print(f"coorm-launch: {error}", file=sys.stderr)
        return EXIT_USAGE
    probe.close()
    launch = Launch(
        app=app,
        selection=Selection(selector, app),
        connect=connect,
        display=make_display(sys.stdout, plain=True if args.plain else None),
        run_root=args.run_root,
        bridge_url=probe.url,
    )
    return _drive(launch)


def _adapt(app: AppSpec, plan: Plan, args: Any) -> int:
    """An evolving or a malleable application's run (:mod:`.evolve`, :mod:`.sweep`)."""
    from coorm_bridge.launchers.display import make_display  # noqa: PLC0415
    from coorm_bridge.launchers.evolve import EvolvingRun  # noqa: PLC0415
    from coorm_bridge.launchers.evolving import EvolvingClient  # noqa: PLC0415
    from coorm_bridge.launchers.sweep import SweepRun  # noqa: PLC0415

    def connect(**options: Any) -> EvolvingClient:
        return EvolvingClient(args.url, token=args.token, verify=args.ca, **options)

    try:
        connect().close()
    except ValueError as error:
        print(f"coorm-launch: {error}", file=sys.stderr)
        return EXIT_USAGE
    display = make_display(sys.stdout, plain=True if args.plain else None)
    common: dict[str, Any] = {"app": app, "connect": connect, "display": display,
                              "run_root": args.run_root}  # fmt: skip
    run = (
        EvolvingRun(**common, rule=cast("GrowthRule", plan))
        if app.kind == "evolving"
        else SweepRun(**common, tasks=cast("list[Task]", plan))
    )
    return _drive(run)


def _drive(run: Any) -> int:
    """``run.run()`` with its signal handlers on; a failure of the bridge in one line."""
    from coorm_bridge.launchers.client import BridgeError  # noqa: PLC0415

    run.interrupts.install()
    try:
        status: int = run.run()
        return status
    except BridgeError as error:
        print(f"coorm-launch: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("coorm-launch: interrupted twice: stopped at once", file=sys.stderr)
        return 130
    finally:
        run.interrupts.restore()


if __name__ == "__main__":
    raise SystemExit(main())
