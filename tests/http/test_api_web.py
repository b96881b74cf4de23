"""What the web pages read: a cluster's occupancy (who sees whose placeholders), the pass count
to wait on, a watcher's reads of a session's events, and the pages themselves under /ui/."""

from __future__ import annotations

from coorm_bridge.core.batch import NodeState
from tests.http.api import ALICE, BOB, ROOT
from tests.http.test_api import assert_error, auth, subscribe


def started(client, token=ALICE, nodes=None):
    sid = subscribe(client, token, name="coupled")
    answer = client.put(
        f"/v1/sessions/{sid}/request",
        json={"nodes": nodes or {"c1": 2, "c2": 1}, "duration": 600},
        headers=auth(token),
    )
    assert answer.status_code == 200, answer.text
    after = 0
    while True:  # until the start event: its allocations are the placeholders' hosts
        page = client.get(
            f"/v1/sessions/{sid}/events", params={"after": after, "wait": 5}, headers=auth(token)
        ).json()["events"]
        for event in page:
            if event["type"] == "start":
                return sid, event
        after = page[-1]["seq"] if page else after


def placeholders(client, token, cluster):
    answer = client.get(f"/v1/clusters/{cluster}/occupancy", headers=auth(token))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return body, [b for b in body["bars"] if b["kind"] in ("placeholder", "ghost")]


def test_the_occupancy_shows_a_started_sessions_placeholders_on_their_hosts(client):
    sid, start = started(client)
    body, (bar,) = placeholders(client, ALICE, "c1")
    assert [h["name"] for h in body["hosts"]] == [f"c1-{i}" for i in range(8)]
    names = [body["hosts"][row]["name"] for row in bar["rows"]]
    assert sorted(names) == sorted(start["allocations"]["c1"]["hosts"])
    assert bar["session"] == sid
    assert bar["owner"] == "alice"
    assert bar["start"] <= body["time"] < bar["end"]
    assert body["snapshot"] is not None
    assert body["horizon"] >= body["time"]
    assert body["passes"] >= 1


def test_others_see_where_a_placeholder_is_but_not_whose(client):
    sid, _ = started(client)
    _, (seen_by_bob,) = placeholders(client, BOB, "c1")
    assert seen_by_bob["session"] is None
    assert seen_by_bob["owner"] is None
    assert seen_by_bob["state"] is None
    assert seen_by_bob["rows"]  # where and when stay visible, as in the batch system's queue
    _, (seen_by_root,) = placeholders(client, ROOT, "c1")
    assert seen_by_root["session"] == sid
    assert seen_by_root["owner"] == "alice"


def test_a_done_sessions_placeholder_is_drawn_as_a_ghost(client):
    sid, _ = started(client)
    assert client.post(f"/v1/sessions/{sid}/done", headers=auth()).status_code == 200
    passes = client.get("/v1/passes", headers=auth()).json()["passes"]
    while True:  # the ghost is made by a pass: wait for passes until it is shown
        _, bars = placeholders(client, ALICE, "c1")
        if bars and bars[0]["kind"] == "ghost":
            break
        passes = client.get(
            "/v1/passes", params={"after": passes, "wait": 5}, headers=auth()
        ).json()["passes"]
    assert bars[0]["session"] == sid


def test_occupancy_refuses_unknown_clusters_and_strangers(client):
    assert_error(client.get("/v1/clusters/nope/occupancy", headers=auth()), 404, "not_found")
    assert client.get("/v1/clusters/c1%2F..%2Fx/occupancy", headers=auth()).status_code in (
        404,
        422,
    )
    assert_error(client.get("/v1/clusters/c1/occupancy"), 401, "unauthenticated")


def test_passes_waits_for_the_next_pass_and_bounds_its_wait(client):
    now = client.get("/v1/passes", headers=auth()).json()
    subscribe(client)  # something for a pass to do
    later = client.get(
        "/v1/passes", params={"after": now["passes"], "wait": 30}, headers=auth()
    ).json()
    assert later["passes"] > now["passes"]
    assert later["time"] >= now["time"]
    # Far ahead: answered after the wait with the count as it is (no wait asked: at once).
    ahead = client.get("/v1/passes", params={"after": 10**12}, headers=auth()).json()
    assert ahead["passes"] < 10**12
    for wait in (-1, 61, "nan"):
        assert_error(
            client.get("/v1/passes", params={"wait": wait}, headers=auth()), 422, "invalid"
        )


def test_a_watchers_reads_keep_no_session_alive(client, bridge, monkeypatch):
    sid = subscribe(client)
    heard = []
    original = bridge.silence.heard
    monkeypatch.setattr(
        bridge.silence, "heard", lambda s, now: (heard.append(s), original(s, now))[1]
    )
    watched = client.get(
        f"/v1/sessions/{sid}/events", params={"watch": "true", "wait": 30}, headers=auth()
    ).json()
    assert watched["events"]  # the page sees the same events...
    assert heard == []  # ...and the bridge does not take it for the launcher
    client.get(f"/v1/sessions/{sid}/events", headers=auth())
    assert heard == [sid]
    # A watcher sees only what its user may: bob cannot watch alice's session.
    assert_error(
        client.get(f"/v1/sessions/{sid}/events", params={"watch": "true"}, headers=auth(BOB)),
        404,
        "not_found",
    )


def test_the_pages_are_served_without_data_or_identity(client):
    page = client.get("/ui/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "<script>" not in page.text  # every script is a file: the policy allows no other
    for name in ("cluster.html", "session.html", "coorm.js", "gantt.js", "coorm.css", "index.js"):
        assert client.get(f"/ui/{name}").status_code == 200, name
    assert client.get("/ui/../pyproject.toml").status_code == 404
    assert client.get("/ui/%2e%2e/http/app.py").status_code == 404


def test_down_and_drained_hosts_are_shown_with_their_state(client, service):
    controls = service.adapter.site.controls
    controls.set_node_state("c1", "c1-3", NodeState.DOWN)
    controls.set_node_state("c1", "c1-5", NodeState.DRAINED)
    passes = client.get("/v1/passes", headers=auth()).json()["passes"]
    while True:  # the next snapshot shows them: wait for passes until it is read
        body = client.get("/v1/clusters/c1/occupancy", headers=auth()).json()
        states = {h["name"]: h["state"] for h in body["hosts"]}
        if states.get("c1-3") == "down":
            break
        subscribe(client)  # something for a pass to do
        passes = client.get(
            "/v1/passes", params={"after": passes, "wait": 5}, headers=auth()
        ).json()["passes"]
    assert states["c1-5"] == "drained"
    assert {s for n, s in states.items() if n not in ("c1-3", "c1-5")} == {"up"}
