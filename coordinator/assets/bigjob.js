// The job page of a big job (more ranks than BIG_JOB_RANKS): instead of
// every rank's history it shows what the API's summary and the worst
// ranks say, so that 8,000 ranks draw in about a second: the memory chart
// of the worst ranks only, the rank x time heatmap from the summary's
// matrix on a relative scale, the nodes (click one for its ranks) and a
// rank table limited to the worst ranks or the chosen node's. A time range
// control sets `since`/`until` on both requests.

import { alertTable, sortAlerts } from "./alerts.js";
import { MemoryChart, alignHistories } from "./chart.js";
import { MatrixHeatmap } from "./matrix.js";
import { badge, el, fmtBytes, fmtClock, fmtPct, memColor, section } from "./dom.js";

/** Jobs with more ranks than this get this page. */
export const BIG_JOB_RANKS = 64;
/** Worst ranks whose history the page asks for. */
export const TOP_RANKS = 32;
/** Points per history asked for: about one per two pixels of the chart. */
export const POINTS = 400;
/** Heatmap columns asked for. */
export const COLUMNS = 120;
/** Nodes listed, the fullest first. */
const NODES_SHOWN = 50;
/** Alerts listed: the active ones first, then the newest resolved. */
const ALERTS_SHOWN = 50;
/** The time range choices: label and seconds back from the newest data (0: all). */
export const RANGES = [["15 min", 900], ["1 h", 3600], ["6 h", 21600], ["all", 0]];

export class BigJobPage {
  /** `onChange()` is called when the range or the node changes, to fetch again. */
  constructor(root, job, view, onChange) {
    this.job = job;
    this.big = true;
    this.view = view;
    this.onChange = onChange;
    this.title = el("div", { class: "job-title" });
    this.controls = el("div", { class: "range-controls" });

    const [chartPanel, chartBody] = section("Memory of the worst ranks",
      "The " + TOP_RANKS + " worst ranks only (an active alert first, then the fullest), each window's maximum. Dashed red: GPU capacity.");
    const chartHost = el("div", { class: "chart" });
    chartBody.append(chartHost);
    this.chart = new MemoryChart(chartHost, () => {});
    const [heatPanel, heatBody] = section("Rank × time",
      "Every rank's highest used share per time bucket, on a relative scale from the lowest to the highest cell.");
    this.heatmap = new MatrixHeatmap(heatBody);
    const [nodesPanel, nodesBody] = section("Nodes", "Used share of the job's ranks per node, fullest first. Click a node for its ranks.");
    this.nodesBody = nodesBody;
    const [ranksPanel, ranksBody] = section("Ranks");
    this.ranksBody = ranksBody;
    const [alertsPanel, alertsBody] = section("Alerts", "The job's active alerts first, then the newest resolved ones (" + ALERTS_SHOWN + " at most).");
    this.alertsBody = alertsBody;
    root.replaceChildren(this.title, this.controls, alertsPanel, chartPanel, heatPanel, nodesPanel, ranksPanel);
  }

  /** `d`: `{detail, summary, node, alerts, now}` (`node`: the chosen node's detail, if any). */
  update(d) {
    const shown = sortAlerts(d.alerts || []).slice(0, ALERTS_SHOWN);
    this.alertsBody.replaceChildren(alertTable(shown, d.now, { hideJob: true, empty: "No alerts for this job." }));
    const s = d.summary;
    this.title.replaceChildren(
      el("h1", null, "Job ", el("span", { class: "job-name", text: this.job }), " ",
        badge(d.detail.live ? "live" : "ended", d.detail.live ? "state-active" : "state-resolved")),
      el("p", { class: "muted", id: "job-scale", data: { ranks: s.ranks_total, nodes: s.nodes.length },
        text: "world size " + s.world_size + " · " + s.ranks_total + " ranks on " + s.nodes.length + " nodes · " +
          s.ranks_alerting + " with an active alert" }));
    this.renderControls();
    this.renderChart(d.detail);
    this.heatmap.update(s.heatmap);
    this.renderNodes(s.nodes);
    this.renderRanks(d.node || d.detail, d.node ? "node" : "top", s.ranks_total);
  }

  renderControls() {
    const buttons = RANGES.map(([label, secs]) => el("button", {
      type: "button",
      class: "range-button" + (this.view.range === secs ? " current" : ""),
      data: { range: secs },
      text: label,
      onclick: () => { this.view.range = secs; this.onChange(); },
    }));
    this.controls.replaceChildren(el("span", { class: "muted", text: "time range: " }), ...buttons);
  }

  renderChart(detail) {
    const ranks = [...detail.ranks].sort((a, b) => a.rank - b.rank);
    const { xs, values } = alignHistories(ranks);
    this.chart.update({
      ranks: ranks.map((r) => r.rank),
      xs,
      values,
      capacity: Math.max(0, ...ranks.map((r) => r.total_bytes)),
      xRange: [xs.length ? xs[0] : NaN, xs.length ? xs[xs.length - 1] : NaN],
      now: NaN,
      forecasts: [],
      markers: [],
    });
  }

  renderNodes(nodes) {
    const sorted = [...nodes].sort((a, b) => b.max_share - a.max_share || a.node.localeCompare(b.node));
    const shown = sorted.slice(0, NODES_SHOWN);
    const bar = (f) => el("div", { class: "usebar" }, el("div", { style: { width: f * 100 + "%", background: memColor(f) } }));
    const rows = shown.map((n) => el("tr", {
      class: "node-row" + (n.node === this.view.node ? " current" : "") + (n.alerts ? " flagged" : ""),
      data: { node: n.node },
      onclick: () => { this.view.node = this.view.node === n.node ? null : n.node; this.onChange(); },
    },
    el("td", { text: n.node }),
    el("td", { class: "num", text: String(n.ranks) }),
    el("td", { text: fmtPct(n.min_share) }),
    el("td", { text: fmtPct(n.median_share) }),
    el("td", null, bar(n.max_share), el("span", { text: fmtPct(n.max_share) + " (rank " + n.worst_rank + ")" })),
    el("td", { class: "num", text: n.alerts ? String(n.alerts) : "—" })));
    this.nodesBody.replaceChildren(
      el("p", { class: "note", id: "nodes-note", data: { shown: shown.length, total: nodes.length },
        text: "The " + shown.length + " fullest of " + nodes.length + " nodes." }),
      el("table", { class: "nodes" },
        el("thead", null, el("tr", null, ["node", "ranks", "lowest", "median", "highest", "alerting"].map((h) => el("th", { text: h })))),
        el("tbody", null, rows)));
  }

  renderRanks(detail, what, total) {
    const summaries = new Map((detail.analysis ? detail.analysis.ranks : []).map((s) => [s.rank, s]));
    const ranks = [...detail.ranks].sort((a, b) => b.used_bytes / (b.total_bytes || 1) - a.used_bytes / (a.total_bytes || 1));
    const note = what === "node"
      ? "The " + ranks.length + " ranks on " + this.view.node + " (click the node again for the worst ranks)."
      : "The " + ranks.length + " worst of " + total + " ranks; click a node above for its ranks.";
    const rows = ranks.map((r) => {
      const s = summaries.get(r.rank);
      const frac = r.total_bytes ? r.used_bytes / r.total_bytes : NaN;
      const flags = s ? ["leak", "imbalance", "straggler", "fragmentation"].filter((k) => s[k]) : [];
      return el("tr", { class: "rank-row" + (flags.length ? " flagged" : ""), data: { rank: r.rank } },
        el("td", { class: "num", text: String(r.rank) }),
        el("td", { text: r.node + " / GPU " + r.gpu }),
        el("td", null,
          el("div", { class: "usebar" }, el("div", { style: { width: (Number.isFinite(frac) ? frac * 100 : 0) + "%", background: memColor(frac) } })),
          el("span", { text: fmtBytes(r.used_bytes) + (Number.isFinite(frac) ? " (" + fmtPct(frac) + ")" : "") })),
        el("td", { text: fmtBytes(r.peak_used_bytes) }),
        el("td", null, s ? badge(s.risk, "sev-" + s.risk) : "—"),
        el("td", null, flags.map((k) => badge(k, "flag flag-" + k))),
        el("td", { text: fmtClock(r.last_seen_ms / 1000) }));
    });
    this.ranksBody.replaceChildren(el("p", { class: "note", id: "ranks-note", text: note }),
      el("table", { class: "ranks" },
        el("thead", null, el("tr", null, ["rank", "node / GPU", "used", "peak", "risk", "flags", "last seen"].map((h) => el("th", { text: h })))),
        el("tbody", null, rows)));
  }

  resize() {
    this.chart.resize();
    this.heatmap.draw();
  }

  destroy() {
    this.chart.destroy();
  }
}
