// Numbers and times for people: binary byte units, milliseconds, percent,
// durations, and the 24-hour clock in UTC and in the browser's zone. Every
// formatter takes anything (the report may hold null where a number was not
// finite) and answers a dash for what is not a number.

const DASH = '–';
const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

function isNum(v) {
  return typeof v === 'number' && isFinite(v);
}

function fmtBytes(b) {
  if (!isNum(b)) return DASH;
  let v = Math.abs(b);
  let i = 0;
  while (v >= 1024 && i < BYTE_UNITS.length - 1) {
    v /= 1024;
    i++;
  }
  const digits = i === 0 || v >= 100 ? 0 : v >= 10 ? 1 : 2;
  return (b < 0 ? '−' : '') + v.toFixed(digits) + ' ' + BYTE_UNITS[i];
}

function fmtRate(bytesPerS) {
  if (!isNum(bytesPerS)) return DASH;
  return (bytesPerS > 0 ? '+' : '') + fmtBytes(bytesPerS) + '/s';
}

function fmtMs(ms) {
  if (!isNum(ms)) return DASH;
  if (Math.abs(ms) >= 10000) return (ms / 1000).toFixed(1) + ' s';
  if (Math.abs(ms) >= 100) return ms.toFixed(0) + ' ms';
  if (Math.abs(ms) >= 10) return ms.toFixed(1) + ' ms';
  return ms.toFixed(2) + ' ms';
}

function fmtPct(p) {
  if (!isNum(p)) return DASH;
  return (Math.abs(p) >= 10 ? p.toFixed(0) : p.toFixed(1)) + ' %';
}

function fmtRatio(x) {
  return isNum(x) ? '×' + x.toFixed(2) : DASH;
}

function pad2(n) {
  return (n < 10 ? '0' : '') + n;
}

// A span of time: "850 ms", "12.5 s", "3 min 05 s", "2 h 07 min", "3 d 4 h".
function fmtDuration(s) {
  if (!isNum(s)) return DASH;
  const sign = s < 0 ? '−' : '';
  const a = Math.abs(s);
  if (a < 1) return sign + (a * 1000).toFixed(0) + ' ms';
  if (a < 60) return sign + a.toFixed(a < 10 ? 1 : 0) + ' s';
  const whole = Math.round(a);
  if (whole < 3600) return sign + Math.floor(whole / 60) + ' min ' + pad2(whole % 60) + ' s';
  if (whole < 86400) {
    return sign + Math.floor(whole / 3600) + ' h ' + pad2(Math.floor((whole % 3600) / 60)) + ' min';
  }
  return sign + Math.floor(whole / 86400) + ' d ' + Math.floor((whole % 86400) / 3600) + ' h';
}

// Time since the run's start on chart axes: "0:45", "12:30", "1:05:00".
function fmtElapsed(s, step) {
  if (!isNum(s)) return DASH;
  const sign = s < 0 ? '−' : '';
  const a = Math.abs(s);
  if (step !== undefined && step < 1) return sign + a.toFixed(1) + ' s';
  const whole = Math.round(a);
  const h = Math.floor(whole / 3600);
  const m = Math.floor((whole % 3600) / 60);
  const sec = whole % 60;
  return sign + (h > 0 ? h + ':' + pad2(m) : String(m)) + ':' + pad2(sec);
}

function dateParts(d, utc) {
  return utc
    ? [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()]
    : [d.getFullYear(), d.getMonth() + 1, d.getDate(), d.getHours(), d.getMinutes(), d.getSeconds()];
}

// "2024-05-01 13:45:07", in UTC or the browser's zone.
function fmtDateTime(t, utc) {
  if (!isNum(t)) return DASH;
  const p = dateParts(new Date(t * 1000), utc);
  return p[0] + '-' + pad2(p[1]) + '-' + pad2(p[2]) + ' ' + pad2(p[3]) + ':' + pad2(p[4]) + ':' + pad2(p[5]);
}

// "13:45:07", in UTC or the browser's zone.
function fmtClock(t, utc) {
  if (!isNum(t)) return DASH;
  const p = dateParts(new Date(t * 1000), utc);
  return pad2(p[3]) + ':' + pad2(p[4]) + ':' + pad2(p[5]);
}

// The browser's offset from UTC at time t: "UTC+02:00".
function fmtZone(t) {
  if (!isNum(t)) return '';
  const east = -new Date(t * 1000).getTimezoneOffset();
  const a = Math.abs(east);
  return 'UTC' + (east < 0 ? '−' : '+') + pad2(Math.floor(a / 60)) + ':' + pad2(a % 60);
}

// An instant of the run: "+3:05 (13:45:07 UTC)".
function fmtInstant(t, start) {
  if (!isNum(t)) return DASH;
  const rel = isNum(start) ? '+' + fmtElapsed(t - start) + ' ' : '';
  return rel + '(' + fmtClock(t, true) + ' UTC)';
}

// A named number of a recommendation, by the convention of its name.
function fmtNamed(name, v) {
  if (!isNum(v)) return DASH;
  if (/(slowdown|factor)$/.test(name)) return fmtRatio(v);
  if (/per_s$/.test(name)) return /bytes/.test(name) ? fmtRate(v) : v.toFixed(2) + '/s';
  if (/bytes$/.test(name)) return fmtBytes(v);
  if (/(fraction|frac|ratio)$/.test(name)) return fmtPct(v * 100);
  if (/pct$/.test(name)) return fmtPct(v);
  if (/_ms$/.test(name)) return fmtMs(v);
  if (/_s$/.test(name)) return fmtDuration(v);
  return Number.isInteger(v) ? String(v) : v.toPrecision(4);
}

// The command as a shell would take it back.
function shellJoin(args) {
  if (!Array.isArray(args)) return '';
  return args
    .map((a) => {
      const s = String(a);
      return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'";
    })
    .join(' ');
}

const SIGNALS = { 1: 'SIGHUP', 2: 'SIGINT', 3: 'SIGQUIT', 4: 'SIGILL', 6: 'SIGABRT', 7: 'SIGBUS', 8: 'SIGFPE', 9: 'SIGKILL', 11: 'SIGSEGV', 13: 'SIGPIPE', 15: 'SIGTERM' };

function signalName(n) {
  return SIGNALS[n] ? n + ' (' + SIGNALS[n] + ')' : String(n);
}

function truncate(s, n) {
  const t = String(s);
  return t.length > n ? t.slice(0, n - 1) + '…' : t;
}
