// Memory over time: a chart per rank (allocated and reserved from the hook,
// its GPU's used memory, the hook's marks, the GPU's capacity and levels,
// the OOM forecast), a chart per GPU when no rank was found, and the host's
// RAM with the command's process tree.

const MAX_RANK_CHARTS = 64;
const CHART_HEIGHT = 230;
const INK = {
  allocated: '#2563eb',
  reserved: '#93b4f5',
  used: '#0f9488',
  capacity: '#1f2937',
  warning: '#d97706',
  critical: '#dc2626',
  forecast: '#7c3aed',
  forecastBand: 'rgba(124, 58, 237, 0.10)',
  hostUsed: '#0369a1',
  rss: '#c026d3',
};

function pairKey(a, b) {
  return a + '\u0000' + b;
}

// Value i of a timeline point (t, [a, b]).
function pointValue(p, i) {
  return Array.isArray(p[1]) ? p[1][i] : null;
}

function series(label, color, timeline, i, extra) {
  return Object.assign({ label: label, color: color, points: timeline.map((p) => [p[0], pointValue(p, i)]) }, extra || {});
}

// Lookups the page needs often: a rank's GPU and a rank's marks.
function indexReport(report) {
  const gpus = new Map();
  const byIndex = new Map();
  for (const g of report.gpus) {
    gpus.set(pairKey(g.node, g.gpu), g);
    byIndex.set(g.gpu, byIndex.has(g.gpu) ? null : g);
  }
  const marks = new Map();
  for (const m of report.marks) {
    const k = pairKey(m.job, m.rank);
    if (!marks.has(k)) marks.set(k, []);
    marks.get(k).push(m);
  }
  return {
    // By node and index; a rank with no known node takes the only GPU of
    // its index.
    gpuOf(rank) {
      if (!isNum(rank.gpu)) return null;
      if (rank.node !== null && rank.node !== undefined) return gpus.get(pairKey(rank.node, rank.gpu)) || null;
      return byIndex.get(rank.gpu) || null;
    },
    marksOf(rank) {
      return marks.get(pairKey(rank.job, rank.rank)) || [];
    },
  };
}

// The run's span in seconds since the epoch; from the data when the report's
// own times are missing or backwards.
function runRange(report) {
  let start = report.started_t;
  let end = report.ended_t;
  if (!isNum(start) || !isNum(end) || end <= start) {
    let lo = Infinity;
    let hi = -Infinity;
    const see = (tl) => {
      for (const p of tl) {
        if (isNum(p[0])) {
          lo = Math.min(lo, p[0]);
          hi = Math.max(hi, p[0]);
        }
      }
    };
    report.ranks.forEach((r) => see(r.timeline));
    report.gpus.forEach((g) => see(g.timeline));
    see(report.host.timeline);
    if (!isNum(start)) start = isFinite(lo) ? lo : 0;
    if (!isNum(end) || end <= start) end = Math.max(isFinite(hi) ? hi : start, start + 1);
  }
  return { start: start, end: end, len: end - start };
}

function forecastOf(rank, gpu) {
  if (rank && rank.forecast) return { f: rank.forecast, whose: "this rank's" };
  if (gpu && gpu.forecast) return { f: gpu.forecast, whose: "its GPU's" };
  return null;
}

// Where the charts' time axis ends: the run's end, or a predicted OOM
// within twice the run's length from its start.
function axisEnd(range, forecasts) {
  let end = range.end;
  for (const fc of forecasts) {
    const p = fc.f.predicted_oom_t;
    if (isNum(p) && p > end && p - range.start <= 2 * range.len) end = Math.max(end, p + 0.03 * range.len);
  }
  return end;
}

function gpuLevels(levels, total) {
  if (!isNum(total) || total <= 0) return [];
  return [
    { y: total, label: 'capacity ' + fmtBytes(total), color: INK.capacity },
    { y: (total * levels.gpu_critical_pct) / 100, label: 'critical ' + fmtPct(levels.gpu_critical_pct), color: INK.critical, dash: [6, 4] },
    { y: (total * levels.gpu_warning_pct) / 100, label: 'warning ' + fmtPct(levels.gpu_warning_pct), color: INK.warning, dash: [6, 4] },
  ];
}

// The forecast as drawn: the peak line from the newest window rising to
// where, with its spike margin, it meets the usable capacity; the interval
// of the predicted time shaded; a mark at the predicted time.
function forecastParts(fc) {
  const f = fc.f;
  const p = f.predicted_oom_t;
  if (![f.t, p, f.level_bytes, f.slope_bytes_per_s].every(isNum)) return null;
  const margin = isNum(f.margin_bytes) ? f.margin_bytes : 0;
  const top = f.level_bytes + f.slope_bytes_per_s * (p - f.t);
  const segments = [{ t0: f.t, v0: f.level_bytes, t1: p, v1: top, color: INK.forecast, dash: [7, 4], width: 2 }];
  if (margin > 0) segments.push({ t0: f.t, v0: f.level_bytes + margin, t1: p, v1: top + margin, color: INK.forecast, dash: [2, 3], width: 1 });
  const bands = isNum(f.earliest_oom_t) && isNum(f.latest_oom_t) ? [{ t0: f.earliest_oom_t, t1: f.latest_oom_t, color: INK.forecastBand }] : [];
  return {
    segments: segments,
    bands: bands,
    mark: { t: p, label: 'predicted OOM', color: INK.critical },
    top: Math.max(top + margin, isNum(f.usable_bytes) ? f.usable_bytes : 0),
  };
}

function forecastNote(fc, range, x1) {
  const f = fc.f;
  const p = f.predicted_oom_t;
  const rel = p > range.end ? fmtDuration(p - range.end) + ' after the run ended' : '+' + fmtElapsed(p - range.start) + ' into the run';
  const where = p <= x1 ? 'the dashed violet line' : 'beyond this chart';
  return (
    'OOM forecast (' + fc.whose + '): out of memory at ' + fmtDateTime(p, true) + ' UTC, ' + rel + ' (' + where +
    '; likely between ' + fmtClock(f.earliest_oom_t, true) + ' and ' + fmtClock(f.latest_oom_t, true) + ' UTC). ' +
    'Peaks grow ' + fmtRate(f.slope_bytes_per_s) + ' from ' + fmtBytes(f.level_bytes) +
    (f.margin_bytes > 0 ? ' with ' + fmtBytes(f.margin_bytes) + ' kept for spikes' : '') +
    ' toward ' + fmtBytes(f.usable_bytes) + ' usable; confidence ' + fmtPct(f.confidence * 100) + ', risk ' + f.risk + '.'
  );
}

function maxOf(seriesList) {
  let m = 0;
  for (const s of seriesList) for (const p of s.points) if (isNum(p[1]) && p[1] > m) m = p[1];
  return m;
}

// A memory chart of one rank or one GPU, with its notes, into box.
function memoryChart(box, ctx, rank, gpu, marks) {
  const list = [];
  if (rank && rank.timeline.length) {
    list.push(series('allocated', INK.allocated, rank.timeline, 0, { width: 1.8 }));
    list.push(series('reserved', INK.reserved, rank.timeline, 1));
  }
  if (gpu && gpu.timeline.length) list.push(series('GPU used', INK.used, gpu.timeline, 0));
  const fc = forecastOf(rank, gpu);
  const parts = fc ? forecastParts(fc) : null;
  const levels = gpuLevels(ctx.report.levels, gpu ? gpu.total_bytes : null);
  if (!list.length && !parts) {
    box.appendChild(placeholder('rank-timeline', rank
      ? 'No memory samples for this rank: the hook sent no allocator data and no GPU was matched to its process.'
      : 'No samples for this GPU.'));
    return null;
  }
  const markList = marks.map((m) => ({ t: m.t, label: m.name, detail: m.detail }));
  if (parts) markList.push(parts.mark);
  const top = Math.max(maxOf(list), levels.length ? levels[0].y : 0, parts && parts.mark.t <= ctx.x1 ? parts.top : 0);
  const canvas = lineChart(box, {
    title: rank ? 'memory of rank ' + rank.rank : 'memory of GPU ' + gpu.gpu,
    height: CHART_HEIGHT,
    origin: ctx.range.start,
    x0: ctx.range.start,
    x1: ctx.x1,
    y1: top * 1.1,
    series: list,
    levels: levels,
    marks: markList,
    segments: parts ? parts.segments : [],
    bands: parts ? parts.bands : [],
    legendExtra: parts ? [{ color: INK.forecast, label: 'OOM forecast', style: 'dashed' }] : [],
  });
  if (rank && !rank.timeline.length) {
    box.appendChild(el('p', { class: 'note' }, 'No hook data for this rank: allocated and reserved are unknown; the line is its GPU’s used memory.'));
  }
  if (fc && parts) box.appendChild(el('p', { class: 'forecast-note', 'data-forecast-t': fc.f.predicted_oom_t }, forecastNote(fc, ctx.range, ctx.x1)));
  return canvas;
}

function rankFlags(rank) {
  const out = [];
  if (rank.ooms > 0) out.push(badge(rank.ooms + (rank.ooms === 1 ? ' OOM' : ' OOMs'), 'sev-critical'));
  if (rank.leak) out.push(badge('leak ' + fmtRate(rank.leak_bytes_per_s), 'flag-leak'));
  if (rank.fragmentation) out.push(badge('fragmentation', 'flag-frag'));
  if (rank.imbalance) out.push(badge('imbalance', 'flag-imbalance'));
  if (rank.straggler) out.push(badge('straggler ' + fmtRatio(rank.slowdown), 'flag-straggler'));
  if (rank.risk && rank.risk !== 'none') out.push(badge('OOM risk ' + rank.risk, 'sev-' + rank.risk));
  return out;
}

function hasFindings(rank) {
  return rank.leak || rank.fragmentation || rank.imbalance || rank.straggler || rank.forecast || rank.ooms > 0 || (rank.risk && rank.risk !== 'none');
}

// At most MAX_RANK_CHARTS ranks, those with findings first, shown in order.
function chartedRanks(ranks) {
  if (ranks.length <= MAX_RANK_CHARTS) return ranks;
  const pick = new Set();
  for (const r of ranks) if (pick.size < MAX_RANK_CHARTS && hasFindings(r)) pick.add(r);
  for (const r of ranks) if (pick.size < MAX_RANK_CHARTS) pick.add(r);
  return ranks.filter((r) => pick.has(r));
}

function where(rank) {
  const parts = [];
  if (rank.node !== null && rank.node !== undefined) parts.push(rank.node);
  if (isNum(rank.gpu)) parts.push('GPU ' + rank.gpu);
  if (isNum(rank.pid)) parts.push('pid ' + rank.pid);
  return parts.join(' · ');
}

function renderTimelines(ctx, root) {
  const report = ctx.report;
  const p = panel('timeline', 'Memory per rank',
    'Per rank: allocated (live tensors) and reserved (the caching allocator) from the hook, the GPU’s used memory, the hook’s marks, the GPU’s capacity and levels. Time runs from the command’s start.');
  const ranks = chartedRanks(report.ranks);
  if (ranks.length < report.ranks.length) {
    p.appendChild(el('p', { class: 'more' }, 'Charts of ' + ranks.length + ' of ' + report.ranks.length +
      ' ranks: those with findings first, then by rank. The heatmap above and the rank table below show every rank.'));
  }
  const grid = el('div', { class: 'chart-grid' });
  p.appendChild(grid);
  root.appendChild(p);
  let charts = 0;
  for (const rank of ranks) {
    const gpu = ctx.ix.gpuOf(rank);
    const box = el('div', { class: 'rank-chart', 'data-job': rank.job, 'data-rank': rank.rank });
    const heading = el('h3', null, ['rank ' + rank.rank, el('span', { class: 'muted' }, ' · job ' + rank.job + (where(rank) ? ' · ' + where(rank) : ''))]);
    box.appendChild(heading);
    const flags = rankFlags(rank);
    if (flags.length) box.appendChild(el('div', { class: 'flags' }, flags));
    grid.appendChild(box);
    memoryChart(box, ctx, rank, gpu, ctx.ix.marksOf(rank));
    charts++;
  }
  ctx.root.setAttribute('data-rank-charts', charts);
  append(p, moreNote('ranks', ranks.length, report.ranks.length, 'the charts show ranks with findings first, then by rank'));
  if (report.ranks.length) return;
  if (!report.gpus.length) {
    p.appendChild(placeholder('timeline', 'No GPU or rank was seen: the command used no GPU that gpumon could read, and the hook reported nothing.'));
    return;
  }
  p.appendChild(placeholder('ranks', 'No ranks were found (the command did not run under torchrun, and the hook did not report); the charts show each GPU’s used memory.'));
  let gpuCharts = 0;
  for (const gpu of report.gpus.slice(0, MAX_RANK_CHARTS)) {
    const box = el('div', { class: 'rank-chart', 'data-node': gpu.node, 'data-gpu': gpu.gpu });
    box.appendChild(el('h3', null, [gpu.node + ' · GPU ' + gpu.gpu, el('span', { class: 'muted' }, ' · ' + gpu.name)]));
    grid.appendChild(box);
    memoryChart(box, ctx, null, gpu, []);
    gpuCharts++;
  }
  ctx.root.setAttribute('data-gpu-charts', gpuCharts);
  append(p, moreNote('GPUs', gpuCharts, report.gpus.length));
}

function renderHost(ctx, root) {
  const host = ctx.report.host;
  const p = panel('host', 'Host memory', 'RAM in use on this node (total less available) and the resident memory of the command’s process tree, with the host’s levels.');
  root.appendChild(p);
  p.appendChild(el('div', { class: 'facts' }, [
    fact('RAM', fmtBytes(host.total_bytes)),
    fact('peak used', fmtBytes(host.peak_used_bytes) + pctOf(host.peak_used_bytes, host.total_bytes)),
    fact('mean used', fmtBytes(host.avg_used_bytes)),
    fact('peak process tree', fmtBytes(host.peak_rss_bytes)),
    fact('mean process tree', fmtBytes(host.avg_rss_bytes)),
  ]));
  if (!host.timeline.length) {
    p.appendChild(placeholder('host', 'No host samples were taken.'));
    return;
  }
  const lv = ctx.report.levels;
  const total = host.total_bytes;
  const levels = isNum(total) && total > 0
    ? [
      { y: total, label: 'RAM ' + fmtBytes(total), color: INK.capacity },
      { y: (total * lv.host_critical_pct) / 100, label: 'critical ' + fmtPct(lv.host_critical_pct), color: INK.critical, dash: [6, 4] },
      { y: (total * lv.host_warning_pct) / 100, label: 'warning ' + fmtPct(lv.host_warning_pct), color: INK.warning, dash: [6, 4] },
    ]
    : [];
  const list = [series('RAM used', INK.hostUsed, host.timeline, 0, { width: 1.8 }), series('process tree RSS', INK.rss, host.timeline, 1)];
  const canvas = lineChart(p, {
    title: 'host memory',
    height: CHART_HEIGHT,
    origin: ctx.range.start,
    x0: ctx.range.start,
    x1: ctx.range.end,
    y1: Math.max(maxOf(list), isNum(total) ? total : 0) * 1.1,
    series: list,
    levels: levels,
  });
  canvas.id = 'host-chart';
}
