// The cluster overview: every GPU as a cell colored by how full it is,
// grouped by node, and the jobs with what their active alerts say.

import { alertTable } from "./alerts.js";
import {
  badge, el, fmtBytes, fmtClock, fmtDur, fmtPct, jobLink, memColor, memLegend, placeholder,
  section, severityRank,
} from "./dom.js";

/** Seconds without news after which a node is shown as stale. */
const STALE_S = 30;

/** Renders the overview from `{cluster, nodes, jobs, active}` into `root`. */
export function renderOverview(root, d) {
  const now = d.active.now;
  const [gpus, gpuBody] = section("GPUs", null, "gpus-panel");
  gpuBody.append(memLegend());
  if (!d.nodes.nodes.length) gpuBody.append(placeholder("No node has reported yet."));
  for (const node of d.nodes.nodes) gpuBody.append(nodeGroup(node, d.cluster.now_ms, d.active.alerts));

  const [jobs, jobsBody] = section("Jobs", "Risk, forecast and flags come from the job's active alerts.");
  jobsBody.append(jobTable(d.jobs.jobs, d.active.alerts, now));

  const [alerts, alertsBody] = section("Active alerts");
  alertsBody.append(alertTable(d.active.alerts, now, { empty: "No active alerts." }));

  root.replaceChildren(gpus, jobs, alerts);
}

function nodeGroup(node, nowMs, active) {
  const age = (nowMs - node.last_seen_ms) / 1000;
  const stale = Number.isFinite(age) && age > STALE_S;
  return el("div", { class: "node" + (stale ? " stale" : ""), data: { node: node.node } },
    el("div", { class: "node-head" },
      el("span", { class: "node-name", text: node.node }),
      el("span", { class: "muted", text: "agent " + node.agent_id }),
      el("span", { class: stale ? "stale-note" : "muted",
        text: "last report " + (Number.isFinite(age) ? fmtDur(age) + " ago" : "—") })),
    el("div", { class: "gpu-grid" }, node.gpus.map((g) =>
      gpuCell(node.node, g, active.filter((a) => a.node === node.node && a.gpu === g.index)))));
}

function gpuCell(node, g, alerts) {
  const frac = g.total_bytes > 0 ? g.used_bytes / g.total_bytes : NaN;
  const kinds = [...new Set(alerts.map((a) => a.kind))].sort();
  const procs = g.processes.map((p) => el("div", { class: "proc" },
    p.job != null
      ? [jobLink(p.job, p.job), el("span", { text: p.rank != null ? " · rank " + p.rank : "" })]
      : el("span", { class: "muted", text: "pid " + p.pid }),
    el("span", { class: "muted", text: " " + fmtBytes(p.used_bytes) })));
  return el("div", {
    class: "gpu" + (alerts.length ? " alerting" : ""),
    style: { background: memColor(frac) },
    title: g.name + " (" + g.uuid + ")",
    data: { node, gpu: g.index, gpuUuid: g.uuid, memPct: Number.isFinite(frac) ? Math.round(frac * 100) : "" },
  },
  el("div", { class: "gpu-head" },
    el("span", { class: "gpu-index", text: "GPU " + g.index }),
    el("span", { class: "gpu-pct", text: fmtPct(frac) })),
  el("div", { class: "gpu-mem", text: fmtBytes(g.used_bytes) + " / " + fmtBytes(g.total_bytes) }),
  el("div", { class: "gpu-meta" },
    g.util_pct != null ? "util " + Math.round(g.util_pct) + " %" : "util —",
    " · peak " + fmtBytes(g.peak_used_bytes)),
  el("div", { class: "gpu-procs" }, procs.length ? procs : el("span", { class: "muted", text: "idle" })),
  kinds.length ? el("div", { class: "gpu-alerts" }, kinds.map((k) => badge(k === "oom_predicted" ? "OOM" : k, "flag flag-" + k))) : null,
  el("div", { class: "gpu-name", text: g.name }));
}

function jobTable(jobs, active, now) {
  if (!jobs.length) return placeholder("No job has been seen yet.");
  const head = ["job", "state", "world size", "ranks", "fullest GPU", "risk", "forecast", "flags"];
  const rows = jobs.map((j) => {
    const mine = active.filter((a) => a.job === j.job);
    const ooms = mine.filter((a) => a.kind === "oom_predicted");
    const worst = ooms.reduce((w, a) => (severityRank(a.severity) > severityRank(w) ? a.severity : w), null);
    const next = ooms.map((a) => a.predicted_oom_t).filter(Number.isFinite).sort((a, b) => a - b)[0];
    const flags = new Map();
    for (const a of mine) if (a.kind !== "oom_predicted") flags.set(a.kind, (flags.get(a.kind) || 0) + 1);
    const fullest = Math.max(0, ...j.ranks.map((r) => (r.total_bytes > 0 ? r.used_bytes / r.total_bytes : 0)));
    return el("tr", { class: "job-row", data: { job: j.job } },
      el("td", null, jobLink(j.job)),
      el("td", null, badge(j.live ? "live" : "ended", j.live ? "state-active" : "state-resolved")),
      el("td", { class: "num", text: String(j.world_size) }),
      el("td", { class: "num", text: String(j.ranks.filter((r) => r.ended_ms == null && !r.lost).length) + " live / " + j.ranks.length }),
      el("td", null, el("span", { class: "swatch", style: { background: memColor(fullest) } }), " " + fmtPct(fullest)),
      el("td", null, worst ? badge(worst, "sev-" + worst) : el("span", { class: "muted", text: "none" })),
      el("td", { text: next !== undefined && Number.isFinite(now)
        ? "OOM in " + fmtDur(next - now) + " (" + fmtClock(next) + ")" : "—" }),
      el("td", null, [...flags].map(([k, n]) => badge(n > 1 ? k + " ×" + n : k, "flag flag-" + k))));
  });
  return el("table", { class: "jobs" },
    el("thead", null, el("tr", null, head.map((h) => el("th", { text: h })))),
    el("tbody", null, rows));
}
