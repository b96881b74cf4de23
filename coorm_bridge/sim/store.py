"""Where a sweep keeps each finished run, and the merged table made from them.

One JSON file per run, ``<dir>/runs/<digest>.json``, written atomically (a temporary file, then
``os.replace``): a sweep killed at any point leaves only whole files, so the next one resumes
from exactly the runs that finished. Each file holds its spec's key, which is checked on load:
a file whose key is not the spec's (an edited experiment, a digest collision) is refused rather
than silently reused.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from coorm_bridge.core.model import Frozen
from coorm_bridge.sim.experiment import Row, RunSpec, Value

#: The merged table's first column: the run's key.
RUN_COLUMN = "run"


class SweepStoreError(Exception):
    """A stored run that cannot be used: unreadable, or another run's."""


class StoredRun(Frozen):
    """One finished run as written on disk."""

    key: str
    spec: dict[str, Any]
    rows: list[dict[str, Value]]


class RunStore:
    """The runs of one experiment under ``directory`` (``OUT/<experiment>``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.runs = directory / "runs"

    def path(self, spec: RunSpec) -> Path:
        """The file of ``spec``'s rows."""
        return self.runs / f"{spec.digest()}.json"

    def error_path(self, spec: RunSpec) -> Path:
        """Where the traceback of ``spec``'s last failure is kept (removed once it succeeds)."""
        return self.runs / f"{spec.digest()}.error.txt"

    def clear(self) -> None:
        """Forget every stored run (``--fresh``)."""
        shutil.rmtree(self.runs, ignore_errors=True)

    def load(self, spec: RunSpec) -> list[Row] | None:
        """``spec``'s stored rows, or None if it has not finished yet."""
        path = self.path(spec)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise SweepStoreError(f"cannot read {path}: {error.strerror}") from None
        try:
            stored = StoredRun.model_validate(json.loads(text))
        except (ValueError, ValidationError) as error:
            raise SweepStoreError(f"{path} is not a stored run: {_first_line(error)}") from None
        if stored.key != spec.key():
            raise SweepStoreError(
                f"{path} holds the run {stored.key!r}, not {spec.key()!r}: "
                "remove it or start again with --fresh"
            )
        return [dict(row) for row in stored.rows]

    def save(self, spec: RunSpec, rows: Sequence[Row]) -> Path:
        """Store ``spec``'s rows atomically; the rows must be plain values."""
        stored = StoredRun(key=spec.key(), spec=spec.model_dump(mode="json"), rows=list(rows))
        # Plain json (not pydantic's JSON mode) so that NaN and infinities round-trip.
        text = json.dumps(stored.model_dump(), indent=1) + "\n"
        path = self.path(spec)
        write_atomically(path, text)
        self.error_path(spec).unlink(missing_ok=True)
        return path

    def save_error(self, spec: RunSpec, trace: str) -> Path:
        """Keep the traceback of ``spec``'s failure beside the runs, for the user to read."""
        path = self.error_path(spec)
        write_atomically(path, f"{spec.key()}\n\n{trace}")
        return path


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def merge(runs: Iterable[tuple[str, list[Row]]]) -> tuple[list[str], list[Row]]:
    """The merged table: every run's rows in the order of the runs' keys, each run's rows in
    their own order, with the key in :data:`RUN_COLUMN`; the columns are the run column, then
    every row's keys in first-seen order. Independent of the order in which runs finished."""
    columns: dict[str, None] = {RUN_COLUMN: None}
    table: list[Row] = []
    for key, rows in sorted(runs, key=lambda run: run[0]):
        for row in rows:
            columns.update(dict.fromkeys(row))
            table.append({RUN_COLUMN: key, **row})
    return list(columns), table


def to_csv(columns: list[str], table: list[Row]) -> str:
    """The merged table as CSV text (missing cells empty)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    return buffer.getvalue()


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
