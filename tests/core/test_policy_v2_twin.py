"""The v2 pass against a brute-force twin, and v1-shaped applications against v1's Policy.

The twin replays the same rules second by second on numpy arrays from ``now`` to a horizon past
every breakpoint, with plain loops: a start is the first second where every window fits, the
equi-partition hands out one host at a time to the hungry application with the smallest share
(ties: the earliest subscriber).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.core.model import Request
from coorm_bridge.core.policy import Application, Policy, PolicyConfig
from coorm_bridge.core.policy_v2 import PlanV2, Preemption, RequestDecision, plan
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import EvolvingApplication, RequestRow, TypedRequest
from tests.profiles import fewer

FAR = 10**12
NOW = 40
KINDS = ("non-preemptible", "preemptible", "pre-allocation")


# -- random small instances ---------------------------------------------------------------------


@st.composite
def instances(draw):
    names = ["c", "d"][: draw(st.integers(1, 2))]
    capacity = {}
    for c in names:
        times = sorted(draw(st.sets(st.integers(NOW - 10, NOW + 40), max_size=3)))
        values = [draw(st.integers(0, 8)) for _ in times]
        capacity[c] = Profile(draw(st.integers(0, 8)), times, values)
    apps = [draw_app(draw, f"a{i}", order, names) for i, order in enumerate(
        draw(st.lists(st.integers(0, 50), min_size=1, max_size=4, unique=True)))]  # fmt: skip
    return capacity, apps, draw(st.integers(0, 10))


def draw_app(draw, app_id, order, names):
    rows: list[RequestRow] = []
    for k in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(KINDS))
        cluster = draw(st.sampled_from(names))
        hosts, duration = draw(st.integers(1, 6)), draw(st.integers(1, 30))
        relation = {}
        if rows and draw(st.booleans()):
            related = draw(st.sampled_from(rows))
            how = draw(st.sampled_from(["next", "coalloc"]))
            if how == "next":
                cluster = related.request.cluster
            relation = {"related_to": related.id, "related_how": how}
        request = TypedRequest(id=f"r{k}", cluster=cluster, hosts=hosts, duration=duration,
                               type=kind, **relation)  # fmt: skip
        status = draw(st.sampled_from(["pending", "pending", "started", "done"]))
        fields: dict = {"request": request, "status": status}
        if status != "pending":
            fields["started_at"] = draw(st.integers(NOW - 30, NOW))
            fields["held"] = draw(st.integers(1, hosts))
            if status == "done":
                fields["done_at"] = draw(st.integers(fields["started_at"], NOW))
            hosts_pa = [
                r.id for r in rows
                if r.request.type == "pre-allocation" and r.request.cluster == cluster
                and r.status != "pending"
            ]  # fmt: skip
            if kind == "non-preemptible" and hosts_pa and draw(st.booleans()):
                fields["inside"] = draw(st.sampled_from(hosts_pa))
        rows.append(RequestRow(**fields))
    return EvolvingApplication(id=app_id, order=order, clusters=tuple(names), requests=rows)


# -- the twin -----------------------------------------------------------------------------------


def horizon(capacity, apps) -> int:
    last = NOW
    for p in capacity.values():
        last = max(last, *p.breakpoints) if len(p) else last
    total = sum(r.request.duration for a in apps for r in a.requests)
    return last + 2 * total + 2


class Twin:
    def __init__(self, capacity, apps, fair):
        self.end = horizon(capacity, apps)
        self.grid = np.arange(NOW, self.end)
        self.fair = fair
        self.table = sorted(apps, key=lambda a: a.order)
        self.decisions = {a.id: {} for a in self.table}
        self.expired = []
        self.unused = {}
        self.in_base = set()
        base = {c: p.values_at(self.grid).astype(np.int64) for c, p in capacity.items()}
        for app in self.table:
            rows = {r.id: r for r in app.requests}
            for r in app.requests:
                if r.status == "pending":
                    continue
                end = r.started_at + r.request.duration
                if r.status == "started" and end <= NOW:
                    self.expired.append((app.id, r.id))
                    continue
                if r.request.type == "preemptible":
                    continue
                if self.lends(r):
                    self.unused[app.id, r.id] = self.span(r.held, r.started_at, end)
                pa = rows.get(r.inside) if r.inside else None
                if pa is not None and self.lends(pa):
                    stop = r.done_at if r.done_at is not None else end
                    self.unused[app.id, pa.id] -= self.span(r.held, r.started_at, stop)
                    continue
                self.in_base.add((app.id, r.id))
                if r.request.cluster in base:
                    hold = end if r.done_at is None else min(end, r.done_at + fair)
                    base[r.request.cluster] -= self.span(r.held, r.started_at, hold)
        self.base = {c: np.maximum(a, 0) for c, a in base.items()}
        self.unused = {k: np.maximum(a, 0) for k, a in self.unused.items()}
        self.left = {c: a.copy() for c, a in self.base.items()}

    def span(self, hosts, start, end):
        a = np.zeros(len(self.grid), dtype=np.int64)
        if end is None or end > NOW:
            a[max(start, NOW) - NOW : None if end is None else end - NOW] = hosts
        return a

    def lends(self, r):
        return (r.request.type == "pre-allocation" and r.status == "started"
                and r.started_at + r.request.duration > NOW)  # fmt: skip

    def decide(self, app, r, start, inside=None):
        self.decisions[app][r.id] = RequestDecision(start, start == NOW, inside)

    def after(self, app, r):
        if r.request.related_how != "next":
            return NOW
        related = next(x for x in app.requests if x.id == r.request.related_to)
        if related.status != "pending":
            end = related.started_at + related.request.duration
            return max(NOW, related.done_at if related.done_at is not None else end)
        d = self.decisions[app.id].get(related.id)
        if d is None or d.estimated_start is None:
            return None
        return max(NOW, d.estimated_start + related.request.duration)

    def inside(self, app, r, at):
        for pa in app.requests:
            key = (app.id, pa.id)
            if key in self.unused and pa.request.cluster == r.request.cluster:
                end = at + r.request.duration
                u = self.unused[key]
                if end <= pa.started_at + pa.request.duration and all(
                    u[t - NOW] >= r.request.hosts for t in range(at, end)
                ):
                    u[at - NOW : end - NOW] -= r.request.hosts
                    self.decide(app.id, r, at, pa.id)
                    return True
        return False

    def groups(self, app):
        found, root = {}, {}
        for r in app.requests:
            if r.status != "pending" or r.request.type == "preemptible":
                continue
            top = r.id
            if r.request.related_how == "coalloc" and r.request.related_to in root:
                top = root[r.request.related_to]
            root[r.id] = top
            found.setdefault(top, []).append(r)
        return found

    def fits(self, members, s):
        for m in members:
            c = m.request.cluster
            for t in range(s, s + m.request.duration):
                total = sum(x.request.hosts for x in members
                            if x.request.cluster == c and t < s + x.request.duration)  # fmt: skip
                if self.left[c][t - NOW] < total:
                    return False
        return True

    def run(self):
        for app in self.table:
            grouped = {m.id for g in self.groups(app).values() if len(g) > 1 for m in g}
            for r in app.requests:
                if (r.status != "pending" or r.request.type == "preemptible"
                        or r.request.related_how != "next" or r.id in grouped):  # fmt: skip
                    continue
                related = next(x for x in app.requests if x.id == r.request.related_to)
                if related.status == "pending":
                    continue
                at = self.after(app, r)
                if r.request.type == "non-preemptible" and self.inside(app, r, at):
                    continue
                c, hosts, end = r.request.cluster, r.request.hosts, at + r.request.duration
                if c not in self.left:
                    continue
                room = self.left[c].copy()
                rend = related.started_at + related.request.duration
                hold = rend if related.done_at is None else min(rend, related.done_at + self.fair)
                if (app.id, related.id) in self.in_base and hold > at:
                    room[at - NOW : hold - NOW] += min(related.held, hosts)
                if room[at - NOW : end - NOW].min() >= hosts:
                    room[at - NOW : end - NOW] -= hosts
                    self.left[c] = room
                    self.decide(app.id, r, at)
        self.np_views = {}
        for app in self.table:
            self.np_views[app.id] = {c: self.left[c].copy() for c in app.clusters if c in self.left}
            groups = self.groups(app)
            for r in app.requests:
                if (r.status != "pending" or r.request.type == "preemptible"
                        or r.id in self.decisions[app.id]):  # fmt: skip
                    continue
                members = groups[r.id]
                at = self.after(app, members[0])
                start = None
                single = len(members) == 1 and r.request.type == "non-preemptible"
                if at is not None and single and self.inside(app, r, at):
                    continue
                if at is not None and all(m.request.cluster in self.left for m in members):
                    longest = max(m.request.duration for m in members)
                    start = next(
                        (s for s in range(at, self.end - longest) if self.fits(members, s)), None
                    )
                for m in members:
                    self.decide(app.id, m, start)
                    if start is not None:
                        self.left[m.request.cluster][
                            start - NOW : start - NOW + m.request.duration
                        ] -= m.request.hosts
        self.preemptible()

    def preemptible(self):
        self.pool = {c: a.copy() for c, a in self.left.items()}
        for key, u in self.unused.items():
            app = next(a for a in self.table if a.id == key[0])
            c = next(r for r in app.requests if r.id == key[1]).request.cluster
            if c in self.pool:
                self.pool[c] += u
        self.pre_views = {a.id: {} for a in self.table}
        self.preemptions = {a.id: [] for a in self.table}
        for c in self.pool:
            claims = {}
            for app in self.table:
                for r in app.requests:
                    if r.request.type != "preemptible" or r.status == "done":
                        continue
                    if r.request.cluster != c:
                        continue
                    run, wait = claims.setdefault(app.id, ([], []))
                    if r.status == "started":
                        end = r.started_at + r.request.duration
                        if end > NOW:
                            run.append((r.id, r.held, r.started_at, end))
                    elif (at := self.after(app, r)) is not None:
                        wait.append((r.id, r.request.hosts, r.request.duration, at))
                    else:
                        self.decide(app.id, r, None)
            ids = list(claims)
            wanted = np.zeros((len(ids), len(self.grid)), dtype=np.int64)
            for i, a in enumerate(ids):
                for _, h, s, e in claims[a][0]:
                    wanted[i] += self.span(h, s, e)
                for _, h, _, at in claims[a][1]:
                    wanted[i] += self.span(h, at, None)
            shares = np.zeros_like(wanted)
            for t in range(len(self.grid)):
                for _ in range(self.pool[c][t]):
                    hungry = [i for i in range(len(ids)) if shares[i, t] < wanted[i, t]]
                    if not hungry:
                        break
                    shares[min(hungry, key=lambda i: (shares[i, t], i)), t] += 1
            unclaimed = self.pool[c] - shares.sum(axis=0)
            for app in self.table:
                if c in app.clusters and app.id not in claims:
                    self.pre_views[app.id][c] = unclaimed
            for i, a in enumerate(ids):
                self.pre_views[a][c] = shares[i]
                run = list(claims[a][0])
                held = sum(
                    (self.span(h, s, e) for _, h, s, e in run), np.zeros(len(self.grid), np.int64)
                )
                for rid, h, d, at in claims[a][1]:
                    room = shares[i] - held
                    if at == NOW and room[0] >= h:
                        self.decisions[a][rid] = RequestDecision(NOW, True)
                        run.append((rid, h, NOW, NOW + d))
                        held = held + self.span(h, NOW, NOW + d)
                    else:
                        t = next((t for t in range(at - NOW, len(self.grid)) if room[t] >= h), None)
                        est = None if t is None else NOW + t
                        self.decisions[a][rid] = RequestDecision(est, est == NOW)
                over = np.flatnonzero(held > shares[i])
                if over.size:
                    t = int(over[0])
                    deadline, left = NOW + t, int(held[t] - shares[i][t])
                    alive = [(s, k, rid, h) for k, (rid, h, s, e) in enumerate(run) if e > deadline]
                    for _, _, rid, h in sorted(alive, reverse=True):
                        if left <= 0:
                            break
                        self.preemptions[a].append(Preemption(rid, min(left, h), deadline))
                        left -= min(left, h)


def values(profile: Profile, grid) -> list[int]:
    return [*profile.values_at(grid).tolist(), profile.value_at(FAR)]


def as_list(array) -> list[int]:
    return [*array.tolist(), int(array[-1])]


@settings(max_examples=fewer(300))
@given(instance=instances())
def test_pass_matches_its_brute_force_twin(instance):
    capacity, apps, fair = instance
    result = plan(capacity, apps, NOW, fair)
    twin = Twin(capacity, apps, fair)
    twin.run()
    grid = twin.grid
    assert result.decisions == twin.decisions
    assert list(result.expired) == twin.expired
    assert {c: values(p, grid) for c, p in result.base.items()} == {
        c: as_list(a) for c, a in twin.base.items()
    }
    assert {c: values(p, grid) for c, p in result.left.items()} == {
        c: as_list(a) for c, a in twin.left.items()
    }
    for app in apps:
        views = result.views[app.id]
        assert {c: values(p, grid) for c, p in views.non_preemptible.items()} == {
            c: as_list(a) for c, a in twin.np_views[app.id].items()
        }, app.id
        assert {c: values(p, grid) for c, p in views.preemptible.items()} == {
            c: as_list(a) for c, a in twin.pre_views[app.id].items()
        }, app.id
        assert list(result.preemptions[app.id]) == twin.preemptions[app.id], app.id
    expected = [
        (app.id, r.id)
        for app in sorted(apps, key=lambda a: a.order)
        for r in app.requests
        if (d := twin.decisions[app.id].get(r.id)) is not None and d.starts_now
    ]
    assert list(result.to_start) == expected


# -- v1-shaped applications get v1's starts ------------------------------------------------------


@st.composite
def v1_tables(draw):
    names = ["c", "d", "e"][: draw(st.integers(1, 3))]
    capacity = {c: Profile(draw(st.integers(1, 8)), [NOW + draw(st.integers(1, 50))],
                           [draw(st.integers(0, 8))]) for c in names}  # fmt: skip
    v1, v2 = [], []
    for i in range(draw(st.integers(1, 6))):
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        nodes = {c: draw(st.integers(1, 8)) for c in chosen}
        request = Request(nodes=nodes, duration=draw(st.integers(1, 60)))
        started = draw(st.booleans())
        row_fields: dict = {}
        fields: dict = {"id": f"a{i}", "order": i, "clusters": tuple(names), "request": request}
        if started:
            at = NOW - draw(st.integers(0, 20))
            fields |= {"state": AppState.STARTED, "started_at": at}
            row_fields = {"status": "started", "started_at": at}
        else:
            fields["state"] = AppState.WAITING
        v1.append(Application(**fields))
        rows, first = [], None
        for c, hosts in request.nodes.items():
            relation = {} if first is None else {"related_to": first, "related_how": "coalloc"}
            typed = TypedRequest(id=f"r{c}", cluster=c, hosts=hosts, duration=request.duration,
                                 **relation)  # fmt: skip
            held = {"held": hosts} if started else {}
            rows.append(RequestRow(request=typed, **row_fields, **held))
            first = first or typed.id
        v2.append(EvolvingApplication(id=f"a{i}", order=i, clusters=tuple(names), requests=rows))
    return capacity, v1, v2


@settings(max_examples=fewer(200))
@given(table=v1_tables())
def test_v1_shaped_applications_start_as_with_v1(table):
    capacity, v1, v2 = table
    old = Policy(PolicyConfig(fair_start=0)).plan(capacity, v1, NOW)
    new: PlanV2 = plan(capacity, v2, NOW, 0)
    for app in v1:
        if app.state is not AppState.WAITING:
            continue
        starts = {d.estimated_start for d in new.decisions[app.id].values()}
        assert starts == {old.outcomes[app.id].estimated_start}, app.id
        assert new.views[app.id].non_preemptible == old.view(app.id)
