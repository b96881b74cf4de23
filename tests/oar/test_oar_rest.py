"""The OAR REST back-end (``/oarapi``) on answers recorded from OAR 2.5.9's API (``responses``):
pages, identities, request bodies, and OAR's refusals as the adapter's errors."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import responses
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from responses import matchers

from coorm_bridge.adapters.batch.backend import BatchFailure
from coorm_bridge.adapters.oar import commands, parse, rest_backend
from coorm_bridge.adapters.oar.adapter import OarAdapter
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.adapters.oar.rest_backend import OarRestBackend
from coorm_bridge.adapters.oar.settings import OarRest, OarSettings
from coorm_bridge.core.batch import (
    AdapterError,
    JobSpec,
    JobState,
    LacksRights,
    NotPermitted,
    Refused,
    ReservationSpec,
    Unavailable,
)
from tests.oar.samples import ALPHA, BETA, GANTT_NOW, details_page, http, load, resources_details
from tests.profiles import fewer

URL = "http://oar.example/oarapi"
#: An hour from the recording, on alpha-1 and alpha-2 (free then).
SPEC = ReservationSpec(
    name="coorm-7",
    start=GANTT_NOW + 3600,
    end=GANTT_NOW + 5400,
    host_names=("alpha-2", "alpha-1"),
    users=("coorm_alice", "coorm_bob"),
)


@pytest.fixture
def mocked() -> Iterator[responses.RequestsMock]:
    """Every request must match a registered answer (others raise ConnectionError)."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


def backend(**rest: Any) -> OarRestBackend:
    submit_as = rest.pop("submit_as", "owner")
    return OarRestBackend(
        OarRest(url=URL, **rest), submit_as=submit_as, timeout=5, clock=lambda: GANTT_NOW
    )


class At(OarAdapter):
    """The adapter at the time of the recording."""

    def now(self) -> int:
        return GANTT_NOW


def adapter(**rest: Any) -> At:
    settings = OarSettings.model_validate(
        {
            "kind": "oar",
            "backend": "rest",
            "cluster": [{"name": "alpha"}, {"name": "beta"}],
            "rest": {"url": URL, **rest},
        }
    )
    assert settings.rest is not None
    return At(settings, OarRestBackend(settings.rest, timeout=5, clock=lambda: GANTT_NOW))


def serve(rsps: responses.RequestsMock) -> None:
    """The recorded server: its resources and its jobs, each on one page; its proxy does not
    pass the read-only queries (/select_all), so the jobs are read in detail."""
    resources = resources_details()
    rsps.get(f"{URL}/resources/details.json", json=details_page(resources, len(resources)))
    rsps.get(f"{URL}/select_all.json", status=404, json={"code": 404, "message": "Not Found"})
    rsps.get(f"{URL}/jobs/details.json", json=load("rest_jobs_details.json"))


def recorded(rsps: responses.RequestsMock, method: str, path: str, name: str) -> None:
    """Answer ``method path`` with a recorded HTTP answer."""
    answer = http(name)
    rsps.add(method, f"{URL}/{path}", body=answer.body, status=answer.status,
             content_type="application/json")  # fmt: skip


def sent(call: Any) -> dict[str, Any]:
    return json.loads(call.request.body)


# --- pages ---------------------------------------------------------------------------------------


def test_pages_are_read_until_the_total(mocked: responses.RequestsMock) -> None:
    items = load("rest_jobs_details.json")["items"]
    for offset in (0, 4, 8):
        mocked.get(
            f"{URL}/jobs/details.json",
            json=details_page(items[offset : offset + 4], len(items), offset),
            match=[matchers.query_param_matcher({"limit": "4", "offset": str(offset)})],
        )
    read = list(backend(page=4)._pages("jobs/details.json"))
    assert [item["id"] for item in read] == [item["id"] for item in items]
    assert len(mocked.calls) == 3  # 4 + 4 + 2 of 10: no fourth request


def test_an_empty_page_or_no_total_ends_the_reading(mocked: responses.RequestsMock) -> None:
    items = load("rest_jobs_details.json")["items"]
    mocked.get(f"{URL}/a.json", json=details_page(items[:4], 1000),
               match=[matchers.query_param_matcher({"limit": "4", "offset": "0"})])  # fmt: skip
    mocked.get(f"{URL}/a.json", json=details_page([], 1000, 4),
               match=[matchers.query_param_matcher({"limit": "4", "offset": "4"})])  # fmt: skip
    assert len(list(backend(page=4)._pages("a.json"))) == 4
    mocked.get(f"{URL}/b.json", json={"items": items[:4]})
    assert len(list(backend(page=4)._pages("b.json"))) == 4
    assert len(mocked.calls) == 3


def test_a_runaway_pagination_is_bounded(
    mocked: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rest_backend, "MAX_PAGES", 3)
    items = load("rest_jobs_details.json")["items"]
    mocked.get(f"{URL}/resources/details.json", json=details_page(resources_details(), 32))
    mocked.get(f"{URL}/select_all.json", json=details_page([{"job_id": 1}], 10**6))
    mocked.get(f"{URL}/jobs/details.json", json=details_page(items[:1], 10**6))
    with pytest.raises(BatchFailure, match="more than 3 pages"):
        backend().whole(ALPHA, GANTT_NOW)
    with pytest.raises(Unavailable, match=r"alpha: .*more than 3 pages"):
        adapter().snapshot(["alpha"])


def test_a_page_without_items_is_not_an_answer(mocked: responses.RequestsMock) -> None:
    mocked.get(f"{URL}/jobs/details.json", json={"message": "?"})
    with pytest.raises(BatchFailure, match="no items") as failure:
        list(backend()._pages("jobs/details.json"))
    assert failure.value.kind == "other"


def test_the_snapshot_is_the_recorded_servers(mocked: responses.RequestsMock) -> None:
    serve(mocked)
    shot = adapter().snapshot()
    beta = shot.clusters["beta"]
    assert [r.name for r in beta.reservations] == ["container_now", "container_later"]
    assert [(j.id, j.reservation) for j in beta.jobs] == [
        ("15", None), ("19", "container_now"), ("20", "container_now"), ("22", "container_later"),
    ]  # fmt: skip
    assert [r.name for r in shot.clusters["alpha"].reservations] == ["oar-24", "oar-25"]
    # one read of the server for both clusters, the refused query tried once only
    assert [c.request.path_url.split("?")[0] for c in mocked.calls] == [
        "/oarapi/resources/details.json", "/oarapi/select_all.json", "/oarapi/jobs/details.json"
    ]  # fmt: skip


# --- identities ----------------------------------------------------------------------------------


def test_writes_are_made_as_the_owner_and_reads_as_the_reader(
    mocked: responses.RequestsMock,
) -> None:
    serve(mocked)
    recorded(mocked, "POST", "jobs.json", "post_resa.txt")
    recorded(mocked, "DELETE", "jobs/18.json", "delete_resa.txt")
    rest = backend()
    assert rest.submit_reservation(ALPHA, SPEC) == "14"
    rest.delete_reservation(BETA, "container_now")  # job 18, coorm_alice's
    rest.whole(ALPHA, GANTT_NOW)
    idents = [(c.request.method, c.request.headers.get("X-Remote-Ident")) for c in mocked.calls]
    assert idents[0] == ("POST", "coorm_alice")  # the first user owns the placeholder
    assert ("DELETE", "coorm_alice") in idents
    assert {ident for method, ident in idents if method == "GET"} == {"oar"}


def test_one_account_may_own_every_placeholder(mocked: responses.RequestsMock) -> None:
    recorded(mocked, "POST", "jobs.json", "post_resa.txt")
    mocked.get(f"{URL}/jobs/6.json", json=load("job6_resa.json"))
    rest = backend(submit_as="coorm")
    rest.submit_reservation(ALPHA, SPEC)
    rest.job("6")
    assert [c.request.headers["X-Remote-Ident"] for c in mocked.calls] == ["coorm", "coorm"]


def test_basic_authentication_with_a_password_file(
    mocked: responses.RequestsMock, tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret:x\n")
    recorded(mocked, "POST", "jobs.json", "post_resa.txt")
    mocked.get(f"{URL}/jobs/6.json", json=load("job6_resa.json"))
    rest = backend(auth="basic", user="coorm", password_file=secret)
    rest.submit_reservation(ALPHA, SPEC)
    rest.job("6")
    expected = "Basic " + base64.b64encode(b"coorm:s3cret:x").decode()
    for call in mocked.calls:
        assert call.request.headers["Authorization"] == expected
        assert "X-Remote-Ident" not in call.request.headers


@pytest.mark.parametrize("user", ["coorm-bob", "alice.smith", "bob@example.org", "HOST$"])
def test_a_user_the_api_would_take_for_another_is_refused(
    mocked: responses.RequestsMock, user: str
) -> None:
    """OAR's API acts as the first run of letters, digits and '_' of X-Remote-Ident (oarapi.pl:
    ``$authenticated_user =~ /(\\w+)/``): "alice.smith" would submit as "alice"."""
    spec = SPEC.model_copy(update={"users": (user,)})
    with pytest.raises(BatchFailure, match="X-Remote-Ident") as failure:
        backend().submit_reservation(ALPHA, spec)
    assert failure.value.kind == "invalid_user"
    assert not mocked.calls
    serve(mocked)
    with pytest.raises(NotPermitted, match=user.replace("$", r"\$")):
        adapter().create_reservation("alpha", spec)


# --- requests ------------------------------------------------------------------------------------


def test_the_body_of_a_placeholder(mocked: responses.RequestsMock) -> None:
    recorded(mocked, "POST", "jobs.json", "post_resa.txt")
    assert backend(timezone="Europe/Paris").submit_reservation(ALPHA, SPEC) == "14"
    (call,) = mocked.calls
    assert call.request.url == f"{URL}/jobs.json"
    assert sent(call) == {
        "resource": "/host=2,walltime=0:30:00",
        "reservation": "2026-11-24 08:49:00",  # GANTT_NOW + 1 h (06:49 UTC), in Paris
        "type": ["container", "noop"],
        "property": "cluster='alpha' AND host IN ('alpha-1','alpha-2')",
        "name": "coorm-7",
        "directory": "/tmp",
        "command": f"coorm-placeholder start={SPEC.start}",
    }


def test_the_body_of_an_inner_job(mocked: responses.RequestsMock) -> None:
    serve(mocked)
    recorded(mocked, "POST", "jobs.json", "post_batch.txt")
    job = JobSpec(name="app-1", user="coorm_bob", argv=("/bin/echo", "hello world"), hosts=1,
                  walltime=600, reservation="container_now", environment={"V": "1"})  # fmt: skip
    assert adapter().submit("beta", job) == "15"
    post = mocked.calls[-1]
    assert post.request.headers["X-Remote-Ident"] == "coorm_bob"
    assert sent(post) == {
        "resource": "/host=1,walltime=0:10:00",
        "type": ["inner=18"],
        "property": "cluster='beta'",
        "name": "app-1",
        "script": "#!/bin/sh\nexport V=1\nexec /bin/echo 'hello world'\n",
        "workdir": "/tmp",
    }
    with pytest.raises(AdapterError, match="invalid working folder"):
        adapter().submit("beta", job.model_copy(update={"workdir": "/home/bob/$(id)"}))


def test_names_are_checked_before_any_request(mocked: responses.RequestsMock) -> None:
    for bad in (
        ReservationSpec.model_construct(**{**dict(SPEC), "name": "x'; DROP"}),
        ReservationSpec.model_construct(**{**dict(SPEC), "host_names": ("alpha-1", "a') OR ('")}),
    ):
        with pytest.raises(ValueError, match="invalid"):
            backend().submit_reservation(ALPHA, bad)
    with pytest.raises(ValueError, match="invalid"):
        backend().submit_reservation(OarBinding("x", value="a' OR '1"), SPEC)
    assert not mocked.calls


# POST /jobs as OAR 2.5.9's oarapi.pl carries it out, with oarsub replaced by a program that
# prints its arguments (and oardodo left out): each option goes in double quotes into the line
# run by ``bash -c "cd WORKDIR && oarsub ..."``, itself run by Perl's backquotes (/bin/sh); a
# script is written as it is to a file copied into WORKDIR, oarsub's command being ./that-file.
# "/~/" is the user's home in a command, a script and a workdir (once).
API = r"""
use strict; use warnings; use JSON::PP; use File::Temp qw(tempfile); use File::Basename;
my ($OARSUB_CMD, $HOME, $TMPDIR) = @ARGV;
local $/; my $job = decode_json(<STDIN>);
my $oarcmd = "$OARSUB_CMD ";
my $workdir = $HOME;
my $command = "";
my $script = "";
foreach my $option ( sort keys( %{$job} ) ) {
  if ($option eq "command") {
    $job->{command} =~ s/(\\*)"/$1$1\\"/g;
    $command = " \"$job->{command}\"";
    $command =~ s|/~/|$HOME/|;
  }
  elsif ($option eq "script") {
    $script = $job->{script};
    $script =~ s|/~/|$HOME/|;
  }
  elsif ($option eq "workdir") {
    $workdir = $job->{workdir};
    $workdir =~ s|/~/|$HOME/|;
  }
  elsif (ref($job->{$option}) eq "ARRAY") {
    foreach my $elem (@{$job->{$option}}) {
      $oarcmd .= " --$option";
      $elem =~ s/(\\*)"/$1$1\\"/g;
      $oarcmd .= "=\"$elem\"" if $elem ne "";
    }
  }
  else {
    $oarcmd .= " --$option";
    $job->{$option}=~ s/(\\*)"/$1$1\\"/g;
    $oarcmd .= "=\"$job->{$option}\"" if $job->{$option} ne "";
  }
}
$oarcmd .= $command;
$oarcmd =~ s/(\\*)"/$1$1\\"/g;
my $cmd;
if ($script ne "") {
  my ($TMP, $tmpfilename) = tempfile( "oarapi.subscript.XXXXX", DIR => $TMPDIR, UNLINK => 1 );
  print $TMP $script;
  chmod 0755, $tmpfilename;
  $oarcmd .= " ./". basename($tmpfilename);
  $cmd = "bash --noprofile --norc -c \"cp $tmpfilename $workdir/ && cd $workdir && $oarcmd\"";
} else {
  $cmd = "bash --noprofile --norc -c \"cd $workdir && $oarcmd\"";
}
$cmd =~ s/(\\*)(`|\$)/$1$1\\$2/g;
print `$cmd 2>&1`;
exit($? >> 8);
"""
ECHO = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('V')]))"
#: What OAR's Perl passes on as it is (wider characters are re-encoded: not the point here).
ASCII = st.text(
    st.characters(min_codepoint=9, max_codepoint=126, blacklist_characters="\x0b\x0c\r")
)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the API's code, a fake oarsub, and a working folder ``work``."""
    if shutil.which("perl") is None or shutil.which("bash") is None:
        pytest.skip("needs perl and bash to run the API's code")
    folder = tmp_path_factory.mktemp("oarapi")
    (folder / "oarapi.pl").write_text(API)
    oarsub = folder / "oarsub"
    oarsub.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    oarsub.chmod(0o755)
    for sub in ("work", "home", "tmp"):
        (folder / sub).mkdir()
    return folder


def through_the_api(folder: Path, body: bytes) -> tuple[list[str], str]:
    """The options oarsub got from the API, and the command it was given."""
    argv = ["perl", str(folder / "oarapi.pl"), str(folder / "oarsub"), str(folder / "home"),
            str(folder / "tmp")]  # fmt: skip
    done = subprocess.run(argv, input=body.decode(), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout
    *options, command = json.loads(done.stdout)
    return options, command


@settings(  # each example runs the REST API's Perl and the job: subprocesses
    max_examples=fewer(40), suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args=st.lists(ASCII, max_size=3), value=ASCII)
@example(args=["$HOME", "`id`", "a\\", '"', "it's", "x/~/y/~/z"], value="/~/")
def test_a_job_reaches_oarsub_and_runs_intact_through_the_apis_shells(
    api: Path, args: list[str], value: str
) -> None:
    work = api / "work"
    job = JobSpec(name="j", user="coorm_bob", argv=(sys.executable, "-c", ECHO, *args), hosts=1,
                  walltime=60, environment={"V": value}, workdir=str(work))  # fmt: skip
    with responses.RequestsMock() as rsps:
        recorded(rsps, "POST", "jobs.json", "post_batch.txt")
        backend().submit_inner(ALPHA, job, "18")
        body = rsps.calls[0].request.body
    assert isinstance(body, bytes)
    options, command = through_the_api(api, body)
    assert "--type=inner=18" in options
    assert "--property=cluster='alpha'" in options
    script = work / command.removeprefix("./")
    assert script.read_text() == json.loads(body)["script"]  # written as it was sent
    # oarexec runs the command with bash -c in the working folder, on the first host
    done = subprocess.run(["bash", "-c", command], cwd=work, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert json.loads(done.stdout) == [args, value], done.stderr


def test_a_placeholder_reaches_oarsub_as_it_was_asked(api: Path) -> None:
    with responses.RequestsMock() as rsps:
        recorded(rsps, "POST", "jobs.json", "post_resa.txt")
        backend(timezone="Europe/Paris").submit_reservation(ALPHA, SPEC)
        body = rsps.calls[0].request.body
    assert isinstance(body, bytes)
    options, command = through_the_api(api, body)
    assert sorted(options) == [
        "--directory=/tmp",
        "--name=coorm-7",
        "--property=cluster='alpha' AND host IN ('alpha-1','alpha-2')",
        "--reservation=2026-11-24 08:49:00",
        "--resource=/host=2,walltime=0:30:00",
        "--type=container",
        "--type=noop",
    ]
    assert command == f"coorm-placeholder start={SPEC.start}"


# --- answers -------------------------------------------------------------------------------------


def test_a_refused_reservation_is_refused_with_oars_suggestion(
    mocked: responses.RequestsMock,
) -> None:
    serve(mocked)
    recorded(mocked, "POST", "jobs.json", "post_resa_refused.txt")
    with pytest.raises(Refused, match="Reservation not valid") as refused:
        adapter(timezone="Europe/Paris").create_reservation("alpha", SPEC)
    # "could run at 2026-11-21 07:06:23", which the server printed in its zone
    assert refused.value.retry_after == commands.parse_date("2026-11-21 06:06:23")
    assert refused.value.cluster == "alpha"
    with pytest.raises(Refused) as in_utc:
        adapter().create_reservation("alpha", SPEC)
    assert in_utc.value.retry_after == commands.parse_date("2026-11-21 07:06:23")


def test_the_recorded_400_of_a_conflicting_reservation(mocked: responses.RequestsMock) -> None:
    recorded(mocked, "POST", "jobs.json", "rest_post_reservation_refused_400.txt")
    with pytest.raises(BatchFailure) as failure:
        backend().submit_reservation(ALPHA, SPEC)
    assert failure.value.kind == "overlap"
    assert failure.value.retry_after == commands.parse_date("2026-11-24 09:49:44")


@pytest.mark.parametrize(
    ("sample", "error", "said"),
    [
        ("rest_post_root_500.txt", NotPermitted, "root and oar users are not allowed"),
        ("rest_post_without_ident_401.txt", LacksRights, "suitable authentication"),
        ("rest_post_hyphenated_user_401.txt", NotPermitted, "target user"),
        (
            "rest_post_site_rule_500.txt",
            NotPermitted,
            "alpha: OAR's admission rules refused it: "
            r"\[ADMISSION RULE\] coorm_alice may not ask for more than 1:00:00 of walltime$",
        ),
    ],
)
def test_refusals_that_retrying_cannot_help(
    mocked: responses.RequestsMock, sample: str, error: type[AdapterError], said: str
) -> None:
    serve(mocked)
    recorded(mocked, "POST", "jobs.json", sample)
    with pytest.raises(error, match=said) as raised:
        adapter().create_reservation("alpha", SPEC)
    assert type(raised.value) is error
    assert not isinstance(raised.value, Refused | Unavailable)


def test_a_users_cap_on_waiting_reservations_holds_back_that_session_only(
    mocked: responses.RequestsMock,
) -> None:
    serve(mocked)
    recorded(mocked, "POST", "jobs.json", "rest_post_reservation_limit_500.txt")
    with pytest.raises(Refused, match=r"unlimited_reservation\.users"):
        adapter().create_reservation("alpha", SPEC)


def test_an_api_failure_nobody_sorted_is_a_plain_error(mocked: responses.RequestsMock) -> None:
    serve(mocked)
    mocked.post(f"{URL}/jobs.json", status=500,
                json={"code": 500, "title": "Parse error",
                      "message": "Job submitted but the id could not be parsed."})  # fmt: skip
    with pytest.raises(AdapterError, match="could not be parsed") as raised:
        adapter().create_reservation("alpha", SPEC)
    assert type(raised.value) is AdapterError


@pytest.mark.parametrize("answer", [502, 503, 504, requests.ConnectionError("refused")])
def test_no_answer_from_oar_is_unavailable(
    mocked: responses.RequestsMock, answer: int | Exception
) -> None:
    if isinstance(answer, int):
        mocked.get(f"{URL}/resources/details.json", status=answer, body="proxy")
        mocked.post(f"{URL}/jobs.json", status=answer, body="proxy")
    else:
        mocked.get(f"{URL}/resources/details.json", body=answer)
        mocked.post(f"{URL}/jobs.json", body=answer)
    with pytest.raises(Unavailable):
        adapter().snapshot()
    with pytest.raises(Unavailable):
        adapter().create_reservation("alpha", SPEC)


def test_deleting_a_job_oar_no_longer_has_is_no_error(mocked: responses.RequestsMock) -> None:
    gone = parse.OarJob(id="14", name="coorm-7", owner="coorm_alice", state="Waiting",
                           types=("container",), reservation="Scheduled", start=1,
                           walltime=60)  # fmt: skip
    mocked.delete(f"{URL}/jobs/14.json", status=404, json={"code": 404, "message": "Not found"})
    backend().delete_job(gone)
    # what oarapi.pl answers when oardel fails (send_cmd), with oardel's recorded words
    said = load("oardel_unknown_job.json")
    mocked.delete(f"{URL}/jobs/424242.json", status=400, json={
        "code": 400, "title": "Oardel error",
        "message": f"Oardel command exited with status 256: {said['stdout']}{said['stderr']}. "
                   "(Command was: oardodo oardel 424242).",
    })  # fmt: skip
    backend().delete_job(parse.OarJob(**{**gone.__dict__, "id": "424242"}))
    mocked.delete(f"{URL}/jobs/15.json", status=500, json={"message": "database down"})
    with pytest.raises(BatchFailure, match="database down"):
        backend().delete_job(parse.OarJob(**{**gone.__dict__, "id": "15"}))


def test_deleting_an_unknown_placeholder_is_idempotent(mocked: responses.RequestsMock) -> None:
    serve(mocked)
    adapter().delete_reservation("beta", "never-made")
    assert {c.request.method for c in mocked.calls} == {"GET"}  # read, nothing deleted


def test_a_job_as_the_api_shows_it(mocked: responses.RequestsMock) -> None:
    mocked.get(f"{URL}/jobs/6.json", json=load("job6_resa.json"))
    mocked.get(f"{URL}/jobs/7.json", status=404, json={"code": 404, "message": "Job not found"})
    six = backend().job("6")
    assert six is not None
    assert (six.id, six.owner, six.state, six.start, six.reservation) == (
        "6", "alice", "Waiting", 1795241122, "Scheduled",
    )  # fmt: skip
    assert backend().job("7") is None
    assert adapter().job_state("alpha", "6") is JobState.PENDING
    assert adapter().job_state("alpha", "7") is JobState.UNKNOWN


@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_the_configured_ca_wins_over_the_environment(
    mocked: responses.RequestsMock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    ca = tmp_path / "site-ca.pem"
    ca.write_text("a CA")
    monkeypatch.setenv(variable, str(tmp_path / "another-ca.pem"))
    mocked.add("GET", f"{URL}/resources", json={})
    backend(verify=ca)._call("GET", "resources")
    assert mocked.calls[0].request.req_kwargs["verify"] == str(ca)
