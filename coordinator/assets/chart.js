// The job page's two time pictures: a uPlot line chart of each rank's memory
// with the capacity, the OOM forecasts ahead of "now" and the markers; and a
// rank x time heatmap on a canvas. Both are kept across polls so that a
// zoomed chart stays zoomed while new data arrives.

import { el, fmtBytes, fmtClock, fmtTime, median, memColor, rankColor } from "./dom.js";

/* global uPlot */

/** Lines up every rank's history on one time axis (seconds): the union of
 *  the window ends, `null` where a rank has no window. */
export function alignHistories(ranks) {
  const times = new Set();
  for (const r of ranks) for (const h of r.history) times.add(h.t_ms);
  const sorted = [...times].sort((a, b) => a - b);
  const index = new Map(sorted.map((t, i) => [t, i]));
  const values = ranks.map((r) => {
    const row = new Array(sorted.length).fill(null);
    for (const h of r.history) row[index.get(h.t_ms)] = h.max;
    return row;
  });
  return { xs: sorted.map((t) => t / 1000), values };
}

/** The memory chart. `update(model)` with
 *  `{ranks, xs, values, capacity, xRange, now, forecasts: [{rank, f, main}], markers}`. */
export class MemoryChart {
  constructor(host, onZoom) {
    this.host = host;
    this.onZoom = onZoom;
    this.u = null;
    this.signature = "";
    this.zoomed = false;
    this.model = null;
  }

  update(model) {
    this.model = model;
    const data = [model.xs, ...model.values, model.xs.map(() => model.capacity || null)];
    const signature = model.ranks.join(",");
    if (!this.u || signature !== this.signature) {
      this.destroy();
      this.signature = signature;
      this.u = new uPlot(this.options(model), data, this.host);
      this.applyRange();
    } else if (this.zoomed) {
      this.u.setData(data, false);
    } else {
      this.u.setData(data, true);
      this.applyRange();
    }
  }

  /** Back to the live range: all history plus the forecast ahead. */
  resetZoom() {
    this.setZoomed(false);
    if (this.u) this.applyRange();
  }

  resize() {
    if (this.u) this.u.setSize({ width: this.width(), height: this.u.height });
  }

  destroy() {
    if (this.u) this.u.destroy();
    this.u = null;
  }

  width() {
    return Math.max(320, this.host.clientWidth || 800);
  }

  setZoomed(z) {
    if (this.zoomed !== z) {
      this.zoomed = z;
      if (this.onZoom) this.onZoom(z);
    }
  }

  applyRange() {
    const [min, max] = this.model.xRange;
    if (Number.isFinite(min) && Number.isFinite(max) && max > min) this.u.setScale("x", { min, max });
  }

  options(model) {
    const many = model.ranks.length > 16;
    return {
      width: this.width(),
      height: 340,
      scales: {
        x: { time: true },
        y: { range: (u, min, max) => [0, Math.max(max || 0, this.model.capacity || 0, 1) * 1.05] },
      },
      series: [
        { value: (u, v) => (v == null ? "—" : fmtClock(v)) },
        ...model.ranks.map((r) => ({
          label: "rank " + r,
          stroke: rankColor(r),
          width: 1.5,
          spanGaps: true,
          points: { show: false },
          value: (u, v) => (v == null ? "—" : fmtBytes(v)),
        })),
        {
          label: "capacity",
          stroke: "#b91c1c",
          width: 1.5,
          dash: [8, 4],
          points: { show: false },
          value: (u, v) => (v == null ? "—" : fmtBytes(v)),
        },
      ],
      axes: [
        // 24-hour clock, in the browser's zone or UTC as the header's toggle says.
        { stroke: "#475569", grid: { stroke: "#e2e8f0" }, space: 70, values: (u, splits) => splits.map((v) => fmtTime(v)) },
        { stroke: "#475569", grid: { stroke: "#e2e8f0" }, size: 72, values: (u, splits) => splits.map((v) => fmtBytes(v)) },
      ],
      legend: { show: !many, live: true },
      cursor: { drag: { x: true, y: false }, bind: { dblclick: () => null } },
      hooks: {
        // Only a user's drag selects; it zooms the x scale.
        setSelect: [(u) => { if (u.select.width > 0) this.setZoomed(true); }],
        draw: [(u) => this.drawOverlay(u)],
        ready: [(u) => u.over.addEventListener("dblclick", () => this.resetZoom())],
      },
    };
  }

  /** Now, markers and forecasts, drawn over the series, clipped to the plot. */
  drawOverlay(u) {
    const m = this.model;
    const ctx = u.ctx;
    const px = uPlot.pxRatio || 1;
    const { left, top, width, height } = u.bbox;
    const X = (v) => u.valToPos(v, "x", true);
    const Y = (v) => u.valToPos(v, "y", true);
    const xMax = u.scales.x.max;
    const far = (v) => (Number.isFinite(v) ? v : xMax + (xMax - u.scales.x.min));
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    ctx.font = 11 * px + "px system-ui, sans-serif";
    ctx.textAlign = "left";
    ctx.textBaseline = "top";

    const vline = (x, color, dash, label, row) => {
      ctx.strokeStyle = color;
      ctx.fillStyle = color;
      ctx.lineWidth = px;
      ctx.setLineDash(dash.map((d) => d * px));
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      if (label) ctx.fillText(label, Math.min(x + 3 * px, left + width - ctx.measureText(label).width - 2 * px), top + (2 + 13 * row) * px);
    };
    if (Number.isFinite(m.now)) vline(X(m.now), "#64748b", [2, 3], "now", 0);
    m.markers.forEach((mk, i) => vline(X(mk.t), "#7c3aed", [], mk.label, 1 + (i % 4)));

    for (const fc of m.forecasts) {
      const f = fc.f;
      if (![f.t, f.level_bytes, f.usable_bytes, f.predicted_oom_t].every(Number.isFinite)) continue;
      const color = rankColor(fc.rank);
      const x0 = X(f.t), y0 = Y(f.level_bytes), yU = Y(f.usable_bytes);
      // The interval of the OOM time, as a faint cone.
      ctx.globalAlpha = fc.main ? 0.14 : 0.07;
      ctx.fillStyle = color;
      ctx.beginPath();
      ctx.moveTo(x0, y0);
      ctx.lineTo(X(far(f.earliest_oom_t)), yU);
      ctx.lineTo(X(far(f.latest_oom_t)), yU);
      ctx.closePath();
      ctx.fill();
      ctx.globalAlpha = 1;
      ctx.strokeStyle = color;
      ctx.lineWidth = (fc.main ? 2.5 : 1.5) * px;
      ctx.setLineDash([6 * px, 4 * px]);
      ctx.beginPath();
      ctx.moveTo(x0, y0);
      ctx.lineTo(X(f.predicted_oom_t), yU);
      ctx.stroke();
      if (fc.main) {
        ctx.setLineDash([2 * px, 2 * px]);
        ctx.lineWidth = px;
        ctx.beginPath();
        ctx.moveTo(left, yU);
        ctx.lineTo(left + width, yU);
        ctx.stroke();
        const label = "rank " + fc.rank + ": OOM ≈ " + fmtClock(f.predicted_oom_t) +
          (f.predicted_oom_t > xMax ? " →" : "");
        const tw = ctx.measureText(label).width;
        const lx = Math.max(left + 2 * px, Math.min(X(f.predicted_oom_t) - tw / 2, left + width - tw - 4 * px));
        ctx.fillStyle = "rgba(255,255,255,0.85)";
        ctx.fillRect(lx - 2 * px, yU + 3 * px, tw + 4 * px, 14 * px);
        ctx.fillStyle = color;
        ctx.fillText(label, lx, yU + 4 * px);
      }
    }
    ctx.restore();
  }
}

/** Rows = ranks, columns = time bins one window wide (wider when the
 *  history outgrows the canvas), color = used / capacity on the overview's
 *  scale. Ranks' windows end at different instants (one agent per node), so
 *  each point falls into the bin of its own time; a bin keeps its highest value. */
export class Heatmap {
  constructor(host) {
    this.canvas = el("canvas", { class: "heatmap", id: "heatmap" });
    this.readout = el("div", { class: "readout muted", text: "Point at a cell for its value." });
    host.append(this.canvas, this.readout);
    this.canvas.addEventListener("mousemove", (e) => this.hover(e));
    this.canvas.addEventListener("mouseleave", () => { this.readout.textContent = "Point at a cell for its value."; });
    this.layout = null;
  }

  /** `{ranks, histories: [[{t_ms, max}]], totals}`, one entry per rank. */
  update(model) {
    this.model = model;
    this.draw();
  }

  /** Bins every rank's history into at most `maxCols` columns. */
  static bin(histories, maxCols) {
    let first = Infinity, last = -Infinity;
    const steps = [];
    for (const h of histories) {
      for (let i = 0; i < h.length; i++) {
        first = Math.min(first, h[i].t_ms);
        last = Math.max(last, h[i].t_ms);
        if (i > 0 && h[i].t_ms > h[i - 1].t_ms) steps.push(h[i].t_ms - h[i - 1].t_ms);
      }
    }
    if (!Number.isFinite(first)) return { first: NaN, width: 1, cols: 0, grid: histories.map(() => []) };
    const window = steps.length ? median(steps) : 1000;
    const width = Math.max(window, (last - first + 1) / Math.max(1, maxCols));
    const cols = Math.floor((last - first) / width) + 1;
    const grid = histories.map((h) => {
      const row = new Array(cols).fill(null);
      for (const p of h) {
        const c = Math.min(cols - 1, Math.floor((p.t_ms - first) / width));
        if (row[c] == null || p.max > row[c]) row[c] = p.max;
      }
      // Windows end a little early or late, which leaves a lone bin empty
      // now and then; a gap of one bin between two windows is that jitter.
      for (let c = 1; c + 1 < cols; c++) {
        if (row[c] == null && row[c - 1] != null && row[c + 1] != null) row[c] = row[c - 1];
      }
      return row;
    });
    return { first, width, cols, grid };
  }

  draw() {
    const m = this.model;
    if (!m) return;
    const dpr = window.devicePixelRatio || 1;
    const cssW = Math.max(320, this.canvas.parentElement.clientWidth || 800);
    const gutter = 52, axis = 18;
    const rowH = Math.max(3, Math.min(18, Math.floor(360 / Math.max(1, m.ranks.length))));
    const cssH = m.ranks.length * rowH + axis;
    const plotW = cssW - gutter - 4;
    const bins = Heatmap.bin(m.histories, Math.floor(plotW / 2));
    this.canvas.width = Math.round(cssW * dpr);
    this.canvas.height = Math.round(cssH * dpr);
    this.canvas.style.width = cssW + "px";
    this.canvas.style.height = cssH + "px";
    this.canvas.dataset.rows = String(m.ranks.length);
    this.canvas.dataset.columns = String(bins.cols);
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    const colW = plotW / Math.max(1, bins.cols);
    this.layout = { gutter, rowH, colW, bins };
    const labelEvery = Math.ceil(12 / rowH);
    m.ranks.forEach((rank, ri) => {
      const y = ri * rowH;
      if (ri % labelEvery === 0) {
        ctx.fillStyle = "#334155";
        ctx.fillText("rank " + rank, 2, y + rowH / 2);
      }
      const row = bins.grid[ri];
      for (let c = 0; c < bins.cols; c++) {
        ctx.fillStyle = row[c] == null ? "#e5e7eb" : memColor(row[c] / m.totals[ri]);
        ctx.fillRect(gutter + c * colW, y, colW + 0.5, rowH - (rowH > 6 ? 1 : 0));
      }
    });
    if (bins.cols) {
      ctx.fillStyle = "#475569";
      ctx.textBaseline = "bottom";
      const first = fmtClock(bins.first / 1000);
      const last = fmtClock((bins.first + bins.width * (bins.cols - 1)) / 1000);
      ctx.fillText(first, gutter, cssH - 2);
      ctx.fillText(last, cssW - 4 - ctx.measureText(last).width, cssH - 2);
    }
  }

  hover(e) {
    if (!this.layout || !this.model) return;
    const r = this.canvas.getBoundingClientRect();
    const { gutter, rowH, colW, bins } = this.layout;
    const ri = Math.floor((e.clientY - r.top) / rowH), c = Math.floor((e.clientX - r.left - gutter) / colW);
    if (ri < 0 || ri >= this.model.ranks.length || c < 0 || c >= bins.cols) return;
    const v = bins.grid[ri][c];
    const total = this.model.totals[ri];
    this.readout.textContent = "rank " + this.model.ranks[ri] + " · " + fmtClock((bins.first + c * bins.width) / 1000) + " · " +
      (v == null ? "no data" : fmtBytes(v) + " / " + fmtBytes(total) + " (" + Math.round((100 * v) / total) + " %)");
  }
}
