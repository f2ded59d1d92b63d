// The rank x time heatmap: a row per rank, a column per time bucket, the
// colour the highest allocated memory in the bucket (the GPU's used memory
// for a rank without hook data) on a scale from the lowest to the highest
// cell of the whole matrix, so that differences between ranks show even when
// they are small beside the capacity. Drawn as one image: thousands of ranks
// cost no more than a few.

const HEAT_ROW_MAX = 18;
const HEAT_TARGET = 560;
const HEAT_MAX_HEIGHT = 800;
const HEAT_EMPTY = [238, 241, 245];
// Light to dark: low memory pale yellow, high memory deep purple.
const HEAT_STOPS = [
  [255, 247, 200],
  [254, 196, 79],
  [240, 110, 50],
  [196, 40, 80],
  [120, 20, 110],
  [45, 10, 75],
];

function heatColor(f) {
  const x = Math.min(1, Math.max(0, f)) * (HEAT_STOPS.length - 1);
  const i = Math.min(HEAT_STOPS.length - 2, Math.floor(x));
  const u = x - i;
  const a = HEAT_STOPS[i];
  const b = HEAT_STOPS[i + 1];
  return [0, 1, 2].map((k) => Math.round(a[k] + (b[k] - a[k]) * u));
}

function heatGradient() {
  return 'linear-gradient(to right, ' + HEAT_STOPS.map((c, i) => 'rgb(' + c.join(',') + ') ' + Math.round((100 * i) / (HEAT_STOPS.length - 1)) + '%').join(', ') + ')';
}

// Each rank's series for the heatmap, and whether it is the GPU's.
function heatSources(ctx) {
  return ctx.report.ranks.map((r) => {
    if (r.timeline.length) return { points: r.timeline, gpu: false };
    const g = ctx.ix.gpuOf(r);
    return { points: g ? g.timeline : [], gpu: true };
  });
}

// Columns: about one per 5 pixels, and no more than the typical row has
// samples, so that buckets are not mostly empty.
function heatColumns(sources, width) {
  const counts = sources.map((s) => s.points.length).filter((n) => n > 0).sort((a, b) => a - b);
  const typical = counts.length ? counts[counts.length >> 1] : 1;
  return Math.max(1, Math.min(Math.floor(width / 5), 400, typical));
}

function heatMatrix(sources, cols, range) {
  const values = new Float64Array(sources.length * cols).fill(NaN);
  let min = Infinity;
  let max = -Infinity;
  sources.forEach((s, r) => {
    for (const p of s.points) {
      const v = pointValue(p, 0);
      if (!isNum(p[0]) || !isNum(v)) continue;
      const c = Math.floor(((p[0] - range.start) / range.len) * cols);
      if (c < 0 || c > cols) continue;
      const i = r * cols + Math.min(c, cols - 1);
      if (!(values[i] >= v)) values[i] = v;
    }
  });
  for (const v of values) {
    if (v === v) {
      if (v < min) min = v;
      if (v > max) max = v;
    }
  }
  return { values: values, cols: cols, rows: sources.length, min: min, max: max };
}

// Pixel rows of the image: one per rank while they fit in the height cap,
// else each pixel row the highest of the ranks it stands for.
function heatImage(m, pixRows) {
  const img = new ImageData(m.cols, pixRows);
  const spread = m.max > m.min ? m.max - m.min : 1;
  for (let y = 0; y < pixRows; y++) {
    const r0 = Math.floor((y * m.rows) / pixRows);
    const r1 = Math.max(r0 + 1, Math.floor(((y + 1) * m.rows) / pixRows));
    for (let c = 0; c < m.cols; c++) {
      let v = NaN;
      for (let r = r0; r < r1; r++) {
        const x = m.values[r * m.cols + c];
        if (!(v >= x)) v = x === x ? x : v;
      }
      const rgb = v === v ? heatColor(m.max > m.min ? (v - m.min) / spread : 0.5) : HEAT_EMPTY;
      const o = (y * m.cols + c) * 4;
      img.data[o] = rgb[0];
      img.data[o + 1] = rgb[1];
      img.data[o + 2] = rgb[2];
      img.data[o + 3] = 255;
    }
  }
  return img;
}

function rankLabel(rank, manyJobs) {
  return manyJobs ? truncate(rank.job, 8) + ':' + rank.rank : 'rank ' + rank.rank;
}

function drawHeatmap(canvas, ctx, sources, layout) {
  const range = ctx.range;
  const ranks = ctx.report.ranks;
  const pad = { l: 78, r: 12, t: 6, b: 24 };
  const box = sizeCanvas(canvas, layout.height + pad.t + pad.b);
  const pw = Math.max(10, box.w - pad.l - pad.r);
  const m = heatMatrix(sources, heatColumns(sources, pw), range);
  const pixRows = Math.min(m.rows, layout.height);
  const off = document.createElement('canvas');
  off.width = m.cols;
  off.height = pixRows;
  off.getContext('2d').putImageData(heatImage(m, pixRows), 0, 0);
  const g = box.ctx;
  g.imageSmoothingEnabled = false;
  g.drawImage(off, pad.l, pad.t, pw, layout.height);
  if (layout.rowPx >= 8) {
    g.strokeStyle = 'rgba(255,255,255,0.8)';
    g.lineWidth = 1;
    for (let r = 1; r < m.rows; r++) {
      const y = pad.t + r * layout.rowPx + 0.5;
      g.beginPath();
      g.moveTo(pad.l, y);
      g.lineTo(pad.l + pw, y);
      g.stroke();
    }
  }
  // Rank labels: every row when they fit, else every k-th.
  const manyJobs = new Set(ranks.map((r) => r.job)).size > 1;
  const rowH = layout.height / m.rows;
  const every = rowH >= 11 ? 1 : niceStep(13 / rowH);
  g.fillStyle = AXIS_INK;
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (let r = 0; r < m.rows; r += every) {
    const y = pad.t + (r + 0.5) * rowH;
    g.fillText(rankLabel(ranks[r], manyJobs), pad.l - (sources[r].gpu ? 14 : 6), y);
    if (sources[r].gpu && rowH >= 6) {
      g.strokeStyle = AXIS_INK;
      g.beginPath();
      g.arc(pad.l - 7, y, 2.5, 0, 2 * Math.PI);
      g.stroke();
    }
  }
  const step = timeStep(range.len, Math.max(2, Math.floor(pw / 80)));
  g.textAlign = 'center';
  g.textBaseline = 'top';
  for (let e = 0; e <= range.len + 1e-9; e += step) {
    axisLabel(g, fmtElapsed(e, step), pad.l + (e / range.len) * pw, pad.t + layout.height + 6, box.w);
  }
  return { m: m, pad: pad, pw: pw, rowH: rowH };
}

function heatLayout(rows) {
  const rowPx = Math.max(1, Math.min(HEAT_ROW_MAX, Math.floor(HEAT_TARGET / rows)));
  return { rowPx: rowPx, height: Math.min(rows * rowPx, HEAT_MAX_HEIGHT) };
}

function renderHeatmap(ctx, root) {
  const ranks = ctx.report.ranks;
  const sources = heatSources(ctx);
  const someGpu = sources.some((s) => s.gpu && s.points.length);
  const p = panel('heatmap-panel', 'Ranks over time',
    'Each row a rank, each column a slice of the run; the colour is the highest allocated memory in the slice' +
    (someGpu ? ' (rows marked ○ have no hook data and show their GPU’s used memory)' : '') +
    '. The scale runs from the lowest to the highest cell, not from zero.');
  root.appendChild(p);
  if (!ranks.length || sources.every((s) => !s.points.length)) {
    p.appendChild(placeholder('heatmap', ranks.length
      ? 'No rank has memory samples: the hook sent no allocator data and no GPU was matched to a rank.'
      : 'No ranks were found, so there is nothing to compare.'));
    ctx.root.setAttribute('data-heatmap-rows', 0);
    return;
  }
  const layout = heatLayout(ranks.length);
  const canvas = el('canvas', { id: 'heatmap', class: 'heatmap', role: 'img', 'aria-label': 'memory of every rank over time' });
  const tip = el('div', { class: 'tip', hidden: '' });
  p.appendChild(el('div', { class: 'chart-box' }, [canvas, tip]));
  const lowText = el('span', { class: 'scale-end', id: 'heat-min' });
  const highText = el('span', { class: 'scale-end', id: 'heat-max' });
  const bar = el('span', { class: 'scale-bar' });
  bar.style.background = heatGradient();
  const noData = el('span', { class: 'swatch' });
  noData.style.background = 'rgb(' + HEAT_EMPTY.join(',') + ')';
  p.appendChild(el('div', { class: 'legend heat-legend' }, [lowText, bar, highText, el('span', { class: 'legend-item' }, [noData, 'no sample'])]));
  let geo = null;
  const draw = () => {
    geo = drawHeatmap(canvas, ctx, sources, layout);
    canvas.setAttribute('data-rows', geo.m.rows);
    canvas.setAttribute('data-cols', geo.m.cols);
    lowText.textContent = fmtBytes(geo.m.min);
    highText.textContent = fmtBytes(geo.m.max);
    lowText.setAttribute('data-bytes', geo.m.min);
    highText.setAttribute('data-bytes', geo.m.max);
  };
  draw();
  redrawers.push(draw);
  ctx.root.setAttribute('data-heatmap-rows', ranks.length);
  canvas.addEventListener('mouseleave', () => tip.setAttribute('hidden', ''));
  canvas.addEventListener('mousemove', (ev) => {
    if (!geo) return;
    const r = canvas.getBoundingClientRect();
    const x = ev.clientX - r.left - geo.pad.l;
    const y = ev.clientY - r.top - geo.pad.t;
    const row = Math.floor(y / geo.rowH);
    const col = Math.floor((x / geo.pw) * geo.m.cols);
    if (x < 0 || row < 0 || row >= geo.m.rows || col < 0 || col >= geo.m.cols) {
      tip.setAttribute('hidden', '');
      return;
    }
    const rank = ranks[row];
    const t0 = (col / geo.m.cols) * ctx.range.len;
    const t1 = ((col + 1) / geo.m.cols) * ctx.range.len;
    tip.replaceChildren(
      el('div', { class: 'tip-head' }, 'rank ' + rank.rank + ' · job ' + rank.job),
      el('div', null, '+' + fmtElapsed(t0) + ' to +' + fmtElapsed(t1)),
      el('div', null, (sources[row].gpu ? 'GPU used ' : 'allocated ') + fmtBytes(geo.m.values[row * geo.m.cols + col])),
    );
    tip.removeAttribute('hidden');
    tip.style.left = Math.min(ev.clientX - r.left + 14, r.width - tip.offsetWidth) + 'px';
    tip.style.top = (ev.clientY - r.top + 10) + 'px';
  });
}
