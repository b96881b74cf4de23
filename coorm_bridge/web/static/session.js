// A session's page: where it stands, its view with its request drawn on it, its events.

import { api, clock, drawn, el, link, live, problem, requestText, span } from "./coorm.js";
import { COLOURS } from "./gantt.js";

const id = new URLSearchParams(location.search).get("id") ?? "";
document.getElementById("id").textContent = id;
document.title = `coorm-bridge: session ${id}`;
const path = `/sessions/${encodeURIComponent(id)}`;

function facts(info) {
  const start = info.started_at ?? info.estimated_start;
  const rows = [
    ["name", info.name ?? "-"], ["owner", info.owner], ["state", info.state],
    ["request", requestText(info.request)],
    [info.started_at ? "started" : "estimated start", start === null ? (info.request ? "not yet known" : "-") : clock(start)],
    ["end", clock(info.end)],
    ["clusters", info.clusters.join(", ")],
  ];
  if (info.stale.length) rows.push(["stale", info.stale.join(", ")]);
  document.querySelector("#facts tbody").replaceChildren(...rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { "data-fact": k }, v))));
  document.getElementById("state").textContent = info.state;
}

/** One cluster's free hosts over time (a step line) with the request drawn at its start. */
function chart(info, cap) {
  const canvas = el("canvas", { "data-cluster": cap.cluster });
  const width = Math.min(document.querySelector("main").clientWidth - 4, 1100);
  const height = 170;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio; canvas.height = height * ratio;
  canvas.style.width = `${width}px`; canvas.style.height = `${height}px`;
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  const steps = cap.steps;
  const now = steps[0][0];
  const wanted = info.request?.nodes?.[cap.cluster] ?? 0;
  const start = info.estimated_start;
  const last = steps[steps.length - 1][0];
  const t1 = Math.max(now + 3600, last + (last - now) * 0.15, start !== null && info.request ? start + info.request.duration * 1.1 : 0);
  const top = Math.max(...steps.map((s) => s[1]), wanted, 1);
  const left = 44, bottom = 22, right = 8;
  const x = (t) => left + ((t - now) / (t1 - now)) * (width - left - right);
  const y = (n) => (height - bottom) - (n / top) * (height - bottom - 16);
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#1d2430";
  g.fillText(`${cap.cluster}: free hosts`, left, 11);
  g.fillStyle = "#667085";
  for (const n of [0, Math.round(top / 2), top]) g.fillText(String(n), 4, y(n) + 4);
  g.fillText(clock(now).slice(-8, -3), left, height - 6);
  g.fillText(`+${span(t1 - now)}`, width - 60, height - 6);
  g.beginPath();
  g.moveTo(x(now), y(0));
  steps.forEach(([t, n], i) => {
    const next = i + 1 < steps.length ? steps[i + 1][0] : t1;
    g.lineTo(x(t), y(n)); g.lineTo(x(next), y(n));
  });
  g.lineTo(x(t1), y(0));
  g.closePath();
  g.fillStyle = "rgba(44, 160, 44, 0.25)"; g.fill();
  g.strokeStyle = "#2ca02c"; g.lineWidth = 1.5; g.stroke();
  if (wanted && start !== null) {
    g.fillStyle = "rgba(242, 142, 43, 0.55)";
    g.strokeStyle = COLOURS.inside;
    const w = Math.max(x(start + info.request.duration) - x(start), 2);
    g.fillRect(x(start), y(wanted), w, y(0) - y(wanted));
    g.strokeRect(x(start), y(wanted), w, y(0) - y(wanted));
    g.fillStyle = "#1d2430";
    g.fillText(`request: ${wanted} from ${clock(start)}`, x(start) + 4, y(wanted) - 4);
  }
  return canvas;
}

function placed(info) {
  return el("p", {}, `Its hosts are held: see them on `,
    ...info.clusters.flatMap((c, i) => [i ? ", " : "", link(`cluster.html?c=${encodeURIComponent(c)}`, c)]), ".");
}

async function refresh() {
  const info = await api(path);
  facts(info);
  const view = document.getElementById("view");
  view.replaceChildren(...(info.view ? info.view.profiles.map((cap) => chart(info, cap)) : [placed(info)]));
  drawn("drawn");
}

function summary(event) {
  const parts = [`#${event.seq}`, event.type];
  if (event.changes) parts.push(event.changes.map((c) => c.cluster).join(", "));
  if (event.allocations) parts.push(Object.entries(event.allocations).map(([c, a]) => `${c}: ${a.hosts.join(",")}`).join("; "));
  if (event.reason) parts.push(event.reason);
  if (event.time !== undefined) parts.push(clock(event.time));
  return parts.join("  ");
}

async function follow() {
  let after = 0;
  const list = document.getElementById("events");
  for (;;) {
    try {
      const page = await api(`${path}/events`, { after, wait: 25, watch: "true" });
      for (const event of page.events) {
        list.prepend(el("li", { "data-type": event.type }, summary(event)));
        after = event.seq;
      }
      if (page.events.length) drawn("events");
      if (page.events.some((e) => e.type === "ended")) return;
    } catch (error) {
      if (error.status === 404 || error.status === 401) return problem(error.message);
      await new Promise((done) => setTimeout(done, 3000));
    }
  }
}
live(refresh);
follow();
