"""The README's samples against what the programs print: a sample line's varying parts (times,
ids, pids: each given as a pattern) match any value of their kind, ``...`` skips lines, and the
sample's lines must come in order (tests/daemon/test_readme.py, test_admin_walkthrough.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    """The README's text under ``title`` (a heading), up to the next heading."""
    start = README.index(f"\n{title}\n")
    following = re.search(r"\n#+ ", README[start + 1 :])
    return README[start : start + 1 + following.start() if following else None]


def pattern(line: str, varying: Sequence[str]) -> re.Pattern[str]:
    """A sample line as a pattern: its varying parts match any such value."""
    found = re.compile("|".join(f"(?:{v})" for v in varying))
    parts, last = [], 0
    for match in found.finditer(line):
        parts.append(re.escape(line[last : match.start()]))
        kind = next(v for v in varying if re.fullmatch(v, match.group()))
        parts.append(f"(?:{kind})")
        last = match.end()
    parts.append(re.escape(line[last:]))
    return re.compile("".join(parts))


def unmatched(sample: Sequence[str], printed: Sequence[str], varying: Sequence[str]) -> list[str]:
    """The sample lines (``...`` skips any lines) that the printed lines do not show, in order."""
    missing, at = [], 0
    for line in sample:
        if line.strip() == "...":
            continue
        wanted = pattern(line, varying)
        found = next((k for k in range(at, len(printed)) if wanted.fullmatch(printed[k])), None)
        if found is None:
            missing.append(line)
        else:
            at = found + 1
    return missing
