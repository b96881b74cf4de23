"""``coorm-bridge``: the daemon's command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from coorm_bridge import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coorm-bridge",
        description="CooRM views and co-allocation beside Slurm and OAR.",
    )
    parser.add_argument("--version", action="version", version=f"coorm-bridge {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
