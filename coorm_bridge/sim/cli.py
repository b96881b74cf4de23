"""``coorm-sim NAME [options]``: plan an experiment's runs, sweep them, report.

Only the chosen experiment's module is imported (its options are needed to parse the command
line); ``coorm-sim --help`` imports none. ``$COORM_SIM_EXPERIMENTS`` adds experiments of one's
own (``name=module:Class,...``, the module on ``PYTHONPATH``), e.g. a site's or a test's.

Exit status: 0 done, 1 some run failed (or the sweep could not run), 2 bad usage, 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from coorm_bridge.sim.experiment import EXPERIMENTS, Experiment, experiment
from coorm_bridge.sim.progress import failure_line, reporter_for
from coorm_bridge.sim.runners import LocalSweep, SweepRunner, default_jobs
from coorm_bridge.sim.slurm import RunnerUnavailable, SlurmOptions, SlurmRunner
from coorm_bridge.sim.store import SweepStoreError
from coorm_bridge.sim.sweep import sweep

ENVIRONMENT = "COORM_SIM_EXPERIMENTS"
EXTRA = re.compile(r"^([a-z][a-z0-9_-]*)=([A-Za-z_][\w.]*:[A-Za-z_]\w*)$")
DEFAULT_OUT = "coorm-sim-results"


class UsageError(Exception):
    """A mistake in the command line or the environment: one line, exit status 2."""


def register_extra(value: str | None) -> None:
    """Add the experiments named in ``$COORM_SIM_EXPERIMENTS`` to the registry."""
    for item in filter(None, (part.strip() for part in (value or "").split(","))):
        match = EXTRA.fullmatch(item)
        if match is None:
            raise UsageError(f"{ENVIRONMENT}: {item!r} is not name=module:Class")
        EXPERIMENTS[match[1]] = match[2]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _sbatch_option(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. qos=low)")
    return name.lstrip("-"), value


def _common(parser: argparse.ArgumentParser) -> None:
    sweep_options = parser.add_argument_group("sweep")
    sweep_options.add_argument("--quick", action="store_true", help="the small sizes CI runs")
    sweep_options.add_argument(
        "--out", type=Path, default=Path(DEFAULT_OUT), help=f"results (default: {DEFAULT_OUT})"
    )
    sweep_options.add_argument(
        "--executor", choices=("local", "slurm"), default="local", help="where runs go"
    )
    sweep_options.add_argument(
        "--jobs", type=_positive, default=None, help="local: parallel runs (default: the cores)"
    )
    sweep_options.add_argument(
        "--fresh", action="store_true", help="forget the runs stored by earlier sweeps"
    )
    slurm = parser.add_argument_group("slurm executor (a job array, through submitit)")
    slurm.add_argument("--partition", help="the partition (default: Slurm's)")
    slurm.add_argument("--time", type=_positive, default=60, help="minutes per array task")
    slurm.add_argument("--cpus-per-task", type=_positive, default=1)
    slurm.add_argument("--per-task", type=_positive, default=1, help="runs per array task")
    slurm.add_argument("--array-parallelism", type=_positive, help="array tasks at once")
    slurm.add_argument(
        "--sbatch",
        type=_sbatch_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other sbatch option, e.g. qos=low (repeatable)",
    )
    slurm.add_argument(
        "--slurm-folder", type=Path, help="submitit's files (default: OUT/NAME/slurm; shared)"
    )


def build_parser(argv: Sequence[str]) -> tuple[argparse.ArgumentParser, Experiment | None]:
    """The parser, with the options of the experiment ``argv`` names (imported here only)."""
    parser = argparse.ArgumentParser(
        prog="coorm-sim",
        description="The CooRM paper's experiments, in virtual time, with this project's code. "
        "'coorm-sim NAME --help' lists an experiment's options.",
    )
    commands = parser.add_subparsers(dest="name", metavar="NAME", required=True)
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    built: Experiment | None = None
    for name in EXPERIMENTS:
        if name == chosen:
            built = experiment(name)
            sub = commands.add_parser(name, help=built.help, description=built.help)
            built.add_arguments(sub)
        else:
            sub = commands.add_parser(name, help=f"see coorm-sim {name} --help")
        _common(sub)
    return parser, built


def make_runner(args: argparse.Namespace, directory: Path, exclusive: bool = False) -> SweepRunner:
    """The local or the Slurm runner, from the command line (``exclusive``: one run at a time
    here, see :attr:`Experiment.exclusive`)."""
    if args.executor == "local":
        return LocalSweep(1 if exclusive else args.jobs or default_jobs())
    try:
        options = SlurmOptions(
            folder=args.slurm_folder or directory / "slurm",
            partition=args.partition,
            time_min=args.time,
            cpus_per_task=args.cpus_per_task,
            per_task=args.per_task,
            array_parallelism=args.array_parallelism,
            job_name=f"coorm-sim-{args.name}",
            sbatch=dict(args.sbatch),
        )
    except ValidationError as error:
        raise UsageError(error.errors()[0]["msg"]) from None
    return SlurmRunner(options)


def _run(args: argparse.Namespace, built: Experiment) -> int:
    directory = args.out / args.name
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot use --out {args.out}: {error.strerror or error}") from None
    if not os.access(directory, os.W_OK):
        raise UsageError(f"cannot use --out {args.out}: {directory} is not writable")
    runner = make_runner(args, directory, built.exclusive)
    specs = built.plan(args)
    result = sweep(args.name, specs, directory, runner, fresh=args.fresh, reporter=reporter_for())
    if not result.ok:
        for outcome in result.failures:
            print(f"coorm-sim: {failure_line(outcome)}", file=sys.stderr)
        print(
            f"coorm-sim: {len(result.failures)} of {len(specs)} runs failed; the others are "
            f"stored under {directory / 'runs'}: the same command retries only the failed ones",
            file=sys.stderr,
        )
        return 1
    report = built.report(result.rows, directory)
    print(f"runs: {result.executed} done now, {result.reused} stored before")
    for written in [result.csv, *report.files]:
        print(f"wrote {written}")
    for line in report.summary:
        print(line)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``coorm-sim`` command; returns its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        register_extra(os.environ.get(ENVIRONMENT))
        parser, built = build_parser(argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit as stop:
            return stop.code if isinstance(stop.code, int) else 2
        assert built is not None  # argparse took a NAME: the one built
        return _run(args, built)
    except KeyboardInterrupt:
        print(
            "coorm-sim: interrupted; finished runs are stored: run again to resume", file=sys.stderr
        )
        return 130
    except UsageError as error:
        print(f"coorm-sim: {error}", file=sys.stderr)
        return 2
    except (SweepStoreError, RunnerUnavailable, LookupError) as error:
        print(f"coorm-sim: {error}", file=sys.stderr)
        return 1
    except ImportError as error:
        extra = (
            " (pip install 'coorm-bridge[sim]')" if error.name in {"matplotlib", "submitit"} else ""
        )
        print(f"coorm-sim: missing module {error.name or error}{extra}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
