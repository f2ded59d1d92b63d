// The settings page: every live setting with the value in effect and where
// it comes from (the configuration file, a live change for the cluster),
// and the jobs that have settings of their own. Changes are made with
// `gpumon config set` or `POST /api/v1/config` (admin).

import { el, placeholder } from "./dom.js";

/** Renders `/api/v1/config`'s answer. */
export function settingsPanel(body) {
  const head = el("tr", null, ["key", "value", "from", "takes", "what it does"].map((h) => el("th", { text: h })));
  const rows = body.settings.map((s) => el("tr", {
    class: "setting-row" + (s.source !== "config" ? " overridden" : ""),
    data: { key: s.key, value: s.value ?? "", source: s.source },
  },
  el("td", null, el("code", { text: s.key })),
  el("td", { class: "num", text: s.value ?? "[notify]" }),
  el("td", { text: s.source === "config" ? "configuration" : "live (" + s.source + ")" }),
  el("td", { class: "muted", text: s.takes + (s.scope === "cluster" ? ", cluster-wide only" : "") }),
  el("td", { class: "muted", text: s.about })));
  const jobs = Object.entries(body.job_overrides || {});
  const jobList = jobs.length
    ? el("ul", { class: "job-settings" }, jobs.map(([job, o]) => el("li", { data: { job } },
      el("b", { text: job + ": " }),
      Object.entries(o).map(([k, v]) => k + " = " + v).join(", "))))
    : placeholder("No job has settings of its own.");
  return [
    el("table", { class: "settings" }, el("thead", null, head), el("tbody", null, rows)),
    el("h3", { text: "Jobs with settings of their own" }),
    jobList,
  ];
}
