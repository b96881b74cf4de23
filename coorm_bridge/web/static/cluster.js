// A cluster's page: its Gantt chart, refreshed after each pass, with its controls.

import { api, clock, el, live } from "./coorm.js";
import { COLOURS, Gantt } from "./gantt.js";

const cluster = new URLSearchParams(location.search).get("c") ?? "";
document.getElementById("name").textContent = cluster;
document.title = `coorm-bridge: ${cluster}`;
const names = { running: "running job", pending: "pending job", placeholder: "placeholder", ghost: "ghost",
  reservation: "other reservation", inside: "job in a placeholder", down: "host down", drained: "host drained" };
document.getElementById("legend").append(...Object.entries(names).map(([kind, text]) =>
  el("span", {}, Object.assign(el("i"), { style: `background:${COLOURS[kind]}` }), text)),
  el("span", { style: `color:${COLOURS.now}` }, "│ now"), el("span", { style: `color:${COLOURS.horizon}` }, "┆ placement horizon"));
const gantt = new Gantt(document.getElementById("axis"), document.getElementById("chart"), document.getElementById("tooltip"));
window.coormGantt = gantt;
for (const button of document.querySelectorAll("[data-window]")) {
  button.addEventListener("click", () => {
    document.querySelectorAll("[data-window]").forEach((b) => b.classList.toggle("on", b === button));
    gantt.show(Number(button.dataset.window));
  });
}
document.querySelectorAll("[data-scroll]").forEach((b) => b.addEventListener("click", () => gantt.scroll(Number(b.dataset.scroll))));
document.querySelectorAll("[data-zoom]").forEach((b) => b.addEventListener("click", () => gantt.zoom(Number(b.dataset.zoom))));
window.addEventListener("resize", () => gantt.draw());

live(async () => {
  const data = await api(`/clusters/${encodeURIComponent(cluster)}/occupancy`);
  const state = document.getElementById("state");
  const held = data.bars.filter((b) => b.kind === "placeholder").length;
  state.textContent = `${data.hosts.length} hosts · ${data.bars.length - held} jobs and reservations · ${held} placeholders · read ${clock(data.snapshot)}${data.stale ? " (stale)" : ""}${data.unplanned ? ` · ${data.unplanned} pending without a predicted start` : ""}`;
  state.className = data.stale ? "bad" : "muted";
  gantt.set(data);
});
