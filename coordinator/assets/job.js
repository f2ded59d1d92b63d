// The job page: memory chart, alerts, a row per rank, the rank x time
// heatmap, section times and imbalance bars. The page skeleton (and so the
// chart's zoom) lives as long as the route; each poll refills its sections.

import { actionTable, alertTable, sortAlerts } from "./alerts.js";
import { Heatmap, MemoryChart, alignHistories } from "./chart.js";
import { SnapshotPanel } from "./snapshots.js";
import {
  badge, el, fmtBytes, fmtClock, fmtDur, fmtMs, fmtPct, fmtSignedBytes, median, memColor,
  nameColor, placeholder, rankColor, section,
} from "./dom.js";

/** Most rows the page draws for ranks never seen (a bogus WORLD_SIZE must not flood the page). */
const MAX_UNSEEN_ROWS = 4096;
/** Resolved alerts shown before "show all". */
const RESOLVED_SHOWN = 10;
/** Markers drawn on the chart, the newest. */
const MAX_MARKERS = 50;

export class JobPage {
  constructor(root, job) {
    this.job = job;
    this.showAllResolved = false;
    this.title = el("div", { class: "job-title" });

    const [chartPanel, chartBody] = section("Memory per rank",
      "Each rank's process memory (window maximum). Dashed red: GPU capacity; dashed in a rank's color: " +
      "its OOM forecast ahead of now, shaded by its interval; purple: markers. Drag to zoom, double-click to follow live again.");
    this.liveButton = el("button", { class: "live-button", type: "button", hidden: true, text: "follow live", onclick: () => this.chart.resetZoom() });
    const chartHost = el("div", { class: "chart" });
    chartBody.append(this.liveButton, chartHost);
    this.chart = new MemoryChart(chartHost, (zoomed) => { this.liveButton.hidden = !zoomed; });

    const [alertsPanel, alertsBody] = section("Alerts");
    this.alertsBody = alertsBody;
    const [ranksPanel, ranksBody] = section("Ranks");
    this.ranksBody = ranksBody;
    const [heatPanel, heatBody] = section("Rank × time", "Memory used / capacity per window, on the overview's scale.");
    this.heatmap = new Heatmap(heatBody);
    const [sectionsPanel, sectionsBody] = section("Section times per rank", "Mean milliseconds per step section, as the hook reports them.");
    this.sectionsBody = sectionsBody;
    const [imbalancePanel, imbalanceBody] = section("Imbalance", "Memory above (+) or below (−) the job's median rank.");
    this.imbalanceBody = imbalanceBody;
    const [actionsPanel, actionsBody] = section("Actions");
    this.actionsBody = actionsBody;
    const [snapshotsPanel, snapshotsBody] = section("Snapshots",
      "Named allocator snapshots (gpumon.snapshot) compared: what grew per rank, largest first.", "snapshots-panel");
    this.snapshots = new SnapshotPanel(snapshotsBody, job);

    root.replaceChildren(this.title, chartPanel, alertsPanel, ranksPanel, heatPanel,
      el("div", { class: "two-col" }, sectionsPanel, imbalancePanel), snapshotsPanel, actionsPanel);
  }

  /** `d`: `{detail, alerts, actions, now, snapshots}`; `now` is the engine's data time (s). */
  update(d) {
    const detail = d.detail;
    const analysis = detail.analysis || null;
    const steps = detail.steps || {};
    const summaries = new Map((analysis ? analysis.ranks : []).map((s) => [s.rank, s]));
    const rankViews = new Map(detail.ranks.map((r) => [r.rank, r]));
    const rankSet = new Set([...rankViews.keys(), ...summaries.keys()]);
    for (let r = 0; r < Math.min(detail.world_size, MAX_UNSEEN_ROWS); r++) rankSet.add(r);
    const ranks = [...rankSet].sort((a, b) => a - b);
    const now = Number.isFinite(d.now) ? d.now : analysis ? analysis.last_t : NaN;
    const alerts = d.alerts.filter((a) => a.job === this.job);
    const active = alerts.filter((a) => a.resolved_t == null);

    this.title.replaceChildren(...this.titleParts(detail, analysis, now));
    this.renderChart(detail, analysis, summaries, now);
    this.renderAlerts(alerts, now);
    this.ranksBody.replaceChildren(rankTable(ranks, rankViews, summaries, steps, active, now));
    this.renderHeatmap(detail);
    this.sectionsBody.replaceChildren(...[stepVerdict(detail.step_verdict), sectionBars(ranks, steps)].filter(Boolean));
    this.imbalanceBody.replaceChildren(imbalanceBars(ranks, rankViews, summaries));
    this.actionsBody.replaceChildren(actionTable(d.actions.filter((a) => a.job === this.job), { empty: "No actions on this job." }));
    if (d.snapshots) this.snapshots.update(d.snapshots);
  }

  titleParts(detail, analysis, now) {
    const live = detail.ranks.filter((r) => r.ended_ms == null).length;
    const parts = [
      el("h1", null, "Job ", el("span", { class: "job-name", text: detail.job }), " ",
        badge(detail.live ? "live" : "ended", detail.live ? "state-active" : "state-resolved")),
      el("p", { class: "muted", text: "world size " + detail.world_size + " · " + live + " of " + detail.ranks.length +
        " ranks live" + (analysis ? " · seen " + fmtClock(analysis.first_t) + " to " + fmtClock(analysis.last_t) : "") }),
    ];
    const f = analysis && analysis.forecast;
    if (f && Number.isFinite(f.predicted_oom_t)) {
      parts.push(el("p", { class: "forecast-line", data: { rank: f.rank } },
        badge(f.risk_level, "sev-" + f.risk_level), " rank " + f.rank + " is forecast to run out of memory at " +
        fmtClock(f.predicted_oom_t) + (Number.isFinite(now) ? " (in " + fmtDur(f.predicted_oom_t - now) + ")" : "") +
        (Number.isFinite(f.confidence) ? ", confidence " + fmtPct(f.confidence) : "") +
        ", growing " + fmtBytes(f.slope_bytes_per_s) + "/s"));
    } else {
      parts.push(el("p", { class: "forecast-line muted", text: "No rank is forecast to run out of memory." }));
    }
    return parts;
  }

  renderChart(detail, analysis, summaries, now) {
    const withHistory = [...detail.ranks].sort((a, b) => a.rank - b.rank);
    const { xs, values } = alignHistories(withHistory);
    const forecasts = [];
    const main = analysis && analysis.forecast;
    for (const [rank, s] of summaries) {
      if (s.forecast) forecasts.push({ rank, f: s.forecast, main: !!main && main.rank === rank });
    }
    if (main && !forecasts.some((f) => f.main)) forecasts.push({ rank: main.rank, f: main, main: true });
    const groups = new Map();
    for (const m of (analysis ? analysis.markers : []).slice(-MAX_MARKERS)) {
      const key = m.name + "@" + Math.round(m.t);
      const g = groups.get(key) || { t: m.t, name: m.name, ranks: [] };
      g.ranks.push(m.rank);
      groups.set(key, g);
    }
    const markers = [...groups.values()].map((g) => ({
      t: g.t,
      label: g.name + (g.ranks.length > 1 ? " (" + g.ranks.length + " ranks)" : " (rank " + g.ranks[0] + ")"),
    }));
    const first = xs.length ? xs[0] : NaN;
    const last = xs.length ? xs[xs.length - 1] : NaN;
    // Draw ahead to the forecast OOM, but never more than the history's own span.
    const ahead = Math.max(-Infinity, ...forecasts.map((f) => f.f.predicted_oom_t).filter(Number.isFinite));
    const end = ahead > last ? Math.min(ahead + (ahead - last) * 0.05, last + Math.max(last - first, 60)) : last;
    this.chart.update({
      ranks: withHistory.map((r) => r.rank),
      xs,
      values,
      capacity: Math.max(0, ...detail.ranks.map((r) => r.total_bytes)),
      xRange: [first, end],
      now,
      forecasts,
      markers,
    });
  }

  renderAlerts(alerts, now) {
    const sorted = sortAlerts(alerts);
    const active = sorted.filter((a) => a.resolved_t == null);
    const resolved = sorted.filter((a) => a.resolved_t != null);
    const shown = this.showAllResolved ? resolved : resolved.slice(0, RESOLVED_SHOWN);
    const more = resolved.length - shown.length;
    const table = alertTable([...active, ...shown], now, { hideJob: true, empty: "No alerts for this job." });
    this.alertsBody.replaceChildren(table);
    if (more > 0 || this.showAllResolved) {
      this.alertsBody.append(el("button", {
        type: "button",
        class: "link-button",
        text: this.showAllResolved ? "show fewer resolved" : "show " + more + " more resolved",
        onclick: () => { this.showAllResolved = !this.showAllResolved; this.renderAlerts(alerts, now); },
      }));
    }
  }

  renderHeatmap(detail) {
    const withHistory = [...detail.ranks].sort((a, b) => a.rank - b.rank);
    this.heatmap.update({
      ranks: withHistory.map((r) => r.rank),
      histories: withHistory.map((r) => r.history),
      totals: withHistory.map((r) => r.total_bytes || 1),
    });
  }

  resize() {
    this.chart.resize();
    this.heatmap.draw();
  }

  destroy() {
    this.chart.destroy();
  }
}

function flagChips(s, rankView, active) {
  const chips = [];
  if (s) {
    if (s.leak) chips.push(badge("leak" + (s.leak_bytes_per_s != null ? " " + fmtBytes(s.leak_bytes_per_s) + "/s" : ""), "flag flag-leak"));
    if (s.fragmentation) chips.push(badge("fragmentation", "flag flag-fragmentation"));
    if (s.imbalance) chips.push(badge("imbalance", "flag flag-imbalance"));
    if (s.straggler) chips.push(badge("straggler", "flag flag-straggler"));
  }
  const flagged = new Set(chips.map((c) => c.textContent.split(" ")[0]));
  for (const a of active) {
    const k = a.kind === "oom_predicted" ? "OOM" : a.kind;
    if (!flagged.has(k)) {
      flagged.add(k);
      chips.push(badge(k, "flag flag-" + a.kind));
    }
  }
  if (!rankView && !s) chips.push(badge("not seen", "state-resolved"));
  else if (rankView && rankView.ended_ms != null) chips.push(badge("ended", "state-resolved"));
  else if (rankView && rankView.lost) chips.push(badge("lost", "state-lost"));
  return chips;
}

// The limit a rank's memory meets first, when its hook reports what bounds
// it: the OOM forecast and the memory levels read it (docs/memory-limits.md).
function limitCell(limit) {
  if (!limit) return el("td", { class: "limit", text: "—", title: "its GPU's capacity (the hook reports no cap or slice)" });
  const kind = { gpu: "GPU", cap: "cap", mig_slice: "MIG slice" }[limit.kind] || limit.kind;
  return el("td", {
    class: "limit" + (limit.kind !== "gpu" ? " warn" : ""),
    data: { limitKind: limit.kind },
    title: limit.description + "; " + fmtBytes(limit.used_bytes) + " counts against it",
    text: fmtBytes(limit.limit_bytes) + " " + kind,
  });
}

function rankTable(ranks, rankViews, summaries, steps, active, now) {
  const head = ["rank", "node / GPU", "used", "peak", "allocated / reserved", "outside allocator", "limit", "risk", "OOM forecast", "step", "slowdown", "flags"];
  const rows = ranks.map((rank) => {
    const v = rankViews.get(rank);
    const s = summaries.get(rank);
    const st = steps[String(rank)];
    const mine = active.filter((a) => a.rank === rank);
    const node = v ? v.node : s && s.node;
    const gpu = v ? v.gpu : s && s.gpu;
    const used = v ? v.used_bytes : s ? s.used_bytes : null;
    const total = v ? v.total_bytes : null;
    const frac = used != null && total ? used / total : NaN;
    const chips = flagChips(s, v, mine);
    const flagged = mine.length > 0 || (s && (s.leak || s.fragmentation || s.imbalance || s.straggler));
    const f = s && s.forecast;
    const stepMs = s && s.last_step_ms != null ? s.last_step_ms : st ? st.duration_ms : null;
    return el("tr", { class: "rank-row" + (flagged ? " flagged" : ""), data: { rank } },
      el("td", { class: "num" }, el("span", { class: "swatch", style: { background: rankColor(rank) } }), " " + rank),
      el("td", { text: node != null ? node + " / GPU " + gpu : "—" }),
      el("td", null,
        el("div", { class: "usebar" }, el("div", { style: { width: (Number.isFinite(frac) ? frac * 100 : 0) + "%", background: memColor(frac) } })),
        el("span", { text: fmtBytes(used) + (Number.isFinite(frac) ? " (" + fmtPct(frac) + ")" : "") })),
      el("td", { text: fmtBytes(v ? v.peak_used_bytes : s ? s.peak_used_bytes : null) }),
      el("td", { text: s && (s.allocated_bytes != null || s.reserved_bytes != null)
        ? fmtBytes(s.allocated_bytes) + " / " + fmtBytes(s.reserved_bytes) : "—" }),
      el("td", {
        class: "outside",
        title: "NVML's figure for the process less the allocator's reserved: CUDA context, NCCL buffers, library workspaces" +
          (s && s.outside_allocator_baseline_bytes != null ? "; after start-up " + fmtBytes(s.outside_allocator_baseline_bytes) : ""),
        text: s && s.outside_allocator_bytes != null ? fmtBytes(s.outside_allocator_bytes) : "—",
      }),
      limitCell(s && s.memory_limit),
      el("td", null, s ? badge(s.risk, "sev-" + s.risk) : "—"),
      el("td", { text: f && Number.isFinite(f.predicted_oom_t)
        ? fmtClock(f.predicted_oom_t) + (Number.isFinite(now) ? " (in " + fmtDur(f.predicted_oom_t - now) + ")" : "") : "—" }),
      el("td", { text: stepMs != null ? fmtMs(stepMs) + (st && st.mean_duration_ms != null ? " (mean " + fmtMs(st.mean_duration_ms) + ")" : "") + (s ? " · " + s.steps + " steps" : "") : "—" }),
      el("td", { class: s && s.slowdown > 1.1 ? "num warn" : "num", text: s && s.slowdown != null ? "×" + s.slowdown.toFixed(2) : "—" }),
      el("td", null, chips));
  });
  return el("table", { class: "ranks" },
    el("thead", null, el("tr", null, head.map((h) => el("th", { text: h })))),
    el("tbody", null, rows));
}

// Where the job's step goes and what bounds it (the API's step_verdict):
// one line with the evidence and the next thing to try.
function stepVerdict(v) {
  if (!v || !v.bound) return null;
  const bound = { input: "input-bound", compute: "compute-bound", communication: "communication-bound", host: "host-bound" }[v.bound] || v.bound;
  return el("p", { class: "step-verdict", data: { bound: v.bound } },
    el("strong", { text: "Step: " + bound + ". " }),
    v.evidence + ". Next: " + v.next + ".");
}

function sectionBars(ranks, steps) {
  const names = new Map();
  for (const st of Object.values(steps)) {
    for (const [name, sec] of Object.entries(st.sections || {})) {
      names.set(name, (names.get(name) || 0) + (sec.mean_ms || 0));
    }
  }
  const order = [...names.keys()].sort();
  const color = new Map(order.map((n, i) => [n, nameColor(n, i)]));
  const rows = [];
  let maxTotal = 0;
  const perRank = ranks.map((rank) => {
    const st = steps[String(rank)];
    if (!st) return { rank, parts: null };
    const parts = order.filter((n) => st.sections && st.sections[n])
      .map((n) => ({ name: n, ms: st.sections[n].mean_ms || 0, last: st.sections[n].last_ms }));
    const sum = parts.reduce((a, p) => a + p.ms, 0);
    const stepMean = st.mean_duration_ms != null ? st.mean_duration_ms : st.duration_ms;
    if (Number.isFinite(stepMean) && stepMean > sum) parts.push({ name: parts.length ? "other" : "step", ms: stepMean - sum });
    const total = parts.reduce((a, p) => a + p.ms, 0);
    maxTotal = Math.max(maxTotal, total);
    return { rank, parts, total };
  });
  if (!perRank.some((r) => r.parts)) {
    return placeholder("No step timings yet: ranks report steps and sections through the gpumon hook.");
  }
  for (const r of perRank) {
    const bar = el("div", { class: "hbar" });
    if (r.parts) {
      for (const p of r.parts) {
        bar.append(el("div", {
          class: "seg",
          style: { width: (maxTotal > 0 ? (100 * p.ms) / maxTotal : 0) + "%", background: color.get(p.name) || "#cbd5e1" },
          title: p.name + ": mean " + fmtMs(p.ms) + (p.last != null ? ", last " + fmtMs(p.last) : ""),
          data: { section: p.name },
        }));
      }
    }
    rows.push(el("div", { class: "bar-row", data: { rank: r.rank } },
      el("span", { class: "bar-label", text: "rank " + r.rank }), bar,
      el("span", { class: "bar-value", text: r.parts ? fmtMs(r.total) : "no steps" })));
  }
  const legend = el("div", { class: "legend" }, [...color].map(([n, c]) =>
    el("span", { class: "legend-item" }, el("span", { class: "swatch", style: { background: c } }), " " + n)),
  perRank.some((r) => r.parts && r.parts.some((p) => p.name === "other"))
    ? el("span", { class: "legend-item" }, el("span", { class: "swatch", style: { background: "#cbd5e1" } }), " other") : null);
  return el("div", null, legend, rows);
}

function imbalanceBars(ranks, rankViews, summaries) {
  const reported = [...summaries.values()].some((s) => s.imbalance_excess_bytes != null);
  const used = (rank) => {
    const v = rankViews.get(rank);
    if (v && v.ended_ms == null) return v.used_bytes;
    const s = summaries.get(rank);
    return s && s.ended_t == null ? s.used_bytes : null;
  };
  const med = median(ranks.map(used).filter((u) => u != null));
  const excess = ranks.map((rank) => {
    const s = summaries.get(rank);
    if (reported) return s && s.imbalance_excess_bytes != null ? s.imbalance_excess_bytes : null;
    const u = used(rank);
    return u != null && Number.isFinite(med) ? u - med : null;
  });
  const scale = Math.max(1, ...excess.filter((x) => x != null).map(Math.abs));
  const rows = ranks.map((rank, i) => {
    const x = excess[i];
    const s = summaries.get(rank);
    const w = x == null ? 0 : (50 * Math.abs(x)) / scale;
    const fill = el("div", {
      class: "dfill " + (x >= 0 ? "pos" : "neg") + (s && s.imbalance ? " flagged" : ""),
      style: x >= 0 ? { left: "50%", width: w + "%" } : { left: 50 - w + "%", width: w + "%" },
    });
    return el("div", { class: "bar-row", data: { rank } },
      el("span", { class: "bar-label", text: "rank " + rank }),
      el("div", { class: "dbar" }, el("div", { class: "dmid" }), fill),
      el("span", { class: "bar-value", text: x == null ? "—" : fmtSignedBytes(x) }));
  });
  return el("div", null,
    el("p", { class: "note", text: reported ? "Excess over the median, as the engine computes it." : "Used minus the median of live ranks." }),
    rows);
}
