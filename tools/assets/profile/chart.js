// Line charts on <canvas>: seconds on x (labelled as time since the run's
// start), bytes on y. A chart holds series of points, horizontal levels,
// vertical marks, sloped segments (forecasts) and shaded time bands, and
// shows the values under the pointer. Charts redraw when the window's width
// changes.

const CHART_FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
const GRID = '#e5e9f0';
const AXIS_INK = '#5b6474';
const MARK_INK = '#64748b';

// Functions that redraw one chart or heatmap at the current width.
const redrawers = [];
let redrawQueued = false;
window.addEventListener('resize', () => {
  if (redrawQueued) return;
  redrawQueued = true;
  requestAnimationFrame(() => {
    redrawQueued = false;
    for (const f of redrawers) guarded('redraw', f);
  });
});

// Sizes the canvas to its box at the screen's pixel density; the context
// draws in CSS pixels.
function sizeCanvas(canvas, cssHeight) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(240, canvas.clientWidth || (canvas.parentNode && canvas.parentNode.clientWidth) || 800);
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(cssHeight * dpr);
  canvas.style.height = cssHeight + 'px';
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, cssHeight);
  ctx.font = CHART_FONT;
  return { ctx: ctx, w: w, h: cssHeight };
}

// 1, 2 or 5 times a power of ten, at least raw.
function niceStep(raw) {
  if (!(raw > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

// Ticks of a byte axis from 0 to max in round numbers of one unit, with
// their labels ("20 GiB", "2.5 MiB").
function byteTicks(max, count) {
  let u = 0;
  while (max / Math.pow(1024, u) >= 1024 && u < BYTE_UNITS.length - 1) u++;
  const unit = Math.pow(1024, u);
  const step = niceStep(max / unit / Math.max(1, count));
  const digits = step >= 1 ? 0 : Math.ceil(-Math.log10(step));
  const ticks = [];
  for (let i = 0; i * step * unit <= max * 1.0001 && ticks.length < 50; i++) {
    ticks.push({ v: i * step * unit, label: i === 0 ? '0' : (i * step).toFixed(digits) + ' ' + BYTE_UNITS[u] });
  }
  return ticks;
}

const TIME_STEPS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

function timeStep(span, count) {
  for (const s of TIME_STEPS) if (span / s <= count) return s;
  return niceStep(span / count);
}

function sortedPoints(points) {
  const ok = (points || []).filter((p) => isNum(p[0]));
  for (let i = 1; i < ok.length; i++) {
    if (ok[i][0] < ok[i - 1][0]) return ok.slice().sort((a, b) => a[0] - b[0]);
  }
  return ok;
}

// A gap in a series longer than this many typical steps breaks its line.
function gapLimit(points) {
  if (points.length < 3) return Infinity;
  const d = [];
  for (let i = 1; i < points.length; i++) d.push(points[i][0] - points[i - 1][0]);
  d.sort((a, b) => a - b);
  return Math.max(d[d.length >> 1] * 8, 1e-6);
}

function strokePath(ctx, points, X, Y, gap) {
  ctx.beginPath();
  let pen = false;
  let prev = -Infinity;
  for (const p of points) {
    if (!isNum(p[1])) {
      pen = false;
      continue;
    }
    if (p[0] - prev > gap) pen = false;
    if (pen) ctx.lineTo(X(p[0]), Y(p[1]));
    else ctx.moveTo(X(p[0]), Y(p[1]));
    pen = true;
    prev = p[0];
  }
  ctx.stroke();
}

function haloText(ctx, text, x, y) {
  ctx.save();
  ctx.strokeStyle = 'rgba(255,255,255,0.9)';
  ctx.lineWidth = 3;
  ctx.strokeText(text, x, y);
  ctx.restore();
  ctx.fillText(text, x, y);
}

// Draws spec on canvas; answers the geometry, for the pointer readout.
//
// spec: {height, origin (t shown as 0), x0, x1, y1, series: [{label, color,
// width, dash, points: [[t, v]]}], levels: [{y, label, color, dash}],
// marks: [{t, label, detail}], segments: [{t0, v0, t1, v1, color, dash}],
// bands: [{t0, t1, color}]}
function drawChart(canvas, spec) {
  const { ctx, w, h } = sizeCanvas(canvas, spec.height);
  const pad = { l: 66, r: 12, t: spec.marks.length ? 34 : 12, b: 24 };
  const pw = Math.max(10, w - pad.l - pad.r);
  const ph = Math.max(10, h - pad.t - pad.b);
  const span = spec.x1 > spec.x0 ? spec.x1 - spec.x0 : 1;
  const y1 = spec.y1 > 0 ? spec.y1 : 1;
  const X = (t) => pad.l + ((t - spec.x0) / span) * pw;
  const Y = (v) => pad.t + ph - (v / y1) * ph;

  // Grid and axes.
  ctx.lineWidth = 1;
  ctx.fillStyle = AXIS_INK;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (const tick of byteTicks(y1, Math.max(2, Math.floor(ph / 32)))) {
    const y = Math.round(Y(tick.v)) + 0.5;
    ctx.strokeStyle = GRID;
    ctx.beginPath();
    ctx.moveTo(pad.l, y);
    ctx.lineTo(pad.l + pw, y);
    ctx.stroke();
    ctx.fillText(tick.label, pad.l - 6, y);
  }
  const step = timeStep(span, Math.max(2, Math.floor(pw / 80)));
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  const first = Math.ceil((spec.x0 - spec.origin) / step) * step;
  for (let e = first; spec.origin + e <= spec.x1 + 1e-9; e += step) {
    const x = Math.round(X(spec.origin + e)) + 0.5;
    ctx.strokeStyle = GRID;
    ctx.beginPath();
    ctx.moveTo(x, pad.t);
    ctx.lineTo(x, pad.t + ph);
    ctx.stroke();
    axisLabel(ctx, fmtElapsed(e, step), x, pad.t + ph + 6, w);
  }
  ctx.strokeStyle = '#9aa3b2';
  ctx.strokeRect(pad.l + 0.5, pad.t + 0.5, pw - 1, ph - 1);

  ctx.save();
  ctx.beginPath();
  ctx.rect(pad.l, pad.t, pw, ph);
  ctx.clip();
  for (const b of spec.bands) {
    ctx.fillStyle = b.color;
    ctx.fillRect(X(b.t0), pad.t, Math.max(1, X(b.t1) - X(b.t0)), ph);
  }
  for (const lv of spec.levels) {
    ctx.strokeStyle = lv.color;
    ctx.setLineDash(lv.dash || []);
    ctx.lineWidth = 1.2;
    const y = Math.round(Y(lv.y)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(pad.l, y);
    ctx.lineTo(pad.l + pw, y);
    ctx.stroke();
  }
  ctx.setLineDash([]);
  for (const s of spec.series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = s.width || 1.5;
    ctx.setLineDash(s.dash || []);
    strokePath(ctx, s.points, X, Y, s.gap);
  }
  for (const sg of spec.segments) {
    ctx.strokeStyle = sg.color;
    ctx.lineWidth = sg.width || 2;
    ctx.setLineDash(sg.dash || []);
    ctx.beginPath();
    ctx.moveTo(X(sg.t0), Y(sg.v0));
    ctx.lineTo(X(sg.t1), Y(sg.v1));
    ctx.stroke();
  }
  ctx.setLineDash([]);
  ctx.restore();
  levelLabels(ctx, spec.levels, Y, pad, pw, ph);

  const marksDrawn = drawMarks(ctx, spec.marks, X, pad, pw, ph, w);
  return { X: X, Y: Y, pad: pad, pw: pw, ph: ph, span: span, marksDrawn: marksDrawn };
}

// A time label centred under x, kept inside the canvas.
function axisLabel(ctx, text, x, y, w) {
  const half = ctx.measureText(text).width / 2;
  ctx.fillText(text, Math.min(Math.max(x, half + 1), w - half - 1), y);
}

// Each level's label at the right end, above its line; below it, or lower
// still, where it would cover the label above.
function levelLabels(ctx, levels, Y, pad, pw, ph) {
  ctx.textAlign = 'right';
  ctx.textBaseline = 'bottom';
  let taken = -Infinity;
  const placed = levels.map((lv) => [lv, Y(lv.y)]).sort((a, b) => a[1] - b[1]);
  for (const [lv, y] of placed) {
    let base = y - 2;
    if (base - 11 < taken) base = y + 13;
    if (base - 11 < taken) base = taken + 12;
    base = Math.max(base, pad.t + 12);
    if (base > pad.t + ph) continue;
    ctx.fillStyle = lv.color;
    haloText(ctx, lv.label, pad.l + pw - 4, base);
    taken = base + 1;
  }
}

// Vertical lines at the marks, labelled in two rows above the plot where
// the labels do not overlap; answers how many lines fall on the chart.
function drawMarks(ctx, marks, X, pad, pw, ph, w) {
  const rowEnds = [-Infinity, -Infinity];
  let drawn = 0;
  ctx.textAlign = 'left';
  ctx.textBaseline = 'alphabetic';
  for (const m of marks) {
    const x = Math.round(X(m.t)) + 0.5;
    if (x < pad.l - 1 || x > pad.l + pw + 1) continue;
    drawn++;
    ctx.strokeStyle = m.color || MARK_INK;
    ctx.setLineDash([3, 3]);
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(x, pad.t - 2);
    ctx.lineTo(x, pad.t + ph);
    ctx.stroke();
    ctx.setLineDash([]);
    const label = truncate(m.label, 28);
    const tw = ctx.measureText(label).width;
    const left = x + 3 + tw <= w - 2 ? x + 3 : x - 3 - tw;
    for (let row = 0; row < rowEnds.length; row++) {
      if (left > rowEnds[row] + 6) {
        ctx.fillStyle = m.color || MARK_INK;
        ctx.fillText(label, left, pad.t - 6 - row * 13);
        rowEnds[row] = left + tw;
        break;
      }
    }
  }
  return drawn;
}

// The point of sorted points nearest to t.
function nearest(points, t) {
  let lo = 0;
  let hi = points.length - 1;
  if (hi < 0) return null;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (points[mid][0] < t) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0 && Math.abs(points[lo - 1][0] - t) < Math.abs(points[lo][0] - t)) lo--;
  return points[lo];
}

// A chart in parent: canvas, legend, and the readout under the pointer.
// Answers the canvas, which carries data-series (series with points drawn),
// data-marks (marks on the chart) and data-forecast (segments drawn).
function lineChart(parent, spec) {
  for (const s of spec.series) {
    s.points = sortedPoints(s.points);
    s.gap = gapLimit(s.points);
  }
  spec.marks = (spec.marks || []).filter((m) => isNum(m.t)).sort((a, b) => a.t - b.t);
  spec.levels = (spec.levels || []).filter((lv) => isNum(lv.y) && lv.y > 0);
  spec.segments = (spec.segments || []).filter((s) => [s.t0, s.v0, s.t1, s.v1].every(isNum));
  spec.bands = (spec.bands || []).filter((b) => isNum(b.t0) && isNum(b.t1));
  const canvas = el('canvas', { class: 'chart', role: 'img', 'aria-label': spec.title || 'chart' });
  const tip = el('div', { class: 'tip', hidden: '' });
  const box = el('div', { class: 'chart-box' }, [canvas, tip]);
  parent.appendChild(box);
  const drawn = spec.series.filter((s) => s.points.length > 0);
  parent.appendChild(legend(spec, drawn));
  let geo = null;
  const draw = () => {
    geo = drawChart(canvas, spec);
    canvas.setAttribute('data-marks', geo.marksDrawn);
  };
  draw();
  redrawers.push(draw);
  canvas.setAttribute('data-series', drawn.length);
  canvas.setAttribute('data-forecast', spec.segments.length > 0 ? 1 : 0);
  canvas.addEventListener('mousemove', (ev) => showReadout(ev, canvas, tip, spec, geo));
  canvas.addEventListener('mouseleave', () => tip.setAttribute('hidden', ''));
  return canvas;
}

function legend(spec, drawn) {
  const items = drawn.map((s) => swatch(s.color, s.label, s.dash ? 'dashed' : 'line'));
  for (const lv of spec.levels) items.push(swatch(lv.color, lv.label, lv.dash ? 'dashed' : 'line'));
  for (const x of spec.legendExtra || []) items.push(swatch(x.color, x.label, x.style));
  if (spec.marks.length) items.push(swatch(MARK_INK, spec.marks.length + (spec.marks.length === 1 ? ' mark' : ' marks'), 'dashed'));
  return el('div', { class: 'legend' }, items);
}

function showReadout(ev, canvas, tip, spec, geo) {
  if (!geo) return;
  const r = canvas.getBoundingClientRect();
  const mx = ev.clientX - r.left;
  const my = ev.clientY - r.top;
  if (mx < geo.pad.l || mx > geo.pad.l + geo.pw) {
    tip.setAttribute('hidden', '');
    return;
  }
  const t = spec.x0 + ((mx - geo.pad.l) / geo.pw) * geo.span;
  const lines = [el('div', { class: 'tip-head' }, '+' + fmtElapsed(t - spec.origin) + '  ' + fmtClock(t, true) + ' UTC')];
  const reach = (6 / geo.pw) * geo.span;
  for (const s of spec.series) {
    const p = nearest(s.points, t);
    if (p && Math.abs(p[0] - t) <= Math.max(s.gap, reach)) lines.push(el('div', null, [swatch(s.color, s.label + ': ' + fmtBytes(p[1]), 'line')]));
  }
  for (const m of spec.marks) {
    if (Math.abs(m.t - t) <= reach) lines.push(el('div', { class: 'tip-mark' }, m.label + (m.detail ? ': ' + truncate(m.detail, 160) : '')));
  }
  tip.replaceChildren(...lines);
  tip.removeAttribute('hidden');
  const left = mx + 14 + tip.offsetWidth > r.width ? mx - 14 - tip.offsetWidth : mx + 14;
  tip.style.left = Math.max(0, left) + 'px';
  tip.style.top = Math.max(0, my - 10) + 'px';
}
