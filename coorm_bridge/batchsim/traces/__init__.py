"""Two real Standard Workload Format traces, shipped so that experiments and platform files can
replay real load with nothing to download (Parallel Workloads Archive, cleaned versions):

- ``NASA-iPSC-1993-3.1-cln.swf.gz``: a 128-node Intel iPSC/860 at NASA Ames, 18,239 jobs, 1993;
- ``lublin_256.swf.gz``: 10,000 jobs of Lublin and Feitelson's model for a 256-node machine.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

#: Short names for the shipped traces.
TRACES = {
    "nasa": "NASA-iPSC-1993-3.1-cln.swf.gz",
    "lublin": "lublin_256.swf.gz",
}


def trace_path(name: str) -> Path:
    """The file of a shipped trace, by short name (``nasa``, ``lublin``)."""
    try:
        file = TRACES[name]
    except KeyError:
        raise LookupError(f"no shipped trace {name!r}; known: {', '.join(TRACES)}") from None
    return Path(str(files(__name__) / file))
