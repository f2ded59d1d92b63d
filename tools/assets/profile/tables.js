// The tables: GPUs, ranks, alerts, recommendations, marks, allocator
// snapshots and the counts of what was read. Long lists are cut at a bound
// with a note; the JSON holds everything.

const MAX_TABLE_ROWS = 1000;
const MAX_MARK_ROWS = 500;

function riskBadge(risk) {
  return badge(risk || 'none', 'sev-' + (risk || 'none'));
}

function renderGpus(ctx, root) {
  const gpus = ctx.report.gpus;
  const p = openPanel(root, 'gpus', 'GPUs', null, !gpus.length &&
    ['gpus', 'No GPU was sampled' + (ctx.report.source ? ' (source: ' + ctx.report.source + ')' : '') + '; the command may not have used one.']);
  if (!p) return;
  const rows = gpus.slice(0, MAX_TABLE_ROWS).map((g) => ({
    attrs: { class: 'gpu-row', 'data-node': g.node, 'data-gpu': g.gpu },
    cells: [
      { text: g.node + ' · ' + g.gpu, title: g.uuid },
      g.name,
      num(fmtBytes(g.total_bytes)),
      num(fmtBytes(g.peak_used_bytes)),
      num(isNum(g.total_bytes) && g.total_bytes > 0 ? fmtPct((100 * g.peak_used_bytes) / g.total_bytes) : DASH),
      num(fmtBytes(g.avg_used_bytes)),
      num(fmtPct(g.avg_util_pct)),
      { node: riskBadge(g.risk) },
      g.forecast ? fmtInstant(g.forecast.predicted_oom_t, ctx.range.start) : DASH,
    ],
  }));
  p.appendChild(table('gpus', ['GPU', 'model', ['capacity', 'num'], ['peak used', 'num'], ['peak %', 'num'], ['mean used', 'num'], ['mean util', 'num'], 'OOM risk', 'predicted OOM'], rows));
  append(p, moreNote('GPUs', rows.length, gpus.length));
}

function stepCell(rank) {
  const s = rank.step_ms;
  return s ? fmtMs(s.p50) + ' / ' + fmtMs(s.p90) : DASH;
}

function renderRanks(ctx, root) {
  const ranks = ctx.report.ranks;
  const p = openPanel(root, 'ranks', 'Ranks',
    'Peaks over the run; outside allocator is what the process holds on its GPU beyond the allocator’s reserved at the end (CUDA context, NCCL buffers, library workspaces; with NVML); the floor is the lowest allocated after the first step (parameters, gradients and optimizer state). Findings are the engine’s verdicts at the end.',
    !ranks.length && ['ranks-table', 'No ranks were found: gpumon attributes processes to ranks through torchrun’s variables, or the hook reports them.']);
  if (!p) return;
  const rows = ranks.slice(0, MAX_TABLE_ROWS).map((r) => {
    const flags = rankFlags(r);
    return {
      attrs: { class: 'rank-row' + (hasFindings(r) ? ' flagged' : ''), 'data-job': r.job, 'data-rank': r.rank },
      cells: [
        r.job,
        num(String(r.rank)),
        where(r) || DASH,
        num(fmtBytes(r.peak_allocated_bytes)),
        num(fmtBytes(r.peak_reserved_bytes)),
        num(fmtBytes(r.peak_used_bytes)),
        num(fmtBytes(r.outside_allocator_bytes)),
        num(fmtBytes(r.floor_allocated_bytes)),
        num(String(r.steps)),
        num(stepCell(r)),
        { node: flags.length ? el('span', null, flags) : el('span', { class: 'muted' }, 'none') },
      ],
    };
  });
  p.appendChild(table('ranks', ['job', ['rank', 'num'], 'where', ['peak allocated', 'num'], ['peak reserved', 'num'], ['peak used', 'num'], ['outside allocator', 'num'], ['floor', 'num'], ['steps', 'num'], ['step p50 / p90', 'num'], 'findings'], rows));
  append(p, moreNote('ranks', rows.length, ranks.length));
}

function subjectOf(a) {
  if (a.job !== null && a.job !== undefined) {
    return 'job ' + a.job + (isNum(a.rank) ? ' rank ' + a.rank : '') + (a.node !== null && a.node !== undefined && isNum(a.gpu) ? ' (' + a.node + ' GPU ' + a.gpu + ')' : '');
  }
  if (a.node !== null && a.node !== undefined) return a.node + (isNum(a.gpu) ? ' GPU ' + a.gpu : ' (host)');
  return 'host';
}

function alertDetails(a) {
  const d = [];
  if (isNum(a.predicted_oom_t)) d.push('OOM at ' + fmtClock(a.predicted_oom_t, true) + ' UTC');
  if (isNum(a.confidence)) d.push('confidence ' + fmtPct(a.confidence * 100));
  if (isNum(a.rate_bytes_per_s)) d.push(fmtRate(a.rate_bytes_per_s));
  if (isNum(a.slowdown)) d.push(fmtRatio(a.slowdown) + ' slower');
  if (a.section) d.push('section ' + a.section);
  if (isNum(a.excess_bytes)) d.push(fmtBytes(a.excess_bytes) + ' above median' + (isNum(a.excess_pct) ? ' (' + fmtPct(a.excess_pct) + ')' : ''));
  if (isNum(a.reclaimable_bytes)) d.push(fmtBytes(a.reclaimable_bytes) + ' reclaimable');
  return d.join(' · ');
}

function renderAlerts(ctx, root) {
  const alerts = ctx.report.alerts;
  const p = openPanel(root, 'alerts', 'Alerts', 'Every alert episode of the run, the engine’s and the host’s, in firing order.',
    !alerts.length && ['alerts', 'No alert fired during the run.']);
  if (!p) return;
  const rows = alerts.slice(0, MAX_TABLE_ROWS).map((a) => {
    const active = !isNum(a.resolved_t);
    return {
      attrs: { class: 'alert-row' + (active ? ' active' : ' resolved'), 'data-alert-id': a.id, 'data-alert-kind': a.kind, 'data-active': active },
      cells: [
        { node: badge(String(a.kind).replace(/_/g, ' '), 'kind') },
        { node: badge(a.severity, 'sev-' + a.severity) },
        subjectOf(a),
        num(fmtInstant(a.t, ctx.range.start)),
        { node: active ? badge('active at the end', 'state-active') : el('span', null, 'resolved ' + fmtInstant(a.resolved_t, ctx.range.start)) },
        {
          cls: 'what',
          node: [
            el('div', { class: 'message' }, a.message),
            a.recommendation ? el('div', { class: 'recommendation' }, a.recommendation) : null,
            alertDetails(a) ? el('div', { class: 'muted small' }, alertDetails(a)) : null,
          ],
        },
      ],
    };
  });
  p.appendChild(table('alerts', ['kind', 'severity', 'subject', ['first', 'num'], 'state', 'what'], rows));
  append(p, moreNote('alerts', rows.length, alerts.length));
}

function renderRecommendations(ctx, root) {
  const recs = ctx.report.recommendations;
  const p = openPanel(root, 'recommendations', 'Recommendations', null,
    !recs.length && ['recommendations', 'Nothing to change: no finding called for one.']);
  if (!p) return;
  const list = el('ol', { class: 'recs' });
  for (const r of recs.slice(0, MAX_TABLE_ROWS)) {
    const at = r.job !== null && r.job !== undefined ? 'job ' + r.job + (isNum(r.rank) ? ' rank ' + r.rank : '') : null;
    const nums = Object.keys(r.numbers).map((k) => el('span', { class: 'number', title: k + ' = ' + r.numbers[k] }, [el('span', { class: 'muted' }, k.replace(/_/g, ' ') + ' '), fmtNamed(k, r.numbers[k])]));
    list.appendChild(el('li', { class: 'rec', 'data-kind': r.kind }, [
      badge(String(r.kind).replace(/_/g, ' '), 'kind'),
      at ? el('span', { class: 'muted' }, ' ' + at) : null,
      el('div', { class: 'rec-text' }, r.text),
      nums.length ? el('div', { class: 'numbers' }, nums) : null,
    ]));
  }
  p.appendChild(list);
  append(p, moreNote('recommendations', Math.min(recs.length, MAX_TABLE_ROWS), recs.length));
}

function renderMarks(ctx, root) {
  const marks = ctx.report.marks;
  const s = ctx.report.summary;
  const p = panel('marks', 'Marks and snapshots', 'What the script marked (gpumon.mark, gpumon.snapshot) and the hook’s own events, oldest first.');
  root.appendChild(p);
  if (!marks.length) {
    p.appendChild(placeholder('marks', 'No marks: the script called neither gpumon.mark nor gpumon.snapshot.'));
  } else {
    const rows = marks.slice(0, MAX_MARK_ROWS).map((m) => ({
      attrs: { class: 'mark-row', 'data-job': m.job, 'data-rank': m.rank },
      cells: [
        num(fmtInstant(m.t, ctx.range.start)),
        m.job,
        num(String(m.rank)),
        { cls: 'mark-name', text: m.name },
        { cls: 'mark-detail', text: m.detail === null || m.detail === undefined ? '' : m.detail },
        num(Array.isArray(m.snapshot) ? fmtBytes(m.snapshot[0]) + ' / ' + fmtBytes(m.snapshot[1]) : ''),
      ],
    }));
    p.appendChild(table('marks', [['when', 'num'], 'job', ['rank', 'num'], 'name', 'detail', ['allocated / reserved', 'num']], rows));
    append(p, moreNote('marks', rows.length, marks.length));
  }
  if (s.marks_dropped > 0) p.appendChild(el('p', { class: 'note' }, s.marks_dropped + ' more marks arrived beyond the report’s bound and were left out.'));
}

function renderSnapshots(ctx, root) {
  const paths = ctx.report.allocator_snapshots;
  const p = openPanel(root, 'snapshots', 'Allocator snapshots',
    'Files the hook saved in PyTorch’s snapshot format; open them with PyTorch’s memory visualizer (torch.cuda._memory_viz).',
    !paths.length && ['snapshots', 'No allocator snapshot was saved.']);
  if (!p) return;
  p.appendChild(el('ul', { class: 'paths' }, paths.slice(0, MAX_TABLE_ROWS).map((x) => el('li', null, el('code', null, x)))));
  append(p, moreNote('snapshots', Math.min(paths.length, MAX_TABLE_ROWS), paths.length));
}

function renderSummary(ctx, root) {
  const s = ctx.report.summary;
  const p = panel('summary', 'What was read');
  root.appendChild(p);
  const count = (label, v, key) => fact(label, isNum(v) ? v.toLocaleString('en-US') : DASH, { 'data-count': key });
  p.appendChild(el('div', { class: 'facts' }, [
    count('GPU windows', s.windows, 'windows'),
    count('windows refused', s.windows_skipped, 'windows_skipped'),
    count('hook records', s.hook_records, 'hook_records'),
    count('hook records refused', s.hook_records_skipped, 'hook_records_skipped'),
    count('host samples', s.host_samples, 'host_samples'),
    count('marks left out', s.marks_dropped, 'marks_dropped'),
  ]));
}
