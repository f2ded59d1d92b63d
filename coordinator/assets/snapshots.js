// The job page's snapshot comparison: pick two named allocator snapshots
// (gpumon.snapshot in the training script) and see what grew between them,
// per rank, as `gpumon snapshots diff A B` prints it. The comparison is the
// API's (`snapshots?a=&b=`); the page asks again only when the choice or
// the snapshots change.

import { el, fmtBytes, fmtClock, fmtSignedBytes, placeholder } from "./dom.js";

/** Rows shown, the largest growth first. */
const MAX_ROWS = 64;
/** The statistics compared, bytes. */
const COLUMNS = ["allocated", "reserved", "active", "inactive_split", "peak_allocated"];

export class SnapshotPanel {
  constructor(body, job) {
    this.body = body;
    this.job = job;
    this.a = null;
    this.b = null;
    this.key = "";
    this.comparison = null;
    this.error = null;
  }

  /** `list`: the API's snapshot list of the job (names with their ranks). */
  update(list) {
    const sets = (list && list.snapshots ? list.snapshots : []).slice().sort((x, y) => x.first_t - y.first_t);
    const names = sets.map((s) => s.name);
    if (names.length < 2) {
      this.body.replaceChildren(placeholder(names.length === 1
        ? "One named snapshot so far (" + names[0] + "); two are compared here."
        : "No named snapshots: gpumon.snapshot(NAME) in the training script takes them."));
      this.body.dataset.snapshots = String(names.length);
      return;
    }
    if (!names.includes(this.a)) this.a = names[0];
    if (!names.includes(this.b) || this.b === this.a) this.b = names[names.length - 1];
    const key = this.a + "\u0000" + this.b + "\u0000" + sets.map((s) => s.name + "@" + s.last_t).join(",");
    this.sets = sets;
    if (key !== this.key) {
      this.key = key;
      this.fetch(key);
    }
    this.render();
  }

  async fetch(key) {
    const path = "api/v1/jobs/" + encodeURIComponent(this.job) + "/snapshots?a=" +
      encodeURIComponent(this.a) + "&b=" + encodeURIComponent(this.b);
    try {
      const res = await fetch(path, { headers: { accept: "application/json" }, cache: "no-store" });
      const body = await res.json();
      if (key !== this.key) return;
      if (!res.ok) throw new Error(body && body.error ? body.error : "HTTP " + res.status);
      this.comparison = body;
      this.error = null;
    } catch (e) {
      if (key !== this.key) return;
      this.error = String(e.message || e);
    }
    this.render();
  }

  picker(which) {
    const select = el("select", { "aria-label": "snapshot " + which, class: "snap-pick", data: { which },
      onchange: (ev) => { this[which] = ev.target.value; this.update({ snapshots: this.sets }); } },
    ...this.sets.map((s) => el("option", { value: s.name, text: s.name + " (" + fmtClock(s.first_t) + ")" })));
    select.value = this[which];
    return select;
  }

  render() {
    const controls = el("p", { class: "snap-controls" }, "what grew from ", this.picker("a"), " to ", this.picker("b"));
    const c = this.comparison;
    this.body.dataset.snapshots = String(this.sets.length);
    if (this.error) {
      this.body.replaceChildren(controls, placeholder("Cannot compare: " + this.error));
      return;
    }
    if (!c || c.a !== this.a || c.b !== this.b) {
      this.body.replaceChildren(controls, placeholder("Comparing…"));
      return;
    }
    this.body.replaceChildren(controls, table(c));
  }
}

function table(c) {
  const rows = c.ranks.filter((r) => r.delta).sort((x, y) => y.delta.allocated - x.delta.allocated);
  const missing = c.ranks.length - rows.length;
  const totals = COLUMNS.map((k) => rows.reduce((sum, r) => sum + (r.delta[k] == null ? 0 : r.delta[k]), 0));
  const head = el("tr", null, el("th", { text: "rank" }), el("th", { text: "allocated in " + c.b }),
    ...COLUMNS.map((k) => el("th", { text: "Δ " + k.replace("_", " ") })));
  const body = rows.slice(0, MAX_ROWS).map((r) => el("tr", { class: "snap-row", data: { rank: r.rank } },
    el("td", { text: String(r.rank) }), el("td", { text: fmtBytes(r.b.allocated) }),
    ...COLUMNS.map((k) => el("td", { class: r.delta[k] > 0 ? "grew" : "", text: fmtSignedBytes(r.delta[k]) }))));
  const total = el("tr", { class: "snap-total" }, el("td", { text: "all" }), el("td", { text: "" }),
    ...totals.map((v) => el("td", { text: fmtSignedBytes(v) })));
  const parts = [el("table", { class: "alerts snapshots" }, el("thead", null, head), el("tbody", null, ...body, total))];
  if (rows.length > MAX_ROWS) parts.push(el("p", { class: "note", text: (rows.length - MAX_ROWS) + " more ranks; gpumon snapshots diff lists them all." }));
  if (missing > 0) parts.push(el("p", { class: "note", text: missing + " ranks took only one of the two." }));
  if (rows.length && rows[0].delta.allocated > 0) {
    parts.push(el("p", { class: "snap-most", text: "grew most: rank " + rows[0].rank + ", allocated " + fmtSignedBytes(rows[0].delta.allocated) }));
  }
  return el("div", null, ...parts);
}
