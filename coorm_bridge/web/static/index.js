// The home page: the bridge's health, its clusters and the sessions, refreshed after each pass.

import { api, clock, el, link, live, requestText, drawn } from "./coorm.js";

async function refresh() {
  const [health, clusters, availability, sessions] = await Promise.all([
    api("/health"), api("/clusters"), api("/availability"), api("/sessions"),
  ]);
  const state = document.getElementById("health");
  state.textContent = `${health.status} · ${clock(health.time)} · ${health.sessions} active session${health.sessions === 1 ? "" : "s"}`;
  state.className = health.status === "ok" ? "ok" : "bad";
  document.getElementById("notes").replaceChildren(
    ...health.problems.map((p) => el("li", {}, `${p.kind} on ${p.clusters.join(", ")}: ${p.message}`)),
    ...(health.drained ?? []).map((c) => el("li", {}, `${c} is drained: no new placeholders until resumed`)));
  const caps = Object.fromEntries(availability.map((cap) => [cap.cluster, cap.steps]));
  document.querySelector("#clusters tbody").replaceChildren(...clusters.map((c) => {
    const batch = health.clusters[c.name]?.status ?? "?";
    const steps = caps[c.name] ?? [];
    const later = steps.slice(1, 4).map(([t, n]) => `${clock(t)}: ${n}`).join(", ");
    return el("tr", { "data-cluster": c.name },
      el("td", {}, link(`cluster.html?c=${encodeURIComponent(c.name)}`, c.name)),
      el("td", {}, String(c.hosts)),
      el("td", { class: batch === "ok" ? "ok" : "bad" }, batch),
      el("td", {}, steps.length ? String(steps[0][1]) : "?"),
      el("td", { class: "muted" }, later || "-"));
  }));
  document.getElementById("none").hidden = sessions.length > 0;
  document.querySelector("#sessions tbody").replaceChildren(...sessions.map((s) => el("tr", { "data-session": s.session },
    el("td", {}, link(`session.html?id=${encodeURIComponent(s.session)}`, s.session)),
    el("td", {}, s.owner),
    el("td", {}, s.name ?? "-"),
    el("td", {}, s.state),
    el("td", {}, requestText(s.request)),
    el("td", {}, clock(s.started_at ?? s.estimated_start)),
    el("td", {}, clock(s.end)))));
  drawn("refreshed");
}
live(refresh);
