"""The slurmrestd back-end: reads through Slurm's REST API, writes through the commands.

One RestBackend talks to one slurmrestd (one controller): one ``[adapter.rest]`` per adapter. -M
is not a REST concept: a binding with ``cluster`` set is refused (multi-cluster needs the ``cli``
back-end); the bindings' ``slurm_conf`` must be slurmrestd's controller's (the writes use it).

Transport: ``unix:///path`` (rest_auth/local trusts the socket's peer: no token sent) or
``http(s)://host:port`` (rest_auth/jwt) with X-SLURM-USER-NAME (``user``, else the JWT's ``sun``)
and X-SLURM-USER-TOKEN, read from ``token_file`` (bare or ``SLURM_JWT=...``) at every request: a
renewed token is used at once, and 22.05 answers an expired one with HTTP 500, not 401.

Versions: at first use ``/openapi/v3`` lists the ``slurm/v0.0.NN`` the server offers; the highest
in :data:`DIALECTS` is used (22.05: v0.0.38 or v0.0.37, whose jobs and nodes have the shapes of
``squeue``/``sinfo --json``, read by :mod:`.parse`). A newer version is one more :class:`Dialect`
once its answers are checked against the parsers (they read the v0.0.39+ shapes already).

Writes go to the given :class:`.SlurmCliBackend`: the REST API before v0.0.43 cannot write
reservations, and sbatch/scancel keep the semantics the bridge relies on. ``job_state`` is a read
of ``job/{id}``, but for array tasks (``12_3``: 22.05 reads the whole array), left to the commands.

Failures: no answer (refused, no socket, timeout, HTTP 502-504) is "unreachable"; HTTP 401/403 is
"other", naming the token; ``errors`` arrays are classified by :func:`.answers.classify_error`.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import quote, urlsplit

import requests
from requests_unixsocket.adapters import UnixAdapter

from coorm_bridge.adapters.batch.backend import Backend, BatchFailure, ErrorKind, Hardware
from coorm_bridge.adapters.slurm import answers, parse
from coorm_bridge.adapters.slurm.binding import SlurmBinding
from coorm_bridge.adapters.slurm.hardware import hardware_of
from coorm_bridge.adapters.slurm.settings import RestSettings
from coorm_bridge.core.batch import Job, JobSpec, JobState, Node, Reservation, ReservationSpec
from coorm_bridge.core.rules import ClusterRules

T = TypeVar("T")

_VERSION: Final = re.compile(r"^/slurm/v0\.0\.([0-9]+)/")
_NO_ANSWER: Final = frozenset({502, 503, 504})
_NO_CLUSTERS: Final = (
    "{binding.name}: cluster = {binding.cluster!r} (-M) cannot be reached through slurmrestd, "
    "which serves one controller: use backend = 'cli' for multi-cluster setups"
)


@dataclass(frozen=True)
class Dialect:
    """One version of slurmrestd's slurm API: where each answer is (paths after ``slurm/vX/``)."""

    version: str
    jobs: str = "jobs"
    nodes: str = "nodes"
    reservations: str = "reservations"
    reservation: str = "reservation/{name}"
    job: str = "job/{job_id}"

    def path(self, template: str, **names: str) -> str:
        quoted = {key: quote(value, safe="") for key, value in names.items()}
        return f"slurm/{self.version}/{template.format(**quoted)}"


#: The versions read, by their last number (Slurm 22.05 offers 37 and 38).
DIALECTS: Final[Mapping[int, Dialect]] = {n: Dialect(f"v0.0.{n}") for n in (37, 38)}


class _SocketAdapter(UnixAdapter):
    """One connection pool per socket (the library keys its pools by the full URL)."""

    def get_connection(self, url: str | bytes, proxies: Mapping[str, str] | None = None) -> Any:
        parts = urlsplit(url.decode() if isinstance(url, bytes) else url)
        return super().get_connection(f"{parts.scheme}://{parts.netloc}/", proxies)  # type: ignore[no-untyped-call]


class RestBackend(Backend[SlurmBinding]):
    def __init__(
        self, settings: RestSettings, cli: Backend[SlurmBinding], timeout: float = 30
    ) -> None:
        self.settings = settings
        self.cli = cli
        self.timeout = timeout
        self._unix = settings.url.startswith("unix://")
        self._http = requests.Session()
        if self._unix:
            self._base = f"http+unix://{quote(settings.url.removeprefix('unix://'), safe='')}"
            self._http.mount("http+unix://", _SocketAdapter(timeout=timeout))  # type: ignore[no-untyped-call]
            self._http.trust_env = False  # no proxy for a socket (UnixAdapter refuses them)
        else:
            self._base = settings.url.rstrip("/")
        self._dialect: Dialect | None = None
        self._lock = threading.Lock()

    # -- reading ------------------------------------------------------------------------------

    def dialect(self, binding: SlurmBinding | None = None) -> Dialect:
        """The API version used, detected at first use (a binding with -M is refused)."""
        if binding is not None:
            self._commands(binding)
        with self._lock:
            if self._dialect is None:
                self._dialect = self._detect()
            return self._dialect

    def _detect(self) -> Dialect:
        paths = (self._document("openapi/v3") or {}).get("paths")
        offered = sorted({int(m.group(1)) for p in paths or () if (m := _VERSION.match(str(p)))})
        usable = [n for n in offered if n in DIALECTS]
        if not usable:
            have = ", ".join(f"v0.0.{n}" for n in offered) or "no slurm/v0.0.NN API"
            want = ", ".join(d.version for d in DIALECTS.values())
            message = f"slurmrestd {self.settings.url} offers {have}; this bridge reads {want}"
            raise BatchFailure("other", message)
        return DIALECTS[max(usable)]

    def hardware(self, binding: SlurmBinding) -> Hardware:
        d = self.dialect(binding)
        nodes = (self._document(d.path(d.nodes)) or {}).get("nodes") or []
        return _checked(d.nodes, lambda: hardware_of(nodes, binding.partition, binding.cluster))

    def read(
        self, binding: SlurmBinding, now: int
    ) -> tuple[list[Node], list[Job], list[Reservation]]:
        d, p = self.dialect(binding), binding.partition
        nodes = _checked(d.nodes, lambda: parse.parse_sinfo(self._get(d.path(d.nodes)), p))
        jobs = _checked(d.jobs, lambda: parse.parse_squeue(self._get(d.path(d.jobs)), p, now=now))
        document, names = self._document(d.path(d.reservations)) or {}, {n.name for n in nodes}
        reservations = _checked(d.reservations, lambda: parse_reservations(document, p, names))
        return nodes, jobs, reservations

    def reservation(self, binding: SlurmBinding, name: str) -> Reservation | None:
        d = self.dialect(binding)
        path = d.path(d.reservation, name=name)
        document = self._document(path, missing="no_such_reservation") or {}
        found = _checked(path, lambda: parse_reservations(document))
        return next((r for r in found if r.name == name), None)

    def job_state(self, binding: SlurmBinding, job_id: str) -> JobState:
        d = self.dialect(binding)
        if not (job_id.isascii() and job_id.isdigit()):  # an array task, or invalid: commands
            return self.cli.job_state(binding, job_id)
        # Not found: long finished, Slurm has forgotten it (as the commands' job_state).
        document = self._document(d.path(d.job, job_id=job_id), missing="no_such_job") or {}
        jobs = document.get("jobs") or ()
        rows = [j for j in jobs if str(parse.number(j.get("job_id"))) == job_id]
        return parse.job_state_of(rows[0].get("job_state")) if rows else JobState.UNKNOWN

    # -- writing: the commands (before v0.0.43, slurmrestd cannot write reservations) ---------

    def _commands(self, binding: SlurmBinding) -> Backend[SlurmBinding]:
        if binding.cluster is not None:
            raise BatchFailure("other", _NO_CLUSTERS.format(binding=binding))
        return self.cli

    def create_reservation(self, binding: SlurmBinding, spec: ReservationSpec) -> None:
        self._commands(binding).create_reservation(binding, spec)

    def update_reservation(
        self, binding: SlurmBinding, spec: ReservationSpec, *, begun: bool = False
    ) -> None:
        self._commands(binding).update_reservation(binding, spec, begun=begun)

    def delete_reservation(self, binding: SlurmBinding, name: str) -> None:
        self._commands(binding).delete_reservation(binding, name)

    def submit(self, binding: SlurmBinding, job: JobSpec) -> str:
        return self._commands(binding).submit(binding, job)

    def cancel(self, binding: SlurmBinding, job_id: str) -> None:
        self._commands(binding).cancel(binding, job_id)

    def check_rights(self, binding: SlurmBinding) -> None:
        self._commands(binding).check_rights(binding)

    def rules(self, binding: SlurmBinding) -> ClusterRules:
        """Read by the commands, as the writes are: slurmrestd 22.05 serves partitions but its
        slurmdb API (associations, QOS, users) only where slurmrestd was started with
        ``openapi/dbv0.0.38`` and slurmdbd, and never ``AccountingStorageEnforce``."""
        return self._commands(binding).rules(binding)

    def close(self) -> None:
        self._http.close()
        self.cli.close()

    # -- HTTP ---------------------------------------------------------------------------------

    def _get(self, path: str) -> bytes:
        where = f"slurmrestd {self.settings.url}: GET {path}"
        try:
            answer = self._http.get(f"{self._base}/{path}", headers=self._headers(),
                                    timeout=self.timeout)  # fmt: skip
        except requests.exceptions.SSLError as error:
            raise BatchFailure("other", f"{where}: TLS failure: {error}") from error
        except (requests.ConnectionError, requests.Timeout) as error:
            raise BatchFailure("unreachable", f"{where}: no answer: {error}") from error
        except requests.RequestException as error:
            raise BatchFailure("other", f"{where}: {error}") from error
        status = answer.status_code
        if status in (401, 403):
            raise BatchFailure("other", f"{where}: HTTP {status}, credentials refused: "
                                        f"{self._credentials()}")  # fmt: skip
        if status < 300:
            return answer.content
        try:
            message = _errors(json.loads(answer.content))
        except ValueError:
            message = ""
        message = message or answer.text[:200].strip() or answer.reason or "no message"
        if not self._unix and "Unspecified error" in message:
            message += f" (also 22.05's answer to a bad or expired JWT: {self._credentials()})"
        kind = "unreachable" if status in _NO_ANSWER else answers.classify_error(message)
        raise BatchFailure(kind, f"{where}: HTTP {status}: {message}")

    def _document(self, path: str, missing: ErrorKind | None = None) -> dict[str, Any] | None:
        """A small JSON answer, its ``errors`` raised; None for a failure of kind ``missing``."""
        try:
            document = _checked(path, lambda: json.loads(self._get(path)))
            if message := _errors(document):
                raise BatchFailure(answers.classify_error(message), f"slurmrestd {path}: {message}")
        except BatchFailure as failure:
            if failure.kind != missing:
                raise
            return None
        if not isinstance(document, dict):
            raise BatchFailure("other", f"slurmrestd {path}: the answer is not an object")
        return document

    def _headers(self) -> dict[str, str]:
        """JWT headers over TCP (the token read now: it may have been renewed)."""
        path = self.settings.token_file
        if self._unix or path is None:
            return {}
        try:
            token = path.read_text().strip().removeprefix("SLURM_JWT=").strip()
        except OSError as error:
            raise BatchFailure("other", f"[adapter.rest] token_file {path}: {error}") from error
        user = self.settings.user or _token_user(token)
        return {"X-SLURM-USER-TOKEN": token} | ({"X-SLURM-USER-NAME": user} if user else {})

    def _credentials(self) -> str:
        if self._unix:
            return "slurmrestd (rest_auth/local) does not accept this process's user"
        if self.settings.token_file is None:
            return "[adapter.rest] has no token_file (a JWT from 'scontrol token')"
        return f"check the JWT in {self.settings.token_file} (renew it with 'scontrol token')"


def parse_reservations(
    document: Mapping[str, Any], partition: str | None = None, nodes: Iterable[str] | None = None
) -> list[Reservation]:
    """The ``reservations`` of an answer, kept as :func:`.parse.parse_reservations` keeps them:
    with a partition, those made in it or holding any of ``nodes``; never those with no node."""
    wanted = set(nodes) if nodes is not None else set()
    reservations: list[Reservation] = []
    for row in document.get("reservations") or ():
        found = parse.reservation_of(
            str(row.get("name") or ""),
            row.get("node_list"),
            row.get("node_count"),
            parse.number(row.get("start_time")),
            parse.number(row.get("end_time")),
            str(row.get("users") or ""),
            in_partition=partition is None or row.get("partition") == partition,
            nodes=wanted,
            source="slurmrestd",
        )
        if found is not None:
            reservations.append(found)
    return reservations


def _errors(document: Any) -> str:
    """The messages of an answer's ``errors`` array ("" when none)."""
    errors = document.get("errors") if isinstance(document, dict) else None
    texts = []
    for error in errors if isinstance(errors, list) else [errors] if errors else []:
        fields = error if isinstance(error, dict) else {}
        parts = dict.fromkeys(str(fields[k]) for k in ("description", "error") if fields.get(k))
        texts.append(": ".join(parts) or str(error))
    return "; ".join(texts)


def _checked(what: str, parsing: Callable[[], T]) -> T:
    """A parser's ValueError as a BatchFailure (classified: it may quote Slurm's errors)."""
    try:
        return parsing()
    except ValueError as error:
        message = f"slurmrestd {what}: {error}"
        raise BatchFailure(answers.classify_error(str(error)), message) from error


def _token_user(token: str) -> str | None:
    """The user name (``sun`` claim) of a Slurm JWT, None when unreadable."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):  # binascii.Error and UnicodeDecodeError are ValueErrors
        return None
    user = claims.get("sun") if isinstance(claims, dict) else None
    return user if isinstance(user, str) and user else None
