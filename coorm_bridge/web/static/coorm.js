// coorm-bridge web: what every page shares (identity, API reads, live refresh, formatting).
// Texts from the bridge are only ever set as textContent: nothing it says becomes markup.

const KEY = "coorm-bridge-token";

/** The bearer token: taken from the link's fragment (then removed from the address bar),
 * else from this tab's storage. */
export function token() {
  const found = location.hash.match(/token=([^&]+)/);
  if (found) {
    sessionStorage.setItem(KEY, decodeURIComponent(found[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(KEY);
}

export class ApiError extends Error {
  constructor(status, code, detail) {
    super(detail);
    this.status = status;
    this.code = code;
  }
}

/** GET /v1<path>: the JSON answer, or an ApiError with the bridge's reason. */
export async function api(path, params = {}) {
  const query = new URLSearchParams(params).toString();
  const headers = {};
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  let answer;
  try {
    answer = await fetch(`/v1${path}${query ? `?${query}` : ""}`, { headers, cache: "no-store" });
  } catch (error) {
    throw new ApiError(0, "unreachable", `no answer: ${error.message}`);
  }
  const body = await answer.json().catch(() => null);
  if (!answer.ok) {
    throw new ApiError(answer.status, body?.error ?? "error", body?.detail ?? answer.statusText);
  }
  return body;
}

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

/** Calls refresh() now and again after each of the bridge's passes (at most once a second),
 * showing what went wrong in the page's banner and trying again while the bridge is away. */
export async function live(refresh) {
  let passes = -1;
  let last = -Infinity;
  for (;;) {
    try {
      const wait = 1000 - (performance.now() - last);
      if (wait > 0) await sleep(wait);
      last = performance.now();
      // The count is asked first (then the data, without waiting for it): what is drawn is at
      // least as new as the pass counted, so the next pass is the next change to show.
      const counted = passes < 0 ? api("/passes") : null;
      await refresh();
      if (counted) passes = (await counted).passes;
      problem(null);
      for (;;) {
        const next = await api("/passes", { after: passes, wait: 25 });
        if (next.passes > passes) {
          passes = next.passes;
          break;
        }
      }
    } catch (error) {
      if (error.status === 401) return askToken(error.message);
      problem(error.message);
      passes = -1;
      await sleep(3000);
    }
  }
}

/** The banner at the top: a problem, or nothing. */
export function problem(text) {
  const banner = document.getElementById("problem");
  if (!banner) return;
  banner.textContent = text ?? "";
  banner.classList.toggle("shown", Boolean(text));
}

function askToken(why) {
  const main = document.querySelector("main");
  const form = el("form", { class: "token" },
    el("p", {}, `The bridge asks who you are (${why}). Paste your bearer token, or open the link that coorm-bridge web printed.`),
    el("input", { type: "password", name: "token", autocomplete: "off" }),
    " ", el("button", { type: "submit" }, "Use"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, form.elements.token.value.trim());
    location.reload();
  });
  main.replaceChildren(form);
}

/** An element with attributes and children (strings become text nodes, never markup). */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

export function link(href, text) {
  return el("a", { href }, text);
}

const pad = (n) => String(n).padStart(2, "0");

/** A time as the reader's clock shows it: HH:MM:SS today, else with its date. */
export function clock(t) {
  if (t === null || t === undefined) return "-";
  const d = new Date(t * 1000);
  const hms = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  const today = new Date();
  if (d.toDateString() === today.toDateString()) return hms;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${hms}`;
}

export function span(seconds) {
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172800) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toFixed(1)} d`;
}

export function requestText(request) {
  if (!request) return "-";
  const nodes = Object.entries(request.nodes).map(([c, n]) => `${c}:${n}`).join(" ");
  return `${nodes} for ${span(request.duration)}`;
}

/** Marks the page as drawn (tests and benchmarks wait on this attribute). */
export function drawn(name, ms) {
  const body = document.body;
  body.dataset[name] = String(Number(body.dataset[name] ?? 0) + 1);
  if (ms !== undefined) body.dataset[`${name}Ms`] = ms.toFixed(1);
  body.dataset[`${name}At`] = performance.now().toFixed(1); // since the navigation's start
}
