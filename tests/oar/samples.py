"""What the fast OAR tests share: the answers recorded from OAR 2.5.9 (tests/data/oar/, see its
README.md), the clusters alpha and beta they were recorded on, and a Runner that answers OAR's
commands from recorded outputs and records what it was asked to run."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.oar.binding import OarBinding

DATA = Path(__file__).resolve().parent.parent / "data" / "oar"

ALPHA = OarBinding("alpha", value="alpha")
BETA = OarBinding("beta", value="beta")

#: When oarstat_J_gantt.json (and rest_jobs_details.json, oarstat_J_f.json) were recorded:
#: jobs 15, 16, 18, 19 and 20 running, 17, 21, 22, 24 and 25 waiting.
GANTT_NOW = 1795502940
#: When oarnodes_J.json and jobs_details.json (the first recording) were made.
DETAILS_NOW = 1795230467


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def text(name: str) -> str:
    return (DATA / name).read_text()


@dataclass(frozen=True)
class Http:
    """A recorded HTTP answer (``curl -i``): status, headers, body."""

    status: int
    headers: dict[str, str]
    body: str


def http(name: str) -> Http:
    head, _, body = text(name).partition("\n\n")
    status_line, *lines = head.splitlines()
    headers = dict(line.split(": ", 1) for line in lines)
    return Http(int(status_line.split()[1]), headers, body.strip())


def command(name: str) -> Completed:
    """A recorded command's answer (``oarsub_*.json``, ``oardel_*.json``)."""
    recorded = load(name)
    return Completed(recorded["exit_code"], recorded["stdout"], recorded["stderr"])


def said(name: str) -> tuple[int, str]:
    """A recorded command's exit status and everything it printed, as the back-end joins it."""
    done = command(name)
    return done.returncode, f"{done.stdout}\n{done.stderr}"


def gantt() -> dict[str, Any]:
    """A fresh copy of ``oarstat -J --gantt`` (tests may change it)."""
    return copy.deepcopy(load("oarstat_J_gantt.json"))


def details_page(items: Sequence[Mapping[str, Any]], total: int, offset: int = 0) -> dict[str, Any]:
    """A page of the REST API's collections, as OAR 2.5.9 shapes it."""
    return {
        "api_timestamp": GANTT_NOW,
        "items": list(items),
        "links": [{"href": "/oarapi/jobs/details.json?offset=0", "rel": "self"}],
        "offset": offset,
        "total": total,
    }


def resources_details() -> list[dict[str, Any]]:
    """``/resources/details``'s items for the gantt's instance: the same rows of the resources
    table, with ``resource_id`` renamed ``id`` as the API does (oarapi.pl, fix_resource_ids)."""
    items = []
    for row in load("oarstat_J_gantt.json")["resources"]:
        item = {k: v for k, v in row.items() if k != "resource_id"}
        item["id"] = row["resource_id"]
        items.append(item)
    return items


class Recorded(Runner):
    """OAR's commands answered from recorded outputs by the command's name (after any
    ``runuser -u USER --``); records every argument vector and checks that each runs in UTC."""

    def __init__(self, answers: Mapping[str, Completed]) -> None:
        self.answers = dict(answers)
        self.calls: list[tuple[str, ...]] = []

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        assert (env or {}).get("TZ") == "UTC", "OAR reads and prints dates in TZ"
        self.calls.append(tuple(argv))
        return self.answers[argv[4] if argv[0] == "runuser" else argv[0]]


def ok(stdout: str = "") -> Completed:
    return Completed(0, stdout, "")
