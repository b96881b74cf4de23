"""The REST back-end: OAR 2.5's API (``/oarapi``), with requests.

Reads are ``/resources/details`` and the Gantt: ``oarstat --gantt``'s queries through the API's
read-only ``/select_all`` (:mod:`.gantt_sql`), or, where a site refuses those,
``/jobs/details`` over the Gantt's window (about ten SQL queries per job: 25 ms a job), page by
page. Writes
are ``POST /jobs`` and ``DELETE /jobs/{id}``; OAR's API runs ``oarsub``/``oardel`` itself and
returns what they printed, which :func:`.commands.refusal` sorts.

Identity: with ``auth = "ident"`` the API trusts ``X-Remote-Ident`` (it must sit behind a proxy
that sets it, never be exposed as such), so the bridge acts as each placeholder's owner and as
each job's user; with ``auth = "basic"``, as one account. The API answers a refused reservation
with 400, and some admission-rule refusals with 500: both carry oarsub's words.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import requests

from coorm_bridge.adapters.batch.backend import BatchFailure
from coorm_bridge.adapters.batch.names import check_name
from coorm_bridge.adapters.oar import commands, gantt_sql, parse
from coorm_bridge.adapters.oar.backend import OarBackend
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.adapters.oar.settings import OarRest
from coorm_bridge.core.batch import JobSpec, ReservationSpec

log = logging.getLogger(__name__)

#: HTTP statuses that mean no answer from OAR itself (a proxy's).
NO_ANSWER = frozenset({502, 503, 504})
#: Pages read at most (bounds a runaway pagination: 500 pages of 500 jobs).
MAX_PAGES = 500
#: The identities OAR's API takes as they are from X-Remote-Ident (see ``_headers``).
IDENT = re.compile(r"[A-Za-z0-9_]+")


def keep_tilde(script: str) -> str:
    """``script`` without ``/~/``, which oarapi.pl replaces with the user's home (its first one,
    in a script, a command or a working folder). In a job script every word with a ``~`` is
    single-quoted (:func:`shlex.quote`), where ``/~''/`` means ``/~/``."""
    while "/~/" in script:
        script = script.replace("/~/", "/~''/")
    return script


class OarRestBackend(OarBackend):
    def __init__(
        self,
        settings: OarRest,
        *,
        submit_as: str = "owner",
        timeout: float = 60,
        horizon: int = 30 * 86400,
        clock: Callable[[], float] = time.time,
        session: requests.Session | None = None,
    ) -> None:
        super().__init__(submit_as=submit_as, horizon=horizon, clock=clock)
        self.settings = settings
        self.timeout = timeout
        self.base = settings.url.rstrip("/")
        self.session = session or requests.Session()
        # Given with each request: requests lets $REQUESTS_CA_BUNDLE and $CURL_CA_BUNDLE
        # override a session's CA file, never a request's.
        self.verify = settings.verify if isinstance(settings.verify, bool) else str(settings.verify)
        if settings.auth == "basic":
            assert settings.user is not None
            assert settings.password_file is not None
            password = settings.password_file.read_text().strip()
            self.session.auth = (settings.user, password)
        self.reader = settings.user or (submit_as if submit_as != "owner" else "oar")
        """The identity reads are made as (OAR shows every user's jobs to anyone)."""
        self.sql = True
        """Whether the Gantt is read with the API's read-only query (:mod:`.gantt_sql`)."""

    # -- HTTP ---------------------------------------------------------------------------------

    def _headers(self, user: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.settings.auth == "ident" and user is not None:
            if not IDENT.fullmatch(user):
                # oarapi.pl: $authenticated_user =~ /(\w+)/, then acts as $1
                taken = re.search(r"[A-Za-z0-9_]+", user)
                raise BatchFailure(
                    "invalid_user",
                    f"OAR's REST API would act as {taken.group() if taken else ''!r} for "
                    f"{user!r}: it keeps the first run of letters, digits and '_' of "
                    "X-Remote-Ident (use the commands, backend = 'cli', for such users)",
                )
            headers["X-Remote-Ident"] = user
        return headers

    def _call(
        self, method: str, path: str, *, user: str | None = None, **kwargs: Any
    ) -> requests.Response:
        url = f"{self.base}/{path.lstrip('/')}"
        try:
            response = self.session.request(
                method,
                url,
                headers=self._headers(user),
                timeout=self.timeout,
                verify=self.verify,
                **kwargs,
            )
        except requests.RequestException as error:
            raise BatchFailure("unreachable", f"{method} {url}: {error}") from error
        if response.status_code in NO_ANSWER:
            raise BatchFailure("unreachable", f"{method} {url}: HTTP {response.status_code}")
        return response

    def _json(self, response: requests.Response) -> Any:
        try:
            return response.json()
        except ValueError as error:
            raise BatchFailure(
                "other", f"{response.request.method} {response.url}: not JSON: {error}"
            ) from error

    def _failure(self, response: requests.Response) -> BatchFailure:
        """What the API said, sorted like the commands' words (it passes them on)."""
        try:
            body = response.json()
            said = str(body.get("message") or body.get("title") or body)
        except ValueError:
            said = response.text[-600:]
        if response.status_code == 401 and "regarding the target user" in said:
            # oardodo does not know the user the API was to act as
            return BatchFailure("invalid_user", f"HTTP 401: {said}")
        if response.status_code in (401, 403):
            return BatchFailure("no_rights", f"HTTP {response.status_code}: {said}")
        if response.status_code == 404:
            return BatchFailure("no_such_job", f"HTTP 404: {said}")
        return commands.refusal(response.status_code, said, self.settings.timezone)

    def _pages(
        self, path: str, size: int | None = None, **params: str | int
    ) -> Iterator[dict[str, Any]]:
        """Every item of a paginated collection, ``size`` items a call (default: the
        settings' page)."""
        offset = 0
        for _ in range(MAX_PAGES):
            response = self._call(
                "GET",
                path,
                user=self.reader,
                params={**params, "limit": size or self.settings.page, "offset": offset},
            )
            if response.status_code != 200:
                raise self._failure(response)
            page = self._json(response)
            items = page.get("items") if isinstance(page, dict) else None
            if not isinstance(items, list):
                raise BatchFailure("other", f"{path}: no items in the answer")
            yield from (item for item in items if isinstance(item, dict))
            offset += len(items)
            total = page.get("total")
            if not items or not isinstance(total, int) or offset >= total:
                return
        raise BatchFailure("other", f"{path}: more than {MAX_PAGES} pages")

    # -- primitives ---------------------------------------------------------------------------

    def resource_rows(self) -> list[Mapping[str, Any]]:
        return list(self._pages("resources/details.json"))

    def whole(
        self, binding: OarBinding, now: int
    ) -> tuple[list[parse.Resource], list[parse.OarJob]]:
        resources = self.resources(binding)
        begin, end = max(0, now - 1), now + self.horizon
        if self.sql:
            try:
                query = gantt_sql.query(begin, end)
                rows = self._pages("select_all.json", gantt_sql.PAGE, query=query)
                return resources, gantt_sql.records(rows)
            except BatchFailure as failure:
                if failure.kind == "unreachable":
                    raise
                self.sql = False
                log.warning(
                    "OAR's API refused its read-only query (/select_all: %s): reading "
                    "/jobs/details instead, about 25 ms a job",
                    failure,
                )
        # The same window: without it, every waiting job OAR has not planned is detailed too.
        pages = self._pages("jobs/details.json", **{"from": begin, "to": end})
        return resources, [parse.record(item) for item in pages]

    def _post(self, body: dict[str, Any], user: str) -> str:
        response = self._call("POST", "jobs.json", user=user, json=body)
        if response.status_code not in (200, 201, 202):
            raise self._failure(response)
        answer = self._json(response)
        job_id = str(answer.get("id", "")) if isinstance(answer, dict) else ""
        return commands.check_job_id(job_id)

    def submit_reservation(self, binding: OarBinding, spec: ReservationSpec) -> str:
        body = {
            "resource": commands.resources(binding, spec.size, spec.end - spec.start),
            "reservation": commands.format_date(spec.start, self.settings.timezone),
            "type": list(commands.PLACEHOLDER_TYPES),
            "property": commands.selection(binding, spec.host_names),
            "name": check_name(spec.name, "reservation name"),
            "directory": commands.LAUNCHING_DIRECTORY,
            "command": commands.placeholder_command(spec.start),
        }
        try:
            return self._post(body, self.owner(spec.users))
        except BatchFailure as failure:
            raise self.as_owner(failure) from failure

    def submit_inner(self, binding: OarBinding, job: JobSpec, container: str) -> str:
        """As a ``script``, never a ``command``: OAR's API puts a command through two shells
        (``$`` and quotes in it are expanded at submission), while a script is written to a
        file in the working folder as it is (``oarapi.subscript.*``, left there) and run."""
        workdir = job.workdir or commands.LAUNCHING_DIRECTORY
        body = {
            "resource": commands.resources(binding, job.hosts, job.walltime),
            "type": [f"inner={commands.check_job_id(container)}"],
            "property": commands.selection(binding),
            "name": check_name(job.name, "job name"),
            "script": keep_tilde(commands.job_script(job)),
            "workdir": commands.check_folder(workdir),
        }
        return self._post(body, job.user)

    def delete_job(self, job: parse.OarJob) -> None:
        path = f"jobs/{commands.check_job_id(job.id)}.json"
        response = self._call("DELETE", path, user=job.owner or self.reader)
        if response.status_code in (200, 202) or response.status_code == 404:
            return
        failure = self._failure(response)
        if failure.kind != "no_such_job":
            raise failure

    def job(self, job_id: str) -> parse.OarJob | None:
        path = f"jobs/{commands.check_job_id(job_id)}.json"
        response = self._call("GET", path, user=self.reader)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._failure(response)
        data = self._json(response)
        return parse.record(data) if isinstance(data, dict) else None

    def close(self) -> None:
        self.session.close()
