// Alert and action lists: the alerts page, the panels on the overview and
// the job page, and the actions page.

import { badge, el, fmtBytes, fmtClock, fmtDur, jobLink, placeholder, severityRank } from "./dom.js";

/** Every alert of `lists` once (by id), the newest copy winning. */
export function mergeAlerts(...lists) {
  const byId = new Map();
  for (const list of lists) {
    for (const a of list || []) byId.set(a.id, a);
  }
  return [...byId.values()];
}

/** Active first (worst severity, then newest), then resolved (newest first). */
export function sortAlerts(alerts) {
  return [...alerts].sort((a, b) => {
    const aa = a.resolved_t == null, ba = b.resolved_t == null;
    if (aa !== ba) return aa ? -1 : 1;
    if (aa) {
      const s = severityRank(b.severity) - severityRank(a.severity);
      return s || b.t - a.t;
    }
    return b.resolved_t - a.resolved_t;
  });
}

const KIND_LABEL = {
  oom_predicted: "OOM predicted",
  leak: "leak",
  fragmentation: "fragmentation",
  imbalance: "imbalance",
  straggler: "straggler",
  memory_level: "memory level",
  stage_imbalance: "stage imbalance",
  hang: "hung job",
  slow_link: "slow link",
  outside_memory: "outside allocator",
};

/** A table of alerts; `now` is the data time (seconds) "since" is measured from. */
export function alertTable(alerts, now, opts) {
  const showJob = !(opts && opts.hideJob);
  if (!alerts.length) return placeholder(opts && opts.empty ? opts.empty : "No alerts.");
  const head = el("tr", null,
    ["state", "severity", "kind", showJob ? "job" : null, "rank", "where", "since", "what"]
      .filter((h) => h !== null).map((h) => el("th", { text: h })));
  const rows = sortAlerts(alerts).map((a) => alertRow(a, now, showJob));
  return el("table", { class: "alerts" }, el("thead", null, head), el("tbody", null, rows));
}

/**
 * Where an alert is: its node and GPU; "host RAM" for an alert about a
 * node itself (a node, no GPU, no job: its host memory level).
 */
export function alertWhere(a) {
  const onHost = a.node != null && a.gpu == null && a.job == null;
  const what = a.gpu != null ? "GPU " + a.gpu : onHost ? "host RAM" : null;
  return [a.node, what].filter(Boolean).join(" / ");
}

function alertRow(a, now, showJob) {
  const active = a.resolved_t == null;
  const where = alertWhere(a);
  const since = active
    ? [el("div", { text: fmtClock(a.t) }),
       Number.isFinite(now) ? el("div", { class: "muted", text: fmtDur(now - a.t) + " ago" }) : null]
    : [el("div", { text: "resolved " + fmtClock(a.resolved_t) }),
       el("div", { class: "muted", text: "lasted " + fmtDur(a.resolved_t - a.t) })];
  const details = [];
  if (a.predicted_oom_t != null && Number.isFinite(now)) {
    details.push("OOM at " + fmtClock(a.predicted_oom_t) + " (in " + fmtDur(a.predicted_oom_t - now) + ")");
  }
  if (a.slowdown != null) details.push("×" + a.slowdown.toFixed(2) + " slower" + (a.section ? " in " + a.section : ""));
  if (a.excess_bytes != null) details.push(fmtBytes(a.excess_bytes) + " above median");
  if (a.reclaimable_bytes != null) details.push(fmtBytes(a.reclaimable_bytes) + " reclaimable");
  return el("tr", {
    class: "alert " + (active ? "active" : "resolved"),
    data: {
      alertId: a.id,
      alertKind: a.kind,
      rank: a.rank,
      job: a.job,
      severity: a.severity,
      active: active ? "true" : "false",
    },
  },
  el("td", null, badge(active ? "active" : "resolved", active ? "state-active" : "state-resolved")),
  el("td", null, badge(a.severity, "sev-" + a.severity)),
  el("td", { class: "kind", text: KIND_LABEL[a.kind] || a.kind }),
  showJob ? el("td", null, a.job != null ? jobLink(a.job) : "—") : null,
  el("td", { class: "num", text: a.rank != null ? String(a.rank) : "—" }),
  el("td", { text: where || "—" }),
  el("td", null, since),
  el("td", { class: "what" },
    el("div", { class: "message", text: a.message }),
    details.length ? el("div", { class: "muted", text: details.join(" · ") }) : null,
    a.recommendation ? el("div", { class: "recommendation", text: "→ " + a.recommendation }) : null));
}

/** A table of actions, newest first. */
export function actionTable(actions, opts) {
  if (!actions.length) return placeholder(opts && opts.empty ? opts.empty : "No actions.");
  const cols = ["id", "kind", "job", "rank", "state", "origin", "planned", "freed", "at step", "reason"];
  const rows = [...actions].sort((a, b) => b.id - a.id).map((a) =>
    el("tr", { class: "action", data: { actionId: a.id, rank: a.rank, job: a.job, state: a.state } },
      el("td", { class: "num", text: String(a.id) }),
      el("td", { text: a.kind }),
      el("td", null, jobLink(a.job)),
      el("td", { class: "num", text: String(a.rank) }),
      el("td", null, badge(a.state, "action-" + a.state)),
      el("td", { text: a.origin }),
      el("td", { text: fmtClock(a.planned_t) }),
      el("td", { class: "num", text: a.freed_bytes != null ? fmtBytes(a.freed_bytes) : "—" }),
      el("td", { class: "num", text: a.at_step != null ? String(a.at_step) : "—" }),
      el("td", { class: "what" },
        el("div", { text: a.reason }),
        a.detail ? el("div", { class: "muted", text: a.detail }) : null,
        a.response ? el("div", { class: "muted", text: "answered: " + a.response }) : null)));
  return el("table", { class: "actions" },
    el("thead", null, el("tr", null, cols.map((c) => el("th", { text: c })))),
    el("tbody", null, rows));
}
