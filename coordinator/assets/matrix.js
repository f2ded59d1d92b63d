// The rank x time heatmap of a big job, drawn from the summary's matrix
// (ranks x time buckets of used share, bytes in base64) on a RELATIVE
// scale: the lowest cell of the matrix is the scale's first color and the
// highest its last, so a few points of difference between thousands of
// ranks still show. One pixel per cell in an offscreen image, scaled onto
// the canvas: thousands of rows cost one drawImage.

import { el, fmtClock } from "./dom.js";

/** Cell value of a full GPU, and of a bucket with no data (see the API). */
const CELL_FULL = 250;
const CELL_EMPTY = 255;
const PLOT_H = 400;
const GUTTER = 64;
const AXIS = 18;

/** The relative scale's color, 0 (lowest cell) to 1 (highest): blue through green and yellow to red, evenly. */
function relColor(f) {
  return "hsl(" + (230 - 230 * Math.min(1, Math.max(0, f))).toFixed(0) + ", 75%, 50%)";
}

/** `{cells: Uint8Array, min, max}` of a matrix answer. */
export function decodeMatrix(m) {
  const bin = atob(m.cells);
  const cells = new Uint8Array(bin.length);
  let min = CELL_EMPTY, max = -1;
  for (let i = 0; i < bin.length; i++) {
    const v = bin.charCodeAt(i);
    cells[i] = v;
    if (v !== CELL_EMPTY) {
      if (v < min) min = v;
      if (v > max) max = v;
    }
  }
  return max < 0 ? { cells, min: NaN, max: NaN } : { cells, min, max };
}

export class MatrixHeatmap {
  constructor(host) {
    this.canvas = el("canvas", { class: "heatmap", id: "heatmap" });
    this.legend = el("div", { class: "legend rel-legend" });
    this.readout = el("div", { class: "readout muted", text: "Point at a cell for its value." });
    host.append(this.legend, this.canvas, this.readout);
    this.canvas.addEventListener("mousemove", (e) => this.hover(e));
    this.model = null;
  }

  /** `m`: the summary's `heatmap`. */
  update(m) {
    const decoded = decodeMatrix(m);
    this.model = { ...m, ...decoded, rows: m.ranks.length };
    this.image = this.paint();
    this.draw();
  }

  /** A relative share in 0..1 of a cell. */
  rel(v) {
    const { min, max } = this.model;
    return max > min ? (v - min) / (max - min) : 0.5;
  }

  /** The cells with more rows than the plot has pixels folded into one
   * row per pixel, each the highest of its ranks: one full rank among
   * twenty still shows, where averaging them would hide it. */
  folded() {
    const m = this.model;
    const rows = Math.max(1, Math.min(m.rows, PLOT_H));
    if (rows >= m.rows) return { rows: m.rows, cells: m.cells };
    const cols = m.columns;
    const cells = new Uint8Array(rows * cols).fill(CELL_EMPTY);
    for (let r = 0; r < m.rows; r++) {
      const to = Math.floor((r * rows) / m.rows) * cols;
      for (let c = 0; c < cols; c++) {
        const v = m.cells[r * cols + c];
        const f = cells[to + c];
        if (v !== CELL_EMPTY && (f === CELL_EMPTY || v > f)) cells[to + c] = v;
      }
    }
    return { rows, cells };
  }

  /** The matrix as an offscreen canvas, one pixel per cell (per folded row). */
  paint() {
    const m = this.model;
    const { rows, cells } = this.folded();
    const off = document.createElement("canvas");
    off.width = Math.max(1, m.columns);
    off.height = Math.max(1, rows);
    const ctx = off.getContext("2d");
    const img = ctx.createImageData(off.width, off.height);
    // 256 colors, one per cell value, computed once.
    const lut = new Uint8ClampedArray(256 * 3);
    const probe = document.createElement("canvas").getContext("2d");
    for (let v = 0; v <= 255; v++) {
      probe.fillStyle = v === CELL_EMPTY ? "#e5e7eb" : relColor(this.rel(v));
      probe.fillRect(0, 0, 1, 1);
      const px = probe.getImageData(0, 0, 1, 1).data;
      lut.set([px[0], px[1], px[2]], v * 3);
    }
    const cols = m.columns;
    for (let i = 0; i < cells.length; i++) {
      let v = cells[i];
      // Windows end a little early or late, which leaves a lone bucket empty
      // now and then between two full ones: draw it as its left neighbor.
      const c = i % cols;
      if (v === CELL_EMPTY && c > 0 && c + 1 < cols && cells[i - 1] !== CELL_EMPTY && cells[i + 1] !== CELL_EMPTY) v = cells[i - 1];
      img.data[i * 4] = lut[v * 3];
      img.data[i * 4 + 1] = lut[v * 3 + 1];
      img.data[i * 4 + 2] = lut[v * 3 + 2];
      img.data[i * 4 + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    return off;
  }

  draw() {
    const m = this.model;
    if (!m) return;
    const pct = (v) => (Number.isFinite(v) ? ((100 * v) / CELL_FULL).toFixed(1) + " %" : "—");
    this.legend.replaceChildren(
      el("span", { class: "legend-label", id: "heat-min", text: "lowest " + pct(m.min) }),
      el("span", { class: "legend-ramp", style: { background: "linear-gradient(to right, " +
        [0, 0.2, 0.4, 0.6, 0.8, 1].map((f) => relColor(f)).join(", ") + ")" } }),
      el("span", { class: "legend-label", id: "heat-max", text: pct(m.max) + " highest" }));
    const dpr = window.devicePixelRatio || 1;
    const cssW = Math.max(320, this.canvas.parentElement.clientWidth || 800);
    const cssH = PLOT_H + AXIS;
    this.canvas.width = Math.round(cssW * dpr);
    this.canvas.height = Math.round(cssH * dpr);
    this.canvas.style.width = cssW + "px";
    this.canvas.style.height = cssH + "px";
    this.canvas.dataset.rows = String(m.rows);
    this.canvas.dataset.columns = String(m.columns);
    this.canvas.dataset.scaleMin = String(m.min);
    this.canvas.dataset.scaleMax = String(m.max);
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(this.image, GUTTER, 0, cssW - GUTTER - 4, PLOT_H);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#334155";
    ctx.textBaseline = "top";
    if (m.rows) {
      ctx.fillText("rank " + m.ranks[0], 2, 0);
      ctx.textBaseline = "bottom";
      ctx.fillText("rank " + m.ranks[m.rows - 1], 2, PLOT_H);
    }
    const edges = m.edges_ms;
    if (edges.length > 1) {
      ctx.textBaseline = "bottom";
      const first = fmtClock(edges[0] / 1000), last = fmtClock(edges[edges.length - 1] / 1000);
      ctx.fillText(first, GUTTER, cssH - 2);
      ctx.fillText(last, cssW - 4 - ctx.measureText(last).width, cssH - 2);
    }
    this.layout = { cssW };
  }

  hover(e) {
    const m = this.model;
    if (!m || !this.layout || !m.rows) return;
    const r = this.canvas.getBoundingClientRect();
    const plotW = this.layout.cssW - GUTTER - 4;
    const row = Math.floor(((e.clientY - r.top) / PLOT_H) * m.rows);
    const col = Math.floor(((e.clientX - r.left - GUTTER) / plotW) * m.columns);
    if (row < 0 || row >= m.rows || col < 0 || col >= m.columns) return;
    const v = m.cells[row * m.columns + col];
    this.readout.textContent = "rank " + m.ranks[row] + " · " + fmtClock(m.edges_ms[col] / 1000) + " to " +
      fmtClock(m.edges_ms[col + 1] / 1000) + " · " + (v === CELL_EMPTY ? "no data" : ((100 * v) / CELL_FULL).toFixed(1) + " % used (highest window)");
  }
}
