// gpumon sweep page: draws the embedded results (the sweep's JSON) as a
// heatmap of peak GPU memory over the first two parameters (a bar chart
// with one parameter; a selector for each further one) and a table of every
// point. Text only ever goes in through textContent; the page fetches
// nothing. What it drew is summed up in data- attributes (data-ready,
// data-cells, data-oom-cells, data-error) for tests and scripts.
"use strict";
(function () {
  const root = document.getElementById("sweep");
  const fail = (msg) => {
    root.dataset.error = msg;
    const p = el("p", { class: "error" }, "This page could not be drawn: " + msg);
    root.prepend(p);
  };
  window.addEventListener("error", (e) => fail(String(e.message)));

  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) e.setAttribute(k, String(v));
    }
    for (const c of [].concat(children === undefined ? [] : children)) {
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  const GIB = 1024 * 1024 * 1024;
  const MIB = 1024 * 1024;
  const bytes = (b) =>
    b === null || b === undefined ? "" : b >= GIB ? (b / GIB).toFixed(1) + " GiB" : (b / MIB).toFixed(0) + " MiB";
  const num = (v, digits) => (v === null || v === undefined ? "" : Number(v).toFixed(digits));
  const STATUS_TEXT = { ok: "ok", oom: "OOM", timeout: "timeout", failed: "failed", skipped: "skipped", missing: "not run" };

  // Light green (empty) through yellow to red (full), by share of capacity.
  function shareColor(pct) {
    const s = Math.max(0, Math.min(1, pct / 100));
    const hue = 130 * (1 - s);
    const light = 86 - 38 * s;
    return { bg: "hsl(" + hue.toFixed(0) + ", 75%, " + light.toFixed(0) + "%)", ink: light < 58 ? "#fff" : "#0f172a" };
  }

  let data;
  try {
    data = JSON.parse(document.getElementById("sweep-data").textContent);
  } catch (e) {
    fail("the embedded results are not JSON: " + e.message);
    return;
  }
  if (data.gpumon_sweep !== 1) {
    fail("results of format " + data.gpumon_sweep + "; this page reads format 1");
    return;
  }
  const params = data.params;
  const keyOf = (values) => values.join("\u0000");
  const byKey = new Map();
  for (const p of data.points) byKey.set(keyOf(params.map((q) => p.params[q.name])), { status: p.status, p });
  for (const s of data.skipped) byKey.set(keyOf(params.map((q) => s.params[q.name])), { status: "skipped", p: null, point: s.point });
  const at = (values) => byKey.get(keyOf(values)) || { status: "missing", p: null };

  // Header.
  // The command as a shell line, its --env variables first.
  const quote = (a) => (/^[A-Za-z0-9_@%+=:,./{}-]+$/.test(a) ? a : "'" + a.replace(/'/g, "'\\''") + "'");
  document.getElementById("command").textContent = data.env.concat(data.command).map(quote).join(" ");
  const counts = {};
  for (const v of byKey.values()) counts[v.status] = (counts[v.status] || 0) + 1;
  const countText = Object.keys(counts)
    .sort()
    .map((s) => counts[s] + " " + STATUS_TEXT[s]);
  document.getElementById("counts").textContent =
    data.points.length + " of " + data.grid_points + " points run: " + countText.join(", ");
  if (data.interrupted) {
    root.insertBefore(el("p", { class: "banner" }, "The sweep was stopped before its end."), root.children[1]);
  }

  // What a cell or bar shows.
  function mark(node, cell) {
    const p = cell.p;
    const pct = p && p.peak_gpu_used_pct !== null ? p.peak_gpu_used_pct : null;
    node.dataset.status = cell.status;
    if (pct !== null) node.dataset.share = pct.toFixed(2);
    if (cell.status === "ok" && pct !== null) {
      const c = shareColor(pct);
      node.style.background = c.bg;
      node.style.color = c.ink;
    } else {
      node.classList.add("st-" + (cell.status === "ok" ? "nodata" : cell.status));
    }
    const lines = [];
    if (p && p.peak_gpu_used_bytes !== null) lines.push("peak " + bytes(p.peak_gpu_used_bytes) + (pct !== null ? " (" + pct.toFixed(0) + " %)" : ""));
    if (p && p.step_ms_p50 !== null) lines.push("step " + num(p.step_ms_p50, 0) + " ms");
    if (p && p.reason) lines.push(p.reason);
    node.setAttribute("title", [STATUS_TEXT[cell.status]].concat(lines).join("\n"));
    return { pct, p };
  }

  function cellText(cell, shown) {
    const { pct, p } = shown;
    const big = cell.status === "ok" ? (pct !== null ? pct.toFixed(0) + " %" : "ok") : STATUS_TEXT[cell.status];
    const small = [];
    if (p && p.peak_gpu_used_bytes !== null) {
      const share = cell.status !== "ok" && pct !== null ? " (" + pct.toFixed(0) + " %)" : "";
      small.push(el("span", { class: "small" }, bytes(p.peak_gpu_used_bytes) + share));
    }
    if (p && p.step_ms_p50 !== null && cell.status === "ok") small.push(el("span", { class: "small" }, num(p.step_ms_p50, 0) + " ms/step"));
    return [el("span", { class: "big" }, big)].concat(small);
  }

  const chart = document.getElementById("chart");
  const selectors = document.getElementById("selectors");
  const chosen = params.map(() => 0);

  function drawBars() {
    const q = params[0];
    const cols = q.values.map((v) => {
      const cell = at([v]);
      const bar = el("div", { class: "bar" });
      const shown = mark(bar, cell);
      const height = shown.pct !== null ? Math.max(2, Math.min(100, shown.pct)) : cell.status === "oom" ? 100 : 0;
      bar.style.height = height + "%";
      const col = el("div", { class: "bar-col cell", "data-x": v }, [
        el("div", { class: "bar-top" }, cellText(cell, shown)),
        el("div", { class: "bar-box" }, bar),
        el("div", { class: "bar-label" }, v),
      ]);
      col.dataset.status = cell.status;
      return col;
    });
    chart.replaceChildren(el("div", { class: "bars" }, cols), el("div", { class: "bars-axis" }, q.name));
    return cols.map((c) => c.dataset.status);
  }

  function drawHeatmap() {
    const [qx, qy] = params;
    const fixed = chosen.slice(2).map((i, k) => params[k + 2].values[i]);
    const head = el("tr", {}, [el("th", { class: "axis" }, qy.name + " \u2193 / " + qx.name + " \u2192")].concat(qx.values.map((v) => el("th", {}, v))));
    const statuses = [];
    const rows = qy.values.map((y) => {
      const tds = qx.values.map((x) => {
        const cell = at([x, y].concat(fixed));
        const td = el("td", { class: "cell", "data-x": x, "data-y": y });
        td.append(...cellText(cell, mark(td, cell)));
        statuses.push(cell.status);
        return td;
      });
      return el("tr", {}, [el("th", {}, y)].concat(tds));
    });
    chart.replaceChildren(el("table", { class: "heatmap" }, [head].concat(rows)));
    return statuses;
  }

  function draw() {
    const statuses = params.length === 1 ? drawBars() : drawHeatmap();
    chart.dataset.kind = params.length === 1 ? "bars" : "heatmap";
    chart.dataset.cells = String(statuses.length);
    chart.dataset.oomCells = String(statuses.filter((s) => s === "oom").length);
  }

  // Selectors for the parameters past the first two.
  params.slice(2).forEach((q, k) => {
    const select = el("select", { "data-param": q.name }, q.values.map((v, i) => el("option", { value: String(i) }, v)));
    select.addEventListener("change", () => {
      chosen[k + 2] = Number(select.value);
      draw();
    });
    selectors.append(el("label", {}, [q.name, select]));
  });
  document.getElementById("chart-note").textContent =
    params.length === 1
      ? "Peak GPU memory of each point, as a share of the fullest GPU's capacity, by " + params[0].name + "."
      : "Peak GPU memory as a share of the fullest GPU's capacity, by " + params[0].name + " and " + params[1].name +
        (params.length > 2 ? ", at the values chosen below for the others." : ".");
  draw();

  // Legend.
  const scale = el("span", { class: "scale" });
  scale.style.background = "linear-gradient(90deg, " + [0, 25, 50, 75, 100].map((p) => shareColor(p).bg).join(", ") + ")";
  const swatch = (status) => el("span", {}, [el("span", { class: "swatch st-" + status }), STATUS_TEXT[status]]);
  document.getElementById("legend").append(
    el("span", {}, "0 %"), scale, el("span", {}, "100 % of capacity"),
    swatch("oom"), swatch("timeout"), swatch("failed"), swatch("skipped"));

  // The table of every point, run or skipped, in grid order.
  const cols = ["#"].concat(params.map((q) => q.name), ["status", "peak GPU", "share", "allocated", "reserved", "step p50", "step p90", "steps", "alerts", "wall", "reason"]);
  const table = document.getElementById("points");
  table.append(el("thead", {}, el("tr", {}, cols.map((c) => el("th", {}, c)))));
  const entries = data.points.map((p) => ({ n: p.point, status: p.status, values: p.params, p }))
    .concat(data.skipped.map((s) => ({ n: s.point, status: "skipped", values: s.params, p: null })))
    .sort((a, b) => a.n - b.n);
  const body = el("tbody");
  for (const e of entries) {
    const p = e.p || {};
    const alerts = Object.entries(p.alerts || {}).map(([k, n]) => k + " " + n).join(", ");
    const cells = [el("td", { class: "num" }, e.n)]
      .concat(params.map((q) => el("td", {}, e.values[q.name])))
      .concat([
        el("td", {}, el("span", { class: "status " + (e.status === "ok" ? "ok" : "st-" + e.status) }, STATUS_TEXT[e.status])),
        el("td", { class: "num" }, bytes(p.peak_gpu_used_bytes)),
        el("td", { class: "num" }, p.peak_gpu_used_pct !== null && p.peak_gpu_used_pct !== undefined ? num(p.peak_gpu_used_pct, 1) + " %" : ""),
        el("td", { class: "num" }, bytes(p.peak_allocated_bytes)),
        el("td", { class: "num" }, bytes(p.peak_reserved_bytes)),
        el("td", { class: "num" }, p.step_ms_p50 !== null && p.step_ms_p50 !== undefined ? num(p.step_ms_p50, 1) + " ms" : ""),
        el("td", { class: "num" }, p.step_ms_p90 !== null && p.step_ms_p90 !== undefined ? num(p.step_ms_p90, 1) + " ms" : ""),
        el("td", { class: "num" }, e.p ? p.steps : ""),
        el("td", {}, alerts),
        el("td", { class: "num" }, e.p ? num(p.wall_s, 1) + " s" : ""),
        el("td", { class: "reason" }, p.reason || ""),
      ]);
    body.append(el("tr", { "data-point": e.n, "data-status": e.status }, cells));
  }
  table.append(body);
  table.dataset.rows = String(entries.length);
  root.dataset.ready = "true";
})();
