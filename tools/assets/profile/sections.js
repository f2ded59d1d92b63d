// Where each rank's step time goes: a bar per rank of its sections' median
// times stacked (a section keeps its colour on every rank), the step's
// median and 90th percentile marked on the same scale, and the straggler
// flagged. Bars are plain elements: text and hover titles come for free.

const MAX_SECTION_ROWS = 64;
const SECTION_COLORS = ['#2563eb', '#f59e0b', '#10b981', '#ef4444', '#8b5cf6', '#06b6d4', '#ec4899', '#84cc16', '#f97316', '#64748b'];

function sectionColor(i) {
  return i < SECTION_COLORS.length ? SECTION_COLORS[i] : 'hsl(' + Math.round((i * 137.5) % 360) + ', 60%, 50%)';
}

function timed(rank) {
  return (rank.step_ms && isNum(rank.step_ms.p50)) || Object.keys(rank.sections).length > 0;
}

function sectionSum(rank) {
  let s = 0;
  for (const q of Object.values(rank.sections)) if (isNum(q.p50)) s += q.p50;
  return s;
}

function stepP50(rank) {
  return rank.step_ms && isNum(rank.step_ms.p50) ? rank.step_ms.p50 : -Infinity;
}

// At most MAX_SECTION_ROWS ranks: all of them, or the slowest by median
// step (stragglers always), shown in rank order.
function sectionRanks(ranks) {
  if (ranks.length <= MAX_SECTION_ROWS) return ranks;
  const order = ranks.slice().sort((a, b) => (b.straggler - a.straggler) || (stepP50(b) - stepP50(a)));
  const pick = new Set(order.slice(0, MAX_SECTION_ROWS));
  return ranks.filter((r) => pick.has(r));
}

function renderSections(ctx, root) {
  const ranks = ctx.report.ranks.filter(timed);
  const why = ctx.report.ranks.length
    ? 'No step times: the hook was not loaded, or the script finished no step (steps are counted at optimizer.step() or gpumon.step(); sections come from gpumon.section(name) and gpumon.watch(model)).'
    : 'No ranks were found, so there are no step times.';
  const p = openPanel(root, 'sections', 'Step and section times',
    'Per rank, the median time of each section in a step, stacked; the black tick is the step’s median, the grey one its 90th percentile. Time outside every section shows as the gap between the bar and the median tick.',
    !ranks.length && ['sections', why]);
  if (!p) return;
  const names = Array.from(new Set(ranks.flatMap((r) => Object.keys(r.sections)))).sort();
  const colorOf = new Map(names.map((n, i) => [n, sectionColor(i)]));
  const shown = sectionRanks(ranks);
  let scale = 0;
  for (const r of shown) {
    scale = Math.max(scale, sectionSum(r));
    if (r.step_ms) for (const v of [r.step_ms.p50, r.step_ms.p90]) if (isNum(v)) scale = Math.max(scale, v);
  }
  scale = scale > 0 ? scale * 1.02 : 1;
  const legendItems = names.map((n) => swatch(colorOf.get(n), n));
  legendItems.push(swatch('#111827', 'step p50', 'line'), swatch('#9ca3af', 'step p90', 'line'));
  p.appendChild(el('div', { class: 'legend' }, legendItems));
  const rows = el('div', { class: 'bars', id: 'section-bars' });
  for (const r of shown) rows.appendChild(sectionRow(r, names, colorOf, scale));
  rows.appendChild(el('div'));
  rows.appendChild(el('div', { class: 'bar-scale' }, [el('span', null, '0'), el('span', null, fmtMs(scale))]));
  rows.appendChild(el('div'));
  p.appendChild(rows);
  append(p, moreNote('ranks', shown.length, ranks.length, 'the bars show the slowest by median step'));
}

function sectionRow(rank, names, colorOf, scale) {
  const pct = (ms) => Math.max(0, Math.min(100, (100 * ms) / scale)) + '%';
  const track = el('div', { class: 'bar-track' });
  for (const n of names) {
    const q = rank.sections[n];
    if (!q || !isNum(q.p50) || q.p50 <= 0) continue;
    const seg = el('span', { class: 'bar-seg', title: n + ': median ' + fmtMs(q.p50) + ', p90 ' + fmtMs(q.p90), 'data-section': n });
    seg.style.width = pct(q.p50);
    seg.style.background = colorOf.get(n);
    track.appendChild(seg);
  }
  const s = rank.step_ms;
  for (const [v, cls] of s ? [[s.p90, 'tick-p90'], [s.p50, 'tick-p50']] : []) {
    if (!isNum(v)) continue;
    const tick = el('span', { class: 'tick ' + cls });
    tick.style.left = pct(v);
    track.appendChild(tick);
  }
  const label = el('div', { class: 'bar-label' }, 'rank ' + rank.rank);
  const numbers = el('div', { class: 'bar-numbers' }, s ? 'p50 ' + fmtMs(s.p50) + ' · p90 ' + fmtMs(s.p90) : 'no step time');
  if (rank.straggler) numbers.appendChild(badge('straggler ' + fmtRatio(rank.slowdown), 'flag-straggler'));
  return el('div', { class: 'bar-row' + (rank.straggler ? ' straggler' : ''), 'data-rank': rank.rank, 'data-job': rank.job, 'data-straggler': rank.straggler ? 'true' : 'false' }, [label, track, numbers]);
}
