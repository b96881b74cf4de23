"""OAR's Gantt through its REST API in one read-only query, as ``oarstat --gantt`` reads it.

``/jobs/details`` costs OAR about ten SQL queries and a database connection per job (13 to
27 s for a 2,000-job queue, against 0.16 s for ``oarstat -J --gantt``). The API's
``/select_all`` runs one read-only ``SELECT * FROM ...`` on OAR's database instead: this one
joins the two queries behind ``oarstat --gantt`` (``get_jobs_future_from_range`` and
``get_jobs_past_and_current_from_range`` of OAR 2.5's ``OAR::IO``), one row per job, resource
and type, ``planned`` telling them apart, with the advance-reservation flag besides (the Gantt
lacks it). The query is a constant; only the window's two integers are put in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coorm_bridge.adapters.oar.parse import OarJob

#: Jobs OAR's last scheduler pass placed in the window (its predictions, ``planned`` 1), then
#: jobs that run, or ran, in the window (their assigned resources, ``planned`` 0).
GANTT = """FROM (
  SELECT jobs.job_id, jobs.job_name, jobs.state, jobs.job_user, jobs.command,
    jobs.queue_name, jobs.reservation, jobs.exit_code,
    moldable_job_descriptions.moldable_walltime AS walltime,
    gantt_jobs_predictions_visu.start_time, resources.network_address, job_types.type,
    1 AS planned
  FROM (jobs LEFT JOIN job_types ON job_types.job_id = jobs.job_id),
    moldable_job_descriptions, gantt_jobs_predictions_visu, gantt_jobs_resources_visu, resources
  WHERE gantt_jobs_predictions_visu.moldable_job_id = gantt_jobs_resources_visu.moldable_job_id
    AND gantt_jobs_predictions_visu.moldable_job_id = moldable_job_descriptions.moldable_id
    AND jobs.job_id = moldable_job_descriptions.moldable_job_id
    AND gantt_jobs_resources_visu.resource_id = resources.resource_id
    AND gantt_jobs_predictions_visu.start_time < {end}
    AND gantt_jobs_predictions_visu.start_time + moldable_job_descriptions.moldable_walltime
      >= {begin}
  UNION ALL
  SELECT jobs.job_id, jobs.job_name, jobs.state, jobs.job_user, jobs.command,
    jobs.queue_name, jobs.reservation, jobs.exit_code,
    moldable_job_descriptions.moldable_walltime AS walltime, jobs.start_time,
    resources.network_address, job_types.type,
    0 AS planned
  FROM (jobs LEFT JOIN job_types ON job_types.job_id = jobs.job_id),
    assigned_resources, moldable_job_descriptions, resources
  WHERE (jobs.stop_time >= {begin} OR (jobs.stop_time = '0'
      AND jobs.state IN ('Running', 'Suspended', 'Resuming')))
    AND jobs.start_time < {end}
    AND jobs.assigned_moldable_job = moldable_job_descriptions.moldable_id
    AND moldable_job_descriptions.moldable_id = assigned_resources.moldable_job_id
    AND assigned_resources.resource_id = resources.resource_id
  ORDER BY planned DESC, job_id
) AS gantt"""
#: Rows a page of the query's answer holds (one row per job, resource and type: a 2,000-job
#: queue of which OAR placed 92 makes about 400).
PAGE = 10_000


def query(begin: int, end: int) -> str:
    """The Gantt's query over ``[begin, end)`` (Unix seconds)."""
    if isinstance(begin, bool) or isinstance(end, bool) or not 0 <= begin <= end:
        raise ValueError(f"invalid Gantt window [{begin}, {end})")
    return GANTT.format(begin=int(begin), end=int(end))


def records(rows: Iterable[Mapping[str, Any]]) -> list[OarJob]:
    """Each job once, from its rows: OAR's prediction where it has one (as ``oarstat --gantt``,
    a job planned and running is taken from the Gantt), else its assignment."""
    planned: dict[str, _Rows] = {}
    current: dict[str, _Rows] = {}
    for row in rows:
        job_id = str(row.get("job_id", ""))
        if not job_id.isdigit():
            raise ValueError(f"an OAR job without an id: {str(row)[:200]}")
        book = planned if str(row.get("planned")) == "1" else current
        book.setdefault(job_id, _Rows(row)).add(row)
    jobs = {**current, **planned}
    return [rows.record(job_id) for job_id, rows in sorted(jobs.items(), key=lambda j: int(j[0]))]


class _Rows:
    """One job's rows: its fields once, its addresses and types gathered."""

    def __init__(self, first: Mapping[str, Any]) -> None:
        self.first = first
        self.addresses: dict[str, None] = {}
        self.types: dict[str, None] = {}

    def add(self, row: Mapping[str, Any]) -> None:
        if row.get("network_address"):
            self.addresses[str(row["network_address"])] = None
        if row.get("type"):
            self.types[str(row["type"])] = None

    def record(self, job_id: str) -> OarJob:
        raw = self.first
        start, walltime = _number(raw.get("start_time")), _number(raw.get("walltime"))
        exit_code = raw.get("exit_code")
        return OarJob(
            id=job_id,
            name=None if raw.get("job_name") is None else str(raw["job_name"]),
            owner=str(raw.get("job_user") or ""),
            state=str(raw.get("state", "")),
            types=tuple(self.types),
            reservation=str(raw.get("reservation") or "None"),
            start=start if start else None,
            walltime=walltime,
            addresses=tuple(self.addresses),
            queue=str(raw.get("queue_name") or "default"),
            exit_code=exit_code if isinstance(exit_code, int) else None,
            command=str(raw.get("command") or ""),
        )


def _number(value: object) -> int:
    """An integer column (the API may pass numbers as strings)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else 0
