// The top of the page: the command, when it ran (UTC and the browser's
// zone, 24-hour clock), how it ended, where samples came from, the jobs and
// their OOM forecasts, and links to the sections.

function exitSummary(exit) {
  const parts = [];
  if (isNum(exit.code)) parts.push('exit code ' + exit.code);
  if (isNum(exit.signal)) parts.push('ended by signal ' + signalName(exit.signal));
  if (exit.interrupted) parts.push('interrupted by gpumon (Ctrl-C or SIGTERM)');
  if (!parts.length) parts.push('no exit status recorded');
  const ok = exit.code === 0 && !isNum(exit.signal) && !exit.oom && !exit.interrupted;
  return { text: parts.join(', '), ok: ok };
}

function renderHeader(ctx, root) {
  const r = ctx.report;
  const exit = exitSummary(r.exit);
  const command = shellJoin(r.command);
  document.title = 'gpumon profile: ' + truncate(command || 'report', 80);
  const head = el('header', { class: 'top' }, [
    el('div', { class: 'brand' }, 'gpumon profile'),
    el('code', { id: 'command', class: 'command' }, command || '(no command recorded)'),
  ]);
  const status = [badge(exit.ok ? 'succeeded' : 'failed', exit.ok ? 'state-ok' : 'state-failed'), ' ', el('span', { id: 'exit-text' }, exit.text)];
  if (r.exit.oom) {
    status.push(' ', badge('out of memory', 'sev-critical'));
    if (r.exit.oom_reason) status.push(' ', el('span', { id: 'oom-reason' }, r.exit.oom_reason));
  }
  const facts = el('div', { class: 'facts' }, [
    fact('started (UTC)', fmtDateTime(r.started_t, true), { id: 'started-utc' }),
    fact('started (local, ' + fmtZone(r.started_t) + ')', fmtDateTime(r.started_t, false), { id: 'started-local' }),
    fact('ended (UTC)', fmtDateTime(r.ended_t, true)),
    fact('duration', isNum(r.started_t) && isNum(r.ended_t) ? fmtDuration(r.ended_t - r.started_t) : DASH, { id: 'duration' }),
    fact('samples from', r.source || DASH),
    fact('GPUs', String(r.gpus.length)),
    fact('ranks', String(r.ranks.length)),
    fact('alerts', alertCounts(r.alerts)),
  ]);
  const summary = el('section', { class: 'panel run' }, [
    el('div', { class: 'exit' + (exit.ok ? ' ok' : ' bad'), id: 'exit' }, status),
    facts,
    jobsLine(ctx),
    versionNote(r),
  ]);
  const nav = el('nav', { class: 'toc' }, [
    ['#heatmap-panel', 'ranks over time'],
    ['#timeline', 'memory per rank'],
    ['#sections', 'step times'],
    ['#host', 'host'],
    ['#gpus', 'GPUs'],
    ['#ranks', 'ranks'],
    ['#alerts', 'alerts'],
    ['#recommendations', 'recommendations'],
    ['#marks', 'marks'],
    ['#snapshots', 'snapshots'],
    ['#summary', 'counts'],
  ].map((x) => el('a', { href: x[0] }, x[1])));
  root.appendChild(head);
  root.appendChild(nav);
  root.appendChild(summary);
}

function alertCounts(alerts) {
  const active = alerts.filter((a) => !isNum(a.resolved_t)).length;
  return alerts.length + (alerts.length ? ' (' + active + ' active at the end)' : '');
}

// Each job with its world size and OOM forecast.
function jobsLine(ctx) {
  const jobs = Object.keys(ctx.report.jobs);
  if (!jobs.length) return null;
  const items = jobs.slice(0, 16).map((id) => {
    const j = ctx.report.jobs[id];
    const f = j.forecast;
    const text = 'job ' + id + ': ' + j.world_size + (j.world_size === 1 ? ' rank' : ' ranks') +
      (f ? '; OOM forecast on rank ' + j.forecast_rank + ' at ' + fmtDateTime(f.predicted_oom_t, true) + ' UTC (' + relativeToEnd(f.predicted_oom_t, ctx.range) + ')' : '; no OOM forecast');
    return el('li', { class: 'job' + (f ? ' forecast' : ''), 'data-job': id }, text);
  });
  return el('ul', { class: 'jobs' }, items);
}

function relativeToEnd(t, range) {
  if (!isNum(t)) return DASH;
  return t >= range.end ? fmtDuration(t - range.end) + ' after the end' : fmtDuration(range.end - t) + ' before the end';
}

function versionNote(r) {
  if (r.gpumon_profile === 1) return null;
  return el('p', { class: 'banner' }, 'This report has format version ' + r.gpumon_profile + '; this page was written for version 1 and shows what it understands.');
}
