"""``coorm-sim validate``: the counting proxy's reading of HTTP, and a tiny pack end to end
through a real daemon and real launcher processes."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from coorm_bridge.sim.cli import main
from coorm_bridge.sim.validate_wire import Flow, HttpSplitter

REQUEST = (
    b'PUT /v1/sessions/s1/request HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n{"nodes": {}}'
)
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n"
)
EMPTY = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"


def test_a_request_cut_anywhere_is_split_into_head_and_body() -> None:
    for cut in range(1, len(REQUEST)):
        flow = Flow()
        splitter = HttpSplitter(flow, responses=False)
        for part in (REQUEST[:cut], REQUEST[cut:] + REQUEST):
            splitter.feed(part)
        assert (flow.messages, flow.body_bytes, flow.bytes) == (2, 26, 2 * len(REQUEST))


def test_chunked_and_bodiless_answers_count_their_data_only() -> None:
    flow = Flow()
    splitter = HttpSplitter(flow, responses=True)
    for byte in range(len(CHUNKED + EMPTY)):
        splitter.feed((CHUNKED + EMPTY)[byte : byte + 1])
    assert flow.messages == 2
    assert flow.body_bytes == len("hello world")
    assert flow.header_bytes == len(CHUNKED + EMPTY) - len("hello world")


@pytest.mark.daemon
def test_a_tiny_pack_runs_through_the_real_daemon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 applications on 2 clusters: each one started and ended, the bytes both ways exceed the
    simulator's JSON by at least a plausible header per message, the tables and figure are
    written. The daemon and the launcher workers are stopped by PID by the run itself."""
    status = main(["validate", "--quick", "--out", str(tmp_path)])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    folder = tmp_path / "validate"
    [row] = list(csv.DictReader((folder / "validate.csv").open()))
    applications = int(row["applications"])
    assert applications == 8
    assert int(row["started"]) == int(row["ended"]) == applications, row
    # Launchers may be told of a placement the daemon retries (at 20 times real speed a
    # reservation can reach the mock a platform second late): not asserted, every start is.
    assert int(row["daemon_errors"]) == 0
    real = int(row["real_bytes_up"]) + int(row["real_bytes_down"])
    headers = real - int(row["real_body_bytes"])
    messages = int(row["real_messages"])
    simulated = float(row["sim_kb_per_app"]) * 1000 * applications
    # Subscribe, interconnect, a request, the start and done at least, for each application.
    assert messages >= 5 * applications
    # A request's line and headers (host, token, lengths) and an answer's: 200 bytes at least.
    assert headers >= 200 * messages
    assert real >= simulated + headers
    assert float(row["real_mean_response_s"]) > 0
    summary = list(csv.DictReader((folder / "validate-summary.csv").open()))
    assert {line["metric"] for line in summary} >= {"KB per application", "messages"}
    assert (folder / "validate.png").stat().st_size > 0
    assert "8 of 8 ended" in printed.out
