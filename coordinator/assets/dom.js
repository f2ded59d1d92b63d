// DOM building and formatting shared by every page.
//
// Every piece of text that reaches the page goes through `el` (textContent,
// setAttribute, dataset): job names, node names and alert messages come from
// users and agents, so no markup string is ever parsed into the page.

/** Builds an element. `props`: class, text, title, data {k: v}, style {k: v},
 *  on{event} handlers, anything else as an attribute; `children`: nodes,
 *  strings (as text) or nested arrays; null/undefined/false are skipped. */
export function el(tag, props, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") n.className = v;
    else if (k === "text") n.textContent = String(v);
    else if (k === "data") {
      for (const [dk, dv] of Object.entries(v)) {
        if (dv !== undefined && dv !== null) n.dataset[dk] = String(dv);
      }
    } else if (k === "style") Object.assign(n.style, v);
    else if (k.startsWith("on") && typeof v === "function") n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? "" : String(v));
  }
  append(n, children);
  return n;
}

function append(n, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(n, c);
    else if (c instanceof Node) n.appendChild(c);
    else n.appendChild(document.createTextNode(String(c)));
  }
}

/** A link to a job's page; the name is encoded, never interpreted. */
export function jobLink(job, text) {
  return el("a", { href: "#/jobs/" + encodeURIComponent(job), class: "job-link", text: text ?? job });
}

/** A small colored label: `kind` picks the color class. */
export function badge(text, kind) {
  return el("span", { class: "badge " + (kind || ""), text });
}

/** An empty-state line. */
export function placeholder(text) {
  return el("p", { class: "placeholder", text });
}

/** A section with a heading and optional note; returns [section, body]. */
export function section(title, note, extraClass) {
  const body = el("div", { class: "section-body" });
  const s = el("section", { class: "panel " + (extraClass || "") },
    el("h2", { text: title }), note ? el("p", { class: "note", text: note }) : null, body);
  return [s, body];
}

const GIB = 1024 ** 3;
const MIB = 1024 ** 2;
const KIB = 1024;

/** Bytes for people: binary units, one decimal from MiB up. */
export function fmtBytes(b) {
  if (b === undefined || b === null || !Number.isFinite(Number(b))) return "—";
  b = Number(b);
  const sign = b < 0 ? "-" : "";
  const a = Math.abs(b);
  if (a >= GIB) return sign + (a / GIB).toFixed(1) + " GiB";
  if (a >= MIB) return sign + (a / MIB).toFixed(1) + " MiB";
  if (a >= KIB) return sign + (a / KIB).toFixed(0) + " KiB";
  return sign + a.toFixed(0) + " B";
}

/** Signed bytes with an explicit "+". */
export function fmtSignedBytes(b) {
  if (b === undefined || b === null || !Number.isFinite(b)) return "—";
  return (b > 0 ? "+" : "") + fmtBytes(b);
}

/** A duration in seconds, coarse: "45 s", "12 m", "3 h 20 m", "2 d 4 h". */
export function fmtDur(s) {
  if (!Number.isFinite(s)) return "—";
  s = Math.max(0, s);
  if (s < 1) return "<1 s";
  if (s < 90) return Math.round(s) + " s";
  const m = Math.round(s / 60);
  if (m < 90) return m + " m";
  const h = Math.floor(s / 3600);
  if (h < 48) return h + " h " + Math.round((s - h * 3600) / 60) + " m";
  const d = Math.floor(s / 86400);
  return d + " d " + Math.round((s - d * 86400) / 3600) + " h";
}

function pad(n) {
  return String(n).padStart(2, "0");
}

/** Seconds since the epoch as a 24-hour HH:MM:SS in the browser's time zone, or in UTC (marked) after setClockUtc(true); with the date when not today. */
export function fmtClock(tSec) {
  if (!Number.isFinite(tSec)) return "—";
  const d = new Date(tSec * 1000);
  const utc = clockUtc;
  const part = (local, inUtc) => (utc ? inUtc.call(d) : local.call(d));
  const hms = pad(part(d.getHours, d.getUTCHours)) + ":" + pad(part(d.getMinutes, d.getUTCMinutes)) + ":" +
    pad(part(d.getSeconds, d.getUTCSeconds));
  const ymd = part(d.getFullYear, d.getUTCFullYear) + "-" + pad(part(d.getMonth, d.getUTCMonth) + 1) + "-" +
    pad(part(d.getDate, d.getUTCDate));
  const today = new Date();
  const todayYmd = utc ? today.toISOString().slice(0, 10)
    : today.getFullYear() + "-" + pad(today.getMonth() + 1) + "-" + pad(today.getDate());
  return (ymd === todayYmd ? hms : ymd + " " + hms) + (utc ? " UTC" : "");
}

/** Seconds since the epoch as a 24-hour HH:MM:SS alone (axis labels), local or UTC. */
export function fmtTime(tSec) {
  if (!Number.isFinite(tSec)) return "";
  const d = new Date(tSec * 1000);
  return clockUtc
    ? pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds())
    : pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
}

/** Whether clocks show UTC rather than the browser's time zone (kept across visits). */
let clockUtc = readUtc();

function readUtc() {
  try {
    return localStorage.getItem("gpumon.clock") === "utc";
  } catch (_) {
    return false;
  }
}

/** Shows clocks in UTC (`true`) or the browser's local time zone. */
export function setClockUtc(utc) {
  clockUtc = !!utc;
  try {
    localStorage.setItem("gpumon.clock", clockUtc ? "utc" : "local");
  } catch (_) { /* storage off: for this visit only */ }
}

export function clockIsUtc() {
  return clockUtc;
}

/** Milliseconds, one decimal below 10. */
export function fmtMs(ms) {
  if (ms === undefined || ms === null || !Number.isFinite(ms)) return "—";
  return (ms < 10 ? ms.toFixed(1) : Math.round(ms).toString()) + " ms";
}

/** A fraction as a whole percentage. */
export function fmtPct(frac) {
  if (!Number.isFinite(frac)) return "—";
  return Math.round(frac * 100) + " %";
}

/** The memory scale's hue: green up to half full, amber at 80 %, red from 95 %. */
export function memHue(frac) {
  const f = Math.min(1, Math.max(0, Number.isFinite(frac) ? frac : 0));
  if (f <= 0.5) return 130 - (f / 0.5) * 40;
  if (f <= 0.8) return 90 - ((f - 0.5) / 0.3) * 52;
  if (f <= 0.95) return 38 - ((f - 0.8) / 0.15) * 38;
  return 0;
}

/** Fill color for a memory fraction. */
export function memColor(frac) {
  return "hsl(" + memHue(frac).toFixed(0) + ", 72%, 58%)";
}

/** A stable, distinct color per rank (golden-angle hues). */
export function rankColor(rank) {
  return "hsl(" + ((rank * 137.508 + 210) % 360).toFixed(0) + ", 65%, 45%)";
}

/** A stable color per section name. */
export function nameColor(name, i) {
  return "hsl(" + ((i * 67 + 25) % 360) + ", 55%, 55%)";
}

/** A legend of the memory scale, drawn with the same function as the cells. */
export function memLegend() {
  const stops = [];
  for (let p = 0; p <= 100; p += 10) {
    stops.push(el("span", { class: "legend-stop", style: { background: memColor(p / 100) }, title: p + " %" }));
  }
  return el("div", { class: "legend mem-legend" },
    el("span", { class: "legend-label", text: "memory used: 0 %" }), stops,
    el("span", { class: "legend-label", text: "100 %" }));
}

/** The median of numbers (NaN for none). */
export function median(xs) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

const SEVERITY_ORDER = { critical: 3, high: 2, warning: 1 };
const RISK_ORDER = { critical: 4, high: 3, warning: 2, low: 1, none: 0 };

/** Sort key of an alert severity; higher is worse. */
export function severityRank(s) {
  return SEVERITY_ORDER[s] || 0;
}

/** Sort key of a risk level; higher is worse. */
export function riskRank(r) {
  return RISK_ORDER[r] || 0;
}
