// Starts the page: reads the embedded report, fills in what an older or
// damaged report lacks, and builds each section. A section that fails says
// so and the others still show; the root element counts the
// failures (data-errors) and says when it is done (data-rendered).

const root = document.getElementById('report');
let errors = 0;

function countError() {
  errors++;
  root.setAttribute('data-errors', errors);
}

window.addEventListener('error', countError);
window.addEventListener('unhandledrejection', countError);

// Runs f; on an exception, counts it and answers null.
function guarded(what, f) {
  try {
    return f();
  } catch (e) {
    countError();
    if (window.console) console.error('gpumon profile: ' + what + ':', e);
    return null;
  }
}

function list(v) {
  return Array.isArray(v) ? v : [];
}

function object(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : {};
}

// The report with every collection present, so the sections need not check.
function normalize(r) {
  r.command = list(r.command);
  r.exit = object(r.exit);
  r.levels = Object.assign({ gpu_warning_pct: 80, gpu_critical_pct: 95, host_warning_pct: 90, host_critical_pct: 95 }, object(r.levels));
  r.host = object(r.host);
  r.host.timeline = list(r.host.timeline).filter(Array.isArray);
  r.gpus = list(r.gpus).filter((g) => g && typeof g === 'object');
  for (const g of r.gpus) g.timeline = list(g.timeline).filter(Array.isArray);
  r.ranks = list(r.ranks).filter((x) => x && typeof x === 'object');
  for (const x of r.ranks) {
    x.timeline = list(x.timeline).filter(Array.isArray);
    x.sections = object(x.sections);
    for (const k of Object.keys(x.sections)) x.sections[k] = object(x.sections[k]);
  }
  r.jobs = object(r.jobs);
  r.marks = list(r.marks).filter((m) => m && typeof m === 'object');
  r.allocator_snapshots = list(r.allocator_snapshots);
  r.alerts = list(r.alerts).filter((a) => a && typeof a === 'object');
  r.recommendations = list(r.recommendations).filter((x) => x && typeof x === 'object');
  for (const x of r.recommendations) x.numbers = object(x.numbers);
  r.summary = object(r.summary);
  return r;
}

function readReport() {
  const node = document.getElementById('report-data');
  const data = JSON.parse(node ? node.textContent : 'null');
  if (data === null || typeof data !== 'object') throw new Error('the page holds no report');
  return normalize(data);
}

function start() {
  root.textContent = '';
  root.setAttribute('data-errors', errors);
  const report = guarded('reading the report', readReport);
  if (!report) {
    root.appendChild(placeholder('report', 'This page holds no readable report. The JSON report (gpumon profile --json) has the same data.'));
    root.setAttribute('data-rendered', 'failed');
    return;
  }
  const range = runRange(report);
  const ix = indexReport(report);
  const forecasts = chartedRanks(report.ranks).map((r) => forecastOf(r, ix.gpuOf(r))).filter(Boolean);
  for (const g of report.gpus) if (g.forecast) forecasts.push({ f: g.forecast });
  const ctx = { report: report, ix: ix, range: range, x1: axisEnd(range, forecasts), root: root };
  root.setAttribute('data-rank-charts', 0);
  root.setAttribute('data-heatmap-rows', 0);
  const sections = [
    ['header', renderHeader],
    ['heatmap', renderHeatmap],
    ['memory charts', renderTimelines],
    ['section times', renderSections],
    ['host', renderHost],
    ['GPU table', renderGpus],
    ['rank table', renderRanks],
    ['alerts', renderAlerts],
    ['recommendations', renderRecommendations],
    ['marks', renderMarks],
    ['snapshots', renderSnapshots],
    ['counts', renderSummary],
  ];
  for (const [what, render] of sections) {
    const before = errors;
    guarded(what, () => render(ctx, root));
    if (errors > before) root.appendChild(placeholder('error', 'The ' + what + ' could not be drawn from this report (see the browser console).'));
  }
  root.setAttribute('data-rendered', 'ok');
}

start();
