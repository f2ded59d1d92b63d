// gpumon dashboard: hash routes, one poll loop, the header.
//
// Routes: #/ (overview), #/jobs/NAME, #/alerts, #/actions. Every 2 s (more
// when the answers are slow to come) the loop fetches what the current route
// shows, one request at a time, and re-renders; on errors it backs off and
// says so in the header. URLs are
// relative, so the page works behind a reverse proxy that adds a prefix.

import { actionTable, alertTable, mergeAlerts } from "./alerts.js";
import { BIG_JOB_RANKS, BigJobPage, COLUMNS, POINTS, TOP_RANKS } from "./bigjob.js";
import { clockIsUtc, el, fmtClock, placeholder, section, setClockUtc } from "./dom.js";
import { JobPage } from "./job.js";
import { renderOverview } from "./overview.js";
import { settingsPanel } from "./settings.js";

/** A view older than this (ms) is flagged in the header as possibly stale. */
const STALE_VIEW_MS = 2000;
const POLL_MS = 2000;
const MAX_BACKOFF_MS = 30000;
const REQUEST_TIMEOUT_MS = 10000;
/** Alerts and actions a list fetches (the newest). */
const LIST_LIMIT = 200;

const root = document.getElementById("page");
const conn = document.getElementById("conn");
const summary = document.getElementById("summary");
const banner = document.getElementById("banner");

const state = {
  route: null,
  jobPage: null,
  failures: 0,
  timer: null,
  inFlight: false,
  again: false,
  /** Whether any answer has been shown yet. */
  rendered: false,
  /** The last snapshot list: `{job, at, list}`. */
  snapshots: null,
  /** The big job shown, with its time range (s back, 0: all) and chosen node: `{job, range, node}`. */
  big: null,
};

/** An HTTP answer that is not 2xx, with the API's reason. */
class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function getJson(path) {
  let res;
  try {
    res = await fetch(path, { headers: { accept: "application/json" }, cache: "no-store", signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  } catch (e) {
    throw new Error("cannot reach the coordinator (" + (e && e.name === "TimeoutError" ? "timed out" : e.message) + ")");
  }
  if (!res.ok) {
    let reason = res.statusText;
    try {
      const body = await res.json();
      if (body && body.message) reason = body.message;
    } catch (_) { /* not JSON: keep the status text */ }
    throw new HttpError(res.status, res.status + " " + reason);
  }
  return res.json();
}

function parseRoute() {
  const h = location.hash.replace(/^#\/?/, "");
  if (h.startsWith("jobs/") && h.length > 5) {
    let job;
    try {
      job = decodeURIComponent(h.slice(5));
    } catch (_) {
      job = h.slice(5);
    }
    return { page: "job", job, key: "job:" + job };
  }
  if (h === "alerts") return { page: "alerts", key: "alerts" };
  if (h === "actions") return { page: "actions", key: "actions" };
  if (h === "settings") return { page: "settings", key: "settings" };
  return { page: "overview", key: "overview" };
}

const enc = encodeURIComponent;

/** Snapshots are rare and their list carries every rank: asked for at most this often. */
const SNAPSHOTS_EVERY_MS = 30000;

/** The job's named snapshots, from the last answer while it is fresh. */
async function snapshotList(job) {
  const kept = state.snapshots;
  if (kept && kept.job === job && Date.now() - kept.at < SNAPSHOTS_EVERY_MS) return kept.list;
  const list = await getJson("api/v1/jobs/" + enc(job) + "/snapshots");
  state.snapshots = { job, at: Date.now(), list };
  return list;
}

/** Fetches, one after the other, what `route` shows. */
async function load(route) {
  const d = {};
  d.cluster = await getJson("api/v1/cluster");
  d.active = await getJson("api/v1/alerts?active=true");
  if (route.page === "overview") {
    d.nodes = await getJson("api/v1/nodes");
    d.jobs = await getJson("api/v1/jobs");
  } else if (route.page === "job") {
    if (!state.big || state.big.job !== route.job) {
      state.big = null;
      try {
        // Up to BIG_JOB_RANKS ranks this is the whole job, as the plain read gives it.
        d.detail = await getJson("api/v1/jobs/" + enc(route.job) + "?ranks=top:" + BIG_JOB_RANKS + "&rest=none");
      } catch (e) {
        if (e instanceof HttpError && e.status === 404) {
          d.missing = e.message;
          return d;
        }
        throw e;
      }
      if (d.detail.ranks_total > BIG_JOB_RANKS) state.big = { job: route.job, range: 0, node: null };
    }
    if (state.big) return loadBig(route, d);
    d.jobAlerts = await getJson("api/v1/alerts?job=" + enc(route.job) + "&limit=" + LIST_LIMIT);
    d.snapshots = await snapshotList(route.job);
    d.actions = await getJson("api/v1/actions?job=" + enc(route.job) + "&limit=" + LIST_LIMIT);
  } else if (route.page === "alerts") {
    d.recent = await getJson("api/v1/alerts?limit=" + LIST_LIMIT);
  } else if (route.page === "actions") {
    d.actions = await getJson("api/v1/actions?limit=" + LIST_LIMIT);
  } else if (route.page === "settings") {
    d.settings = await getJson("api/v1/config");
  }
  return d;
}

/** A big job's parts: the worst ranks, the summary, the chosen node's ranks; within the time range. */
async function loadBig(route, d) {
  const big = state.big;
  const base = "api/v1/jobs/" + enc(route.job);
  let range = "";
  if (big.range > 0 && d.cluster.now_ms) {
    range = "&since=" + (d.cluster.now_ms / 1000 - big.range).toFixed(3) + "&until=" + (d.cluster.now_ms / 1000).toFixed(3);
  }
  d.big = true;
  d.detail = await getJson(base + "?ranks=top:" + TOP_RANKS + "&rest=none&points=" + POINTS + range);
  d.summary = await getJson(base + "/summary?columns=" + COLUMNS + range);
  if (big.node) d.nodeDetail = await getJson(base + "?node=" + enc(big.node) + "&points=" + POINTS + range);
  d.jobAlerts = await getJson("api/v1/alerts?job=" + enc(route.job) + "&limit=" + LIST_LIMIT);
  return d;
}

function renderHeader(d) {
  const c = d.cluster;
  const rc = c.coordinator;
  const items = [
    [c.nodes, c.nodes === 1 ? "node" : "nodes"],
    [c.gpus, c.gpus === 1 ? "GPU" : "GPUs"],
    [c.live_jobs, c.live_jobs === 1 ? "live job" : "live jobs"],
    [c.live_ranks, c.live_ranks === 1 ? "live rank" : "live ranks"],
  ].map(([n, what]) => el("span", { class: "stat" }, el("b", { text: String(n) }), " " + what));
  if (rc) {
    items.push(el("span", { class: "stat", title: "the replica that answers this page" },
      "replica " + rc.id + " · " + (rc.leader != null ? "leader " + rc.leader : "no leader") + " · term " + rc.term));
    // A replica cut off from its cluster serves what it has: say how old.
    if (rc.view_age_ms > STALE_VIEW_MS) {
      items.push(el("span", { class: "stat stale", id: "stale-view",
        title: "this replica has not heard from a leader for that long; its view may be out of date",
        text: "view " + Math.round(rc.view_age_ms / 1000) + " s old" }));
    }
  }
  items.push(el("span", { class: "stat muted", text: "data " + (c.now_ms ? fmtClock(c.now_ms / 1000) : "—") +
    " · updated " + fmtClock(Date.now() / 1000) }));
  summary.replaceChildren(...items);
  const n = d.active.alerts.length;
  const count = document.getElementById("alert-count");
  count.textContent = String(n);
  count.className = "count" + (n ? " hot" : "");
}

function renderNav(route) {
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("current", a.dataset.route === (route.page === "job" ? "overview" : route.page));
  }
}

function render(route, d) {
  renderHeader(d);
  if (route.page !== "job" && state.jobPage) {
    state.jobPage.destroy();
    state.jobPage = null;
  }
  if (route.page === "overview") {
    renderOverview(root, d);
  } else if (route.page === "job") {
    if (d.missing) {
      if (state.jobPage) state.jobPage.destroy();
      state.jobPage = null;
      const [s, body] = section("Job " + route.job);
      body.append(placeholder(d.missing), el("p", null, el("a", { href: "#/", text: "back to the overview" })));
      root.replaceChildren(s);
      return;
    }
    if (!state.jobPage || state.jobPage.job !== route.job || !!state.jobPage.big !== !!d.big) {
      if (state.jobPage) state.jobPage.destroy();
      state.jobPage = d.big ? new BigJobPage(root, route.job, state.big, poll) : new JobPage(root, route.job);
    }
    if (d.big) {
      state.jobPage.update({
        detail: d.detail,
        summary: d.summary,
        node: d.nodeDetail || null,
        alerts: mergeAlerts(d.jobAlerts.alerts, d.active.alerts.filter((a) => a.job === route.job)),
        now: d.active.now,
      });
      return;
    }
    state.jobPage.update({
      detail: d.detail,
      alerts: mergeAlerts(d.jobAlerts.alerts, d.active.alerts),
      actions: d.actions.actions,
      now: d.active.now,
      snapshots: d.snapshots,
    });
  } else if (route.page === "alerts") {
    const all = mergeAlerts(d.recent.alerts, d.active.alerts);
    const [s, body] = section("Alerts", "Active alerts first, then the " + LIST_LIMIT + " most recent.");
    body.append(alertTable(all, d.active.now));
    root.replaceChildren(s);
  } else if (route.page === "actions") {
    const [s, body] = section("Actions", "Actions on training processes, newest first" +
      (d.actions.truncated ? " (" + d.actions.truncated + " older not shown)" : "") + ".");
    body.append(actionTable(d.actions.actions));
    root.replaceChildren(s);
  } else if (route.page === "settings") {
    const [s, body] = section("Settings", "Detection and notification settings in effect; " +
      "change them live with gpumon config set (through the Raft log, nothing restarts).");
    body.append(...settingsPanel(d.settings));
    root.replaceChildren(s);
  }
}

function setConnection(ok, message, retryMs) {
  conn.dataset.conn = ok ? "ok" : "lost";
  conn.textContent = ok ? "live" : "connection lost";
  document.body.classList.toggle("disconnected", !ok);
  if (ok) {
    banner.hidden = true;
    banner.replaceChildren();
  } else {
    banner.hidden = false;
    banner.replaceChildren(el("b", { text: "Connection lost: " }), message.replace(/\.?$/, ". "),
      "Retrying in " + Math.round(retryMs / 1000) + " s; " +
      (state.rendered ? "the page shows the last data received." : "no data received yet."));
  }
}

/**
 * Marks the first page on screen for tests and benchmarks: when it was done,
 * from navigation start (ms), and how long the data fetches before it took
 * (ms, request start to last byte, summed: the loop fetches one at a time),
 * from the browser's resource timing.
 */
function markFirstRender() {
  const at = performance.now();
  const fetches = performance.getEntriesByType("resource").filter((e) => e.initiatorType === "fetch");
  root.dataset.firstFetchMs = String(Math.round(fetches.reduce((sum, e) => sum + e.responseEnd - e.startTime, 0)));
  root.dataset.firstFetches = String(fetches.length);
  root.dataset.firstRenderMs = String(Math.round(at));
}

async function poll() {
  clearTimeout(state.timer);
  if (state.inFlight) {
    state.again = true;
    return;
  }
  state.inFlight = true;
  const route = state.route;
  let delay = POLL_MS;
  const began = performance.now();
  try {
    const d = await load(route);
    // A big job's history takes a while to fetch: keep polling from
    // taking more than about a third of the coordinator's and the page's time.
    delay = Math.max(POLL_MS, 2 * (performance.now() - began));
    // A route change during the requests: this answer is for the old page.
    if (route === state.route) {
      render(route, d);
      state.rendered = true;
      if (!root.dataset.firstRenderMs) markFirstRender();
    }
    state.failures = 0;
    setConnection(true);
  } catch (e) {
    state.failures += 1;
    delay = Math.min(MAX_BACKOFF_MS, POLL_MS * 2 ** state.failures);
    setConnection(false, String(e.message || e), delay);
  } finally {
    state.inFlight = false;
  }
  if (state.again) {
    state.again = false;
    delay = 0;
  }
  state.timer = setTimeout(poll, delay);
}

function onRoute() {
  const route = parseRoute();
  const changed = !state.route || route.key !== state.route.key;
  state.route = route;
  renderNav(route);
  if (changed) {
    if (state.jobPage && (route.page !== "job" || state.jobPage.job !== route.job)) {
      state.jobPage.destroy();
      state.jobPage = null;
    }
    root.replaceChildren(placeholder("Loading…"));
    window.scrollTo(0, 0);
  }
  poll();
}

let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => state.jobPage && state.jobPage.resize(), 150);
});
window.addEventListener("hashchange", onRoute);
const clockToggle = document.getElementById("clock-toggle");
const showClock = () => { clockToggle.textContent = clockIsUtc() ? "UTC" : "local time"; };
clockToggle.addEventListener("click", () => { setClockUtc(!clockIsUtc()); showClock(); poll(); });
showClock();
conn.dataset.conn = "connecting";
onRoute();
