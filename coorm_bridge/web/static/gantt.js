// A cluster's Gantt chart on a canvas: hosts down the side, time across, one colour per kind
// of bar. Bars are drawn kind by kind (one fill style each) as runs of consecutive hosts, so
// 10,000 jobs on 1,000 hosts are a few tens of thousands of rectangles: a few milliseconds.

import { clock, drawn, span } from "./coorm.js";

export const COLOURS = {
  reservation: "#edc948",
  placeholder: "#f28e2b",
  ghost: "#b07aa1",
  pending: "#b9c3d0",
  running: "#6f8fb8",
  inside: "#c4540a",
  down: "rgba(225, 87, 89, 0.35)",
  drained: "rgba(120, 120, 120, 0.30)",
  now: "#d62728",
  horizon: "#2ca02c",
};
const LAYERS = ["reservation", "placeholder", "ghost", "pending", "running", "inside"];
const LEFT = 110; // room for host names
const AXIS = 34;
const MAX_LANES = 40; // lanes for pending jobs whose hosts are not chosen yet
const STEPS = [60, 300, 600, 1800, 3600, 2 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400];

export class Gantt {
  constructor(axis, body, tooltip) {
    this.axis = axis;
    this.body = body;
    this.tooltip = tooltip;
    this.data = null;
    this.window = 2 * 3600;
    this.t0 = null;
    body.addEventListener("mousemove", (e) => this.hover(e));
    body.addEventListener("mouseleave", () => { tooltip.style.display = "none"; });
    body.addEventListener("wheel", (e) => this.wheel(e), { passive: false });
    body.addEventListener("mousedown", (e) => this.drag(e));
  }

  /** New data from the bridge: index it (runs of hosts, bars by row), then draw. */
  set(data) {
    const hosts = data.hosts.length;
    const lanes = [];
    const bars = data.bars.map((bar) => ({ ...bar, layer: bar.inside && bar.kind === "running" ? "inside" : bar.kind }));
    for (const bar of bars.filter((b) => b.rows.length === 0).sort((a, b) => a.start - b.start)) {
      let lane = lanes.findIndex((end) => end <= bar.start);
      if (lane < 0) lane = lanes.length < MAX_LANES ? lanes.push(0) - 1 : lanes.length - 1;
      lanes[lane] = bar.end;
      bar.lane = hosts + lane;
    }
    this.rows = hosts + lanes.length;
    this.byRow = Array.from({ length: this.rows }, () => []);
    for (const [i, bar] of bars.entries()) {
      const rows = bar.lane === undefined ? bar.rows : [bar.lane];
      bar.runs = runs(rows);
      for (const row of rows) this.byRow[row].push(i);
    }
    this.bars = bars;
    this.lanes = lanes.length;
    this.data = data;
    if (this.t0 === null) this.t0 = data.time - this.window / 12;
    this.draw();
  }

  /** How the chart is laid out now (read by tests to find a bar on the screenshot). */
  layout() {
    const width = Math.max(this.body.parentElement.clientWidth, LEFT + 200);
    const rowHeight = Math.max(3, Math.min(20, Math.floor(720 / Math.max(this.rows, 1))));
    return { left: LEFT, width, rowHeight, t0: this.t0, t1: this.t0 + this.window, rows: this.rows };
  }

  x(t, l) { return l.left + ((t - l.t0) / (l.t1 - l.t0)) * (l.width - l.left); }

  draw() {
    if (!this.data) return;
    const started = performance.now();
    const l = this.layout();
    const ratio = window.devicePixelRatio || 1;
    const height = l.rows * l.rowHeight + 1;
    for (const [canvas, h] of [[this.body, height], [this.axis, AXIS]]) {
      canvas.style.width = `${l.width}px`;
      canvas.style.height = `${h}px`;
      if (canvas.width !== Math.round(l.width * ratio) || canvas.height !== Math.round(h * ratio)) {
        canvas.width = Math.round(l.width * ratio);
        canvas.height = Math.round(h * ratio);
      }
    }
    const g = this.body.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, l.width, height);
    this.drawRows(g, l);
    g.save();
    g.beginPath();
    g.rect(l.left, 0, l.width - l.left, height);
    g.clip();
    for (const layer of LAYERS) this.drawLayer(g, l, layer);
    this.drawLabels(g, l);
    this.drawLine(g, l, this.data.horizon, COLOURS.horizon, [6, 4], height);
    this.drawLine(g, l, this.data.time, COLOURS.now, [], height);
    g.restore();
    this.drawAxis(l);
    drawn("drawn", performance.now() - started);
  }

  drawRows(g, l) {
    const { hosts } = this.data;
    const every = Math.ceil(12 / l.rowHeight); // a name every row when they fit
    g.font = `${Math.min(12, l.rowHeight - 2)}px system-ui, sans-serif`;
    g.textBaseline = "middle";
    for (let row = 0; row < l.rows; row++) {
      const y = row * l.rowHeight;
      const host = hosts[row];
      if (row % 2 === 1 && l.rowHeight >= 6) {
        g.fillStyle = "#f7f8fa";
        g.fillRect(l.left, y, l.width - l.left, l.rowHeight);
      }
      if (host && host.state !== "up") {
        g.fillStyle = COLOURS[host.state] ?? COLOURS.down;
        g.fillRect(l.left, y, l.width - l.left, l.rowHeight);
      }
      if (row % every === 0 && l.rowHeight >= 8) {
        g.fillStyle = host ? (host.state === "up" ? "#1d2430" : "#c62828") : "#667085";
        const name = host ? host.name + (host.state === "up" ? "" : ` (${host.state})`) : "pending";
        g.fillText(name, 4, y + l.rowHeight / 2, LEFT - 8);
      }
    }
    if (l.rowHeight < 8) { // too many hosts for names: their count, and where the lanes start
      g.fillStyle = "#667085";
      g.font = "11px system-ui, sans-serif";
      g.fillText(`${hosts.length} hosts`, 4, 8, LEFT - 8);
      if (this.lanes) g.fillText("pending", 4, hosts.length * l.rowHeight + 6, LEFT - 8);
    }
  }

  drawLayer(g, l, layer) {
    g.fillStyle = COLOURS[layer];
    const outline = layer === "placeholder" || layer === "ghost" || layer === "reservation";
    if (outline) {
      g.strokeStyle = "rgba(0, 0, 0, 0.55)";
      g.lineWidth = 1;
    }
    const gap = l.rowHeight >= 6 ? 1 : 0;
    for (const bar of this.bars) {
      if (bar.layer !== layer || bar.end <= l.t0 || bar.start >= l.t1) continue;
      const x0 = Math.max(this.x(bar.start, l), l.left);
      const x1 = Math.min(this.x(bar.end, l), l.width);
      const w = Math.max(x1 - x0, 1);
      for (const [first, count] of bar.runs) {
        const y = first * l.rowHeight + gap;
        const h = count * l.rowHeight - 2 * gap;
        g.fillRect(x0, y, w, h);
        if (outline && w > 3) g.strokeRect(x0 + 0.5, y + 0.5, w - 1, h - 1);
      }
    }
  }

  drawLabels(g, l) {
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "middle";
    for (const bar of this.bars) {
      if (bar.end <= l.t0 || bar.start >= l.t1) continue;
      const x0 = Math.max(this.x(bar.start, l), l.left);
      const x1 = Math.min(this.x(bar.end, l), l.width);
      if (x1 - x0 < 36) continue;
      const text = fitted(g, label(bar), x1 - x0 - 8);
      if (!text) continue;
      for (const [first, count] of bar.runs) {
        if (count * l.rowHeight < 13) continue;
        g.fillStyle = bar.layer === "running" || bar.layer === "inside" ? "#fff" : "#1d2430";
        g.fillText(text, x0 + 4, (first + count / 2) * l.rowHeight);
      }
    }
  }

  drawLine(g, l, t, colour, dash, height) {
    const x = this.x(t, l);
    g.strokeStyle = colour;
    g.lineWidth = 2;
    g.setLineDash(dash);
    g.beginPath();
    g.moveTo(x, 0);
    g.lineTo(x, height);
    g.stroke();
    g.setLineDash([]);
  }

  drawAxis(l) {
    const ratio = window.devicePixelRatio || 1;
    const g = this.axis.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, l.width, AXIS);
    const perPixel = (l.t1 - l.t0) / (l.width - l.left);
    const step = STEPS.find((s) => s / perPixel >= 90) ?? STEPS[STEPS.length - 1];
    const offset = new Date().getTimezoneOffset() * 60; // ticks on the reader's whole hours
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "top";
    g.strokeStyle = "#d0d5dd";
    g.fillStyle = "#667085";
    for (let t = Math.ceil((l.t0 - offset) / step) * step + offset; t < l.t1; t += step) {
      const x = this.x(t, l);
      g.beginPath();
      g.moveTo(x, AXIS - 8);
      g.lineTo(x, AXIS);
      g.stroke();
      const text = step >= 86400 ? clock(t).slice(0, 10) : clock(t).slice(-8, -3);
      g.fillText(text, x + 3, 4);
    }
    g.fillText(`${span(l.t1 - l.t0)} shown`, 4, 4);
    g.fillStyle = COLOURS.now;
    g.fillText("now", this.x(this.data.time, l) + 3, 18);
  }

  /** The bar under the pointer, if any, with what is known of it. */
  hover(event) {
    const found = this.at(event.offsetX, event.offsetY);
    if (!found) {
      this.tooltip.style.display = "none";
      return;
    }
    const host = this.data.hosts[Math.floor(event.offsetY / this.layout().rowHeight)];
    this.tooltip.textContent = describe(found, host);
    this.tooltip.style.display = "block";
    this.tooltip.style.left = `${event.clientX + 14}px`;
    this.tooltip.style.top = `${event.clientY + 14}px`;
  }

  at(x, y) {
    const l = this.layout();
    const row = Math.floor(y / l.rowHeight);
    if (!this.data || x < l.left || row < 0 || row >= l.rows) return null;
    const t = l.t0 + ((x - l.left) / (l.width - l.left)) * (l.t1 - l.t0);
    const under = this.byRow[row].map((i) => this.bars[i]).filter((b) => b.start <= t && t < b.end);
    under.sort((a, b) => LAYERS.indexOf(b.layer) - LAYERS.indexOf(a.layer)); // the top one
    return under[0] ?? null;
  }

  zoom(factor, around = null) {
    const t = around ?? this.t0 + this.window / 2;
    const window = Math.min(Math.max(this.window * factor, 600), 60 * 86400);
    this.t0 = t - ((t - this.t0) / this.window) * window;
    this.window = window;
    this.draw();
  }

  scroll(fraction) {
    this.t0 += this.window * fraction;
    this.draw();
  }

  show(window) {
    this.window = window;
    this.t0 = this.data.time - window / 12;
    this.draw();
  }

  wheel(event) {
    event.preventDefault();
    if (event.ctrlKey || event.metaKey) {
      const l = this.layout();
      const t = l.t0 + ((event.offsetX - l.left) / (l.width - l.left)) * (l.t1 - l.t0);
      this.zoom(event.deltaY > 0 ? 1.25 : 0.8, t);
    } else if (Math.abs(event.deltaX) > Math.abs(event.deltaY) || event.shiftKey) {
      this.scroll((event.deltaX || event.deltaY) / 1000);
    } else {
      return; // let the page scroll down the hosts
    }
  }

  drag(event) {
    const l = this.layout();
    const from = event.clientX;
    const t0 = this.t0;
    const move = (e) => {
      this.t0 = t0 - ((e.clientX - from) / (l.width - l.left)) * this.window;
      this.draw();
    };
    const up = () => {
      window.removeEventListener("mousemove", move);
      window.removeEventListener("mouseup", up);
    };
    window.addEventListener("mousemove", move);
    window.addEventListener("mouseup", up);
  }
}

/** Consecutive rows as [first, count] runs: one rectangle each. */
export function runs(rows) {
  const found = [];
  for (const row of rows) {
    const last = found[found.length - 1];
    if (last && last[0] + last[1] === row) last[1] += 1;
    else found.push([row, 1]);
  }
  return found;
}

/** The text cut to fit ``width`` pixels (with an ellipsis), or "" when not even a few letters
 * fit: squeezed letters would be unreadable. */
function fitted(g, text, width) {
  if (g.measureText(text).width <= width) return text;
  for (let n = text.length - 1; n >= 3; n--) {
    const cut = `${text.slice(0, n)}…`;
    if (g.measureText(cut).width <= width) return cut;
  }
  return "";
}

function label(bar) {
  if (bar.kind === "placeholder" || bar.kind === "ghost") {
    return bar.session ? `${bar.session}${bar.kind === "ghost" ? " (ghost)" : ""}` : bar.kind;
  }
  return bar.id;
}

export function describe(bar, host) {
  const lines = [];
  const kinds = {
    running: "local job, running", pending: "local job, pending (predicted start)",
    placeholder: "bridge placeholder", ghost: "ghost (held for fair start)", reservation: "reservation",
  };
  lines.push(`${kinds[bar.kind]}: ${bar.id}`);
  if (bar.session) lines.push(`session ${bar.session} of ${bar.owner} (${bar.state})`);
  if (bar.user) lines.push(`user ${bar.user}`);
  if (bar.inside) lines.push(`inside ${bar.inside}`);
  lines.push(`${clock(bar.start)} → ${clock(bar.end)} (${span(bar.end - bar.start)})`);
  lines.push(`${bar.hosts} host${bar.hosts === 1 ? "" : "s"}${host ? `, here ${host.name}` : ""}`);
  return lines.join("\n");
}
