// paraplan plan explorer: the form <-> the query string (the CLI's option names), the search job
// and its progress stream, the ranked table, the scatter, the plan detail, diff, what-if, exports.
"use strict";
const $ = (s) => document.querySelector(s);
const $$ = (s) => Array.from(document.querySelectorAll(s));
const form = $("#problem");
const state = { job: null, source: null, doc: null, detail: null, plan: null };
const PAGE_KEYS = ["plan", "compare"];
const WEBGL_ABOVE = 2000;  // the scatter draws WebGL traces (scattergl) above this many points

// Plotly (4.8 MB) is loaded once the form is ready, so it never delays the first interaction
let loadPlotly;
const plotlyReady = new Promise((resolve) => {
  loadPlotly = () => {
    const tag = document.createElement("script");
    tag.src = "/static/plotly.min.js";
    tag.onload = () => resolve(window.Plotly);
    document.head.appendChild(tag);
  };
});
async function plot(id, data, layout) {
  const Plotly = await plotlyReady;
  const base = { margin: { t: 36, r: 10, b: 48, l: 60 }, height: 340 };
  await Plotly.react(id, data, Object.assign(base, layout), { displaylogo: false, responsive: true });
  return document.getElementById(id);
}

const fmt = (x, d = 3) => (x === null || x === undefined ? "" : Number(x).toPrecision(d));
const esc = (t) => String(t).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

// ---- the form and the query string ------------------------------------------------------------
function formParams() {
  const out = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    if (el.type === "checkbox") { if (el.checked) out[el.name] = "1"; }
    else if (el.value.trim() !== "") out[el.name] = el.value.trim();
  }
  if (out["model-text"]) delete out.model;
  if (out["system-text"]) delete out.system;
  if (out["cluster-text"]) {  // the cluster replaces system and gpus (paraplan search --cluster)
    for (const k of ["system", "system-text", "gpus", "max-global-batch"]) delete out[k];
    if (out.objective === "time") delete out.objective;
  }
  return out;
}
function fillForm(params) {
  for (const el of form.elements) {
    if (!el.name) continue;
    if (el.type === "checkbox") el.checked = params[el.name] === "1";
    else if (el.name in params) el.value = params[el.name];
    else if (el.tagName !== "SELECT" && ["global-batch", "max-global-batch"].includes(el.name)) el.value = "";
  }
}
function queryOf(params, extra = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (!k.endsWith("-text")) q.set(k, v);
  for (const [k, v] of Object.entries(extra)) if (v !== null && v !== undefined) q.set(k, v);
  return "?" + q.toString();
}
function pageParams() { return Object.fromEntries(new URLSearchParams(location.search)); }
function problemParams(all) {
  const p = Object.assign({}, all);
  for (const k of PAGE_KEYS) delete p[k];
  return p;
}

function showError(err) {
  clearErrors();
  const field = err.field && document.querySelector(`.err[data-for="${err.field}"]`) ? err.field : "_";
  const span = document.querySelector(`.err[data-for="${field}"]`);
  span.textContent = err.message;
  const input = form.elements[err.field];
  if (input && input.classList) input.classList.add("bad");
}
function clearErrors() {
  $$(".err").forEach((e) => (e.textContent = ""));
  $$(".bad").forEach((e) => e.classList.remove("bad"));
}

async function post(url, body) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const data = await r.json();
  if (!r.ok) throw data.error || { field: null, message: `HTTP ${r.status}` };
  return data;
}

// ---- the search job ---------------------------------------------------------------------------
async function runSearch(params, selected) {
  clearErrors();
  if (state.source) state.source.close();
  state.timing = { clicked: performance.now() };  // where a search's time goes (benchmarks/web_speed.py)
  const problem = problemParams(params);
  history.replaceState(null, "", queryOf(problem, selected));
  $("#search").disabled = true; $("#cancel").disabled = false;
  $("#progress").hidden = false; $("#progress").removeAttribute("value");
  $("#status").textContent = "searching…";
  let job;
  try { job = await post("/api/search", { params: problem }); }
  catch (err) { showError(err); return finish("bad input"); }
  state.job = job.id;
  const source = new EventSource(`/api/jobs/${job.id}/events`);
  state.source = source;
  source.onmessage = (ev) => {
    const received = performance.now(), j = JSON.parse(ev.data);
    const p = j.progress;
    if (p.total) { $("#progress").max = p.total; $("#progress").value = p.done; }
    $("#status").textContent = `${p.phase} ${p.total ? p.done + " / " + p.total : ""} (${j.elapsed_s.toFixed(1)} s)`;
    if (j.state === "running") return;
    source.close();
    if (j.state === "done") {
      Object.assign(state.timing, { received, parsed: performance.now(), bytes: ev.data.length, server_s: j.elapsed_s });
      showResults(j.result, problem, selected); finish(`done in ${j.elapsed_s.toFixed(2)} s`);
    }
    else if (j.state === "error") { showError(j.error); finish("error"); }
    else finish("cancelled");
  };
  source.onerror = () => {
    // closed (not reconnecting): the server no longer knows the job, it was restarted; the URL
    // holds the problem, so the search runs again (jobs are not journaled: web/jobs.py)
    if (source.readyState !== EventSource.CLOSED || state.source !== source) return;
    $("#status").textContent = "the server restarted: searching again…";
    runSearch(params, selected);
  };
}
function finish(text) {
  $("#search").disabled = false; $("#cancel").disabled = true;
  $("#progress").hidden = true; $("#status").textContent = text;
  document.body.dataset.state = text.startsWith("done") ? "done" : text;
}
$("#cancel").onclick = async () => {
  if (!state.job) return;
  await fetch(`/api/jobs/${state.job}`, { method: "DELETE" });
  if (state.source) state.source.close();
  finish("cancelled");
};
form.onsubmit = (ev) => { ev.preventDefault(); runSearch(formParams(), { plan: 1 }); };

// ---- the ranked table, the explanation and the scatter ----------------------------------------
function showCluster(doc) {
  for (const id of ["#ranked", "#band-note", "#plan-views", "#ttt", "#detail"]) $(id).hidden = true;
  $("#cluster-plans").hidden = false;
  $("#table-title").textContent = "Per-stage plans on the cluster of pools";
  $("#summary").textContent = `cluster search (${doc.mode}): ${doc.evaluated.toLocaleString()} candidates evaluated, ` +
    `${doc.solved.toLocaleString()} solved in ${doc.elapsed_s.toFixed(2)} s` + (doc.plans.length ? "" : "; no plan fits") + (doc.stopped ? `; stopped: ${doc.stopped}` : "");
  const tbody = $("#cluster-plans tbody"); tbody.innerHTML = "";
  doc.plans.forEach((p, i) => tbody.insertAdjacentHTML("beforeend", `<tr><td>${i + 1}</td><td>${fmt(p.step_time_s, 4)}</td><td class="plan">${esc(p.label)}</td></tr>`));
}
function showTimeToTrain(doc) {
  const info = doc.time_to_train;
  $("#ttt").hidden = !info;
  if (!info) return;
  $("#ttt-title").textContent = `ranked by ${info.ranked_by}` + (info.exact ? "" : " (over the fastest plans by failure-free time only)");
  const tbody = $("#ttt tbody"); tbody.innerHTML = "";
  info.goodput.forEach((g, i) => tbody.insertAdjacentHTML("beforeend", `<tr><td>${i + 1}</td><td>${g.expected_days.toFixed(2)}</td>` +
    `<td>${g.days_p10.toFixed(2)}–${g.days_p90.toFixed(2)}</td><td>${g.cost_usd === null ? "" : "$" + fmt(g.cost_usd, 4)}</td>` +
    `<td>${g.useful_days.toFixed(2)}</td><td>${(g.effective_training_time_ratio * 100).toFixed(1)} %</td></tr>`));
}
function showResults(doc, problem, selected) {
  state.doc = doc; state.problem = problem;
  $("#results").hidden = false;
  if (doc.kind === "cluster") { document.body.dataset.detail = "cluster"; return showCluster(doc); }
  for (const id of ["#ranked", "#band-note", "#plan-views"]) $(id).hidden = false;
  $("#cluster-plans").hidden = true;
  $("#table-title").textContent = "Ranked plans";
  showTimeToTrain(doc);
  const p = doc.problem;
  $("#summary").textContent = `${p.model} on ${p.gpus} × ${p.system}, seq ${p.seq_length}, ` +
    (p.global_batch ? `global batch ${p.global_batch}` : `max global batch ${p.max_global_batch}`) +
    `, objective ${p.objective}: ${doc.candidates.toLocaleString()} candidates, ` +
    `${doc.evaluated.toLocaleString()} evaluated, ${doc.feasible.toLocaleString()} fit` +
    (doc.plans.length ? "" : ". No plan fits.");
  const tbody = $("#ranked tbody"); tbody.innerHTML = "";
  for (const row of doc.plans) {
    const b = row.error_band, star = b.extrapolated.length ? "*" : "";
    const run = row.run ? `${fmt(row.run.days)} d` + (row.run.cost_usd ? `, $${fmt(row.run.cost_usd)}` : "") : "";
    const tr = document.createElement("tr");
    tr.dataset.rank = row.rank;
    tr.innerHTML = `<td>${row.rank}</td><td class="plan">${esc(row.plan_label)}</td><td>${fmt(row.step_time_s, 4)}</td>` +
      `<td title="${esc(b.extrapolated.join(", "))}">${fmt(b.low_s)}–${fmt(b.high_s)} (${b.low_pct.toFixed(0)}/+${b.high_pct.toFixed(0)} %)${star}</td>` +
      `<td>${Math.round(row.tokens_per_s).toLocaleString()}</td><td>${(row.mfu * 100).toFixed(1)} %</td>` +
      `<td>${row.peak_memory_gib.toFixed(1)}</td><td>${fmt(row.cost_usd_per_million_tokens)}</td><td>${run}</td>` +
      `<td><button type="button" class="open">open</button></td>`;
    tr.querySelector(".open").onclick = () => openPlan(row.plan, row.rank);
    tbody.appendChild(tr);
  }
  const unvalidated = [...new Set(doc.plans.flatMap((r) => r.error_band.extrapolated))];
  $("#band-note").textContent = "band: step-time error range from the validation residuals of each plan's features (paraplan validate)" +
    (unvalidated.length ? `; * extrapolated, no validation case has: ${unvalidated.join(", ")}` : "");
  const ex = $("#explain tbody"); ex.innerHTML = "";
  for (const a of doc.explain) {
    ex.insertAdjacentHTML("beforeend", `<tr><td>${esc(a.knob)}</td><td>${esc(a.change)}</td><td>${esc(a.verdict)}</td><td>${fmt(a.step_time_s, 4)}</td><td>${esc(a.reason)}</td></tr>`);
  }
  if (state.timing) state.timing.table = performance.now();
  $("#share").href = location.pathname + location.search;
  const rank = Number(selected.plan || 1);
  const chosen = doc.plans.find((r) => r.rank === rank) || doc.plans[0];
  if (chosen) openPlan(chosen.plan, chosen.rank, selected.compare ? Number(selected.compare) : null);
  // the scatter after the table is painted: thousands of points must not hold the table back
  requestAnimationFrame(() => setTimeout(() => {
    if (state.timing && !state.timing.painted) state.timing.painted = performance.now();  // the frame with the table
    if (state.doc === doc) drawScatter(doc);
  }, 0));
}

async function drawScatter(doc) {
  const pts = doc.scatter;
  const cells = "one point per cell of (tp×pp, 1 % of step time, 0.5 GiB): the plan with the best objective in it; hover for how many plans it stands for";
  $("#scatter-rule").textContent = doc.scatter_rule === "aggregated"
    ? `every feasible plan (${doc.scatter_plans.toLocaleString()}), ${cells}`
    : doc.scatter_rule === "evaluated"
      ? `the ${doc.scatter_plans.toLocaleString()} feasible plans the exact search evaluated (tick "every feasible plan" for the whole space), ${cells}; click a point to open its plan`
      : `the ${pts.length} ranked plans (the robust objective ranks by the ranked plans' error bands); click a point to open its plan`;
  // cost per step = step time × GPUs × USD per GPU-hour / 3600 (report.search_view.cost_usd_per_step)
  const price = doc.problem.price_per_gpu_hour, byCost = $("#scatter-y").value === "cost" && price;
  const scale = byCost ? (doc.problem.gpus * price) / 3600 : 1;
  const groups = {};
  pts.forEach((p, i) => { (groups[p.tp_pp] = groups[p.tp_pp] || []).push(i); });
  const traces = Object.entries(groups).map(([name, idx]) => ({
    type: pts.length > WEBGL_ABOVE ? "scattergl" : "scatter", mode: "markers", name,
    x: idx.map((i) => pts[i].peak_memory_gib), y: idx.map((i) => pts[i].step_time_s * scale),
    customdata: idx, text: idx.map((i) => `${pts[i].plans} plan(s)` + (pts[i].rank ? `, rank ${pts[i].rank}` : "")),
    hovertemplate: (byCost ? "$%{y:.4g}" : "%{y:.4g} s") + ", %{x:.1f} GiB, %{text}<extra>%{fullData.name}</extra>",
  }));
  const el = await plot("pareto", traces, { xaxis: { title: "peak memory per GPU (GiB)" }, yaxis: { title: byCost ? `USD per step at $${price}/GPU-hour` : "step time (s)" } });
  if (state.timing && !state.timing.scatter) state.timing.scatter = performance.now();
  el.removeAllListeners && el.removeAllListeners("plotly_click");
  el.on("plotly_click", (ev) => {
    const p = pts[ev.points[0].customdata];
    openPlan(Object.assign({}, doc.scatter_base, p.plan), p.rank || null);
  });
}

// ---- one plan: detail, diff, what-if, export --------------------------------------------------
async function estimate(plan) { return post("/api/estimate", { params: state.problem, plan }); }

async function openPlan(plan, rank, compare = null) {
  clearErrors();
  state.plan = plan; state.rank = rank;
  if (rank) history.replaceState(null, "", queryOf(state.problem, { plan: rank, compare }));
  let d;
  try { d = await estimate(plan); } catch (err) { showError(Object.assign({}, err, { field: "export" })); return; }
  state.detail = d;
  $("#detail").hidden = false;
  $("#detail-title").textContent = (rank ? `Plan #${rank}: ` : "Plan: ") + d.plan_label;
  $("#export-text").hidden = true;
  drawDetail(d);
  const knobs = ["tp", "pp", "cp", "micro_batch", "recompute", "zero", "schedule", "vpp", "sequence_parallel", "offload_optimizer"];
  $("#whatif-knob").innerHTML = knobs.map((k) => `<option>${k}</option>`).join("");
  $("#diff").hidden = true;
  if (compare) diffWith(compare);
  document.body.dataset.detail = d.plan_label;
}

function drawDetail(d) {
  const b = d.breakdown, names = Object.keys(b).filter((k) => b[k] > 0);
  plot("waterfall", [{ type: "waterfall", orientation: "v", x: names.map((n) => n.replace(/_s$/, "")).concat(["step"]),
    y: names.map((n) => b[n]).concat([0]), measure: names.map(() => "relative").concat(["total"]) }],
    { title: { text: `step time ${fmt(d.step_time_s, 4)} s` }, yaxis: { title: "s" } });
  const st = d.memory.per_stage, parts = ["weights", "gradients", "optimizer", "activations", "buffers", "reserved"];
  const traces = parts.filter((p) => st.some((s) => s[`${p}_gib`] !== undefined)).map((p) => ({
    type: "bar", name: p, x: st.map((s) => `stage ${s.stage}`), y: st.map((s) => s[`${p}_gib`]) }));
  traces.push({ type: "scatter", mode: "lines+markers", name: "HBM", x: st.map((s) => `stage ${s.stage}`), y: st.map((s) => s.capacity_gib), line: { color: "red", dash: "dash" } });
  plot("memory", traces, { barmode: "stack", title: { text: `memory per stage (peak ${d.memory.peak_gib.toFixed(1)} GiB)` }, yaxis: { title: "GiB" } });
  const t = d.timeline;
  const colours = { F: "#4C72B0", B: "#DD8452", W: "#55A868" }, kindNames = { F: "forward", B: "backward", W: "weight gradient" };
  const bars = ["F", "B", "W"].filter((k) => t.bars.some((x) => x.kind === k)).map((k) => {
    const sel = t.bars.filter((x) => x.kind === k);
    return { type: "bar", orientation: "h", name: k === "B" && t.bars.some((x) => x.kind === "W") ? "input gradient" : kindNames[k], base: sel.map((x) => x.start),
      x: sel.map((x) => x.end - x.start), y: sel.map((x) => `stage ${x.stage}`), marker: { color: colours[k] },
      hovertext: sel.map((x) => `mb ${x.mb}` + (t.directions > 1 ? ` direction ${x.chunk}` : t.vpp > 1 ? ` chunk ${x.chunk}` : "")), hoverinfo: "text+x",
      text: t.bars.length <= 160 ? sel.map((x) => `${x.mb}`) : undefined };
  });
  plot("timeline", bars, { barmode: "overlay", title: { text: `${t.schedule} schedule, pp ${t.pp}, v ${t.vpp}, ${t.microbatches_drawn} of ${t.microbatches} micro-batches` },
    xaxis: { title: "s" }, yaxis: { autorange: "reversed" }, height: 160 + 36 * t.pp, showlegend: true });
  const span = t.note ? `(${t.note})` : t.makespan_s === null ? "not placed (too many passes)" : `${fmt(t.makespan_s, 5)} s`;
  $("#timeline-note").textContent = `each stage's passes in the ${t.schedule} order, timed by the stage's own F, B, W: drawn makespan of all ${t.microbatches} micro-batches ${span}; ` +
    `the estimator's pipeline time (m × slowest stage + bubble) ${fmt(t.pipeline_s, 5)} s, bubble ${fmt(t.bubble_s)} s` +
    (t.approximate && t.makespan_s !== null ? " (the two differ: the estimator's bubble is its schedule's formula, docs/web.md)" : "");
  const tb = $("#collectives tbody"); tb.innerHTML = "";
  for (const c of d.communication || []) {
    tb.insertAdjacentHTML("beforeend", `<tr><td>${esc(c.block)}</td><td>${esc(c.name)}</td><td>${esc(c.group)}</td><td>${esc(c.kind)}</td>` +
      `<td>${(c.bytes / 1e6).toFixed(2)}</td><td>${c.calls_fwd}/${c.calls_bwd}</td><td>${(c.time_per_call_s * 1e3).toFixed(3)}</td><td>${c.group_size}</td><td>${c.domains_spanned}</td></tr>`);
  }
}

function diffTable(a, b, labelA, labelB) {
  $("#diff").hidden = false;
  $("#diff-a").textContent = labelA; $("#diff-b").textContent = labelB;
  const rows = [["step time s", a.step_time_s, b.step_time_s], ["MFU", a.mfu, b.mfu], ["peak GiB", a.memory.peak_gib, b.memory.peak_gib],
    ...Object.keys(a.breakdown).map((k) => [k, a.breakdown[k], b.breakdown[k]])];
  const tb = $("#diff tbody"); tb.innerHTML = "";
  for (const [k, x, y] of rows) {
    const change = x ? `${(((y - x) / x) * 100).toFixed(1)} %` : (y ? "new" : "");
    tb.insertAdjacentHTML("beforeend", `<tr><td>${k}</td><td>${fmt(x, 4)}</td><td>${fmt(y, 4)}</td><td>${change}</td></tr>`);
  }
  const fits = b.memory.fits ? "" : " (does not fit)";
  $("#diff-b").textContent = labelB + fits;
}
async function diffWith(rank) {
  const other = state.doc.plans.find((r) => r.rank === Number(rank));
  if (!other) return showError({ field: "whatif", message: `compare: rank ${rank} is not in the table` });
  history.replaceState(null, "", queryOf(state.problem, { plan: state.rank, compare: rank }));
  const d = await estimate(other.plan);
  diffTable(state.detail, d, `#${state.rank || "?"} ${state.detail.plan_label}`, `#${rank} ${d.plan_label}`);
}
$("#compare-go").onclick = () => diffWith($("#compare").value);
$("#whatif-go").onclick = async () => {
  const knob = $("#whatif-knob").value, raw = $("#whatif-value").value.trim();
  let value = raw;
  if (/^-?\d+$/.test(raw)) value = Number(raw);
  else if (raw === "true" || raw === "false") value = raw === "true";
  const plan = Object.assign({}, state.detail.plan, { [knob]: value });
  if (["tp", "pp", "cp"].includes(knob)) delete plan.dp;
  try {
    const d = await estimate(plan);
    clearErrors();
    diffTable(state.detail, d, `original ${state.detail.plan_label}`, `what if ${knob} = ${raw}`);
  } catch (err) { showError(Object.assign({}, err, { field: "whatif" })); }
};
function download(name, text, type) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], { type }));
  a.download = name; document.body.appendChild(a); a.click(); a.remove();
}
$$("[data-export]").forEach((btn) => (btn.onclick = async () => {
  try {
    const r = await post("/api/export", { params: state.problem, plan: state.plan, to: btn.dataset.export });
    clearErrors();
    $("#export-text").hidden = false; $("#export-text").textContent = r.text;
    download(r.filename, r.text, "text/plain");
  } catch (err) { showError(Object.assign({}, err, { field: "export" })); }
}));
$("#scatter-y").onchange = () => state.doc && drawScatter(state.doc);
$("#download-json").onclick = () => download("search.json", JSON.stringify(state.doc, null, 2), "application/json");
$("#plan-json").onclick = () => download("plan.json", JSON.stringify(state.detail, null, 2), "application/json");

// ---- sweeps: strong scaling over the form's problem, or a sweep file; progress, heatmap ------
const SWEEP_AXES = (cfg) => [["system", cfg.systems], ["gpus", cfg.gpus], ...cfg.sets.map((a) => [a.path, a.values])];
async function runSweep(body, field) {
  clearErrors();
  let job;
  try { job = await post("/api/sweep", body); } catch (err) { return showError(err); }
  state.sweepJob = job.id;
  $("#sweep-progress").hidden = false; $("#sweep-progress").removeAttribute("value"); $("#sweep-cancel").disabled = false;
  document.body.dataset.sweep = "running";
  const source = new EventSource(`/api/jobs/${job.id}/events`);
  state.sweepSource = source;
  source.onmessage = (ev) => {
    const j = JSON.parse(ev.data), p = j.progress;
    if (p.total) { $("#sweep-progress").max = p.total; $("#sweep-progress").value = p.done; }
    $("#sweep-status").textContent = `${p.phase} ${p.total ? p.done + " / " + p.total : ""} (${j.elapsed_s.toFixed(1)} s)`;
    if (j.state === "running") return;
    source.close(); $("#sweep-progress").hidden = true; $("#sweep-cancel").disabled = true;
    document.body.dataset.sweep = j.state;
    if (j.state !== "done") { $("#sweep-status").textContent = j.state; return j.error && showError(Object.assign({}, j.error, { field })); }
    $("#sweep-status").textContent = `done in ${j.elapsed_s.toFixed(1)} s`;
    state.sweep = j.result; drawSweep();
  };
}
function drawSweep() {
  const doc = state.sweep; if (!doc) return;
  const metric = $("#sweep-metric").value, label = $("#sweep-metric").selectedOptions[0].text;
  const axes = SWEEP_AXES(doc.sweep), varying = axes.filter(([, v]) => v.length > 1);
  const value = (p) => (p.feasible ? p[metric] : null);
  const key = (name, v) => String(v);
  const fixed = axes.filter((a) => !varying.slice(0, 2).includes(a)).map(([n, v]) => [n, v[0]]);
  const pts = doc.points.filter((p) => fixed.every(([n, v]) => String(p[n]) === String(v) || n === "system" && p.system === v));
  $("#sweep-summary").textContent = `${doc.points.length} points of ${doc.sweep.model} (${doc.points.filter((p) => p.feasible).length} with a plan that fits); ` +
    (varying.length > 2 ? `heatmap of ${varying[0][0]} × ${varying[1][0]} at ${fixed.map(([n, v]) => `${n} ${v}`).join(", ")}` : varying.length === 2 ? `heatmap of ${varying[0][0]} × ${varying[1][0]}` : "");
  if (varying.length >= 2) {
    const [[xn, xs], [yn, ys]] = varying;
    const z = ys.map((y) => xs.map((x) => { const p = pts.find((q) => key(xn, q[xn]) === key(xn, x) && key(yn, q[yn]) === key(yn, y)); return p ? value(p) : null; }));
    const text = ys.map((y) => xs.map((x) => { const p = pts.find((q) => key(xn, q[xn]) === key(xn, x) && key(yn, q[yn]) === key(yn, y)); return p ? (p.plan_label || p.reason || "") : ""; }));
    plot("sweep-chart", [{ type: "heatmap", x: xs.map(String), y: ys.map(String), z, text, hovertemplate: `${xn} %{x}, ${yn} %{y}: %{z:.4g} ${label}<br>%{text}<extra></extra>`, colorbar: { title: label } }],
      { xaxis: { title: xn, type: "category" }, yaxis: { title: yn, type: "category" }, title: { text: `best plan's ${label}` } });
  } else {
    const [xn, xs] = varying[0] || ["gpus", doc.sweep.gpus];
    const ok = pts.filter((p) => p.feasible);
    plot("sweep-chart", [{ type: "scatter", mode: "lines+markers", x: ok.map((p) => p[xn]), y: ok.map((p) => p[metric]), text: ok.map((p) => p.plan_label), name: label }],
      { xaxis: { title: xn, type: xn === "gpus" ? "log" : "-" }, yaxis: { title: `${label} of the best plan` } });
  }
  document.body.dataset.sweepDrawn = String(doc.points.length);
}
$("#sweep-go").onclick = () => runSweep({ params: problemParams(formParams()), "gpus-list": $("#sweep-gpus").value }, "gpus-list");
$("#sweep-file-go").onclick = () => runSweep({ "sweep-text": $("#sweep-text").value }, "sweep-text");
$("#sweep-upload").onchange = async () => { const f = $("#sweep-upload").files[0]; if (f) $("#sweep-text").value = await f.text(); };
$("#sweep-metric").onchange = drawSweep;
$("#sweep-cancel").onclick = async () => {
  if (!state.sweepJob) return;
  await fetch(`/api/jobs/${state.sweepJob}`, { method: "DELETE" });
};

// ---- start ------------------------------------------------------------------------------------
for (const input of $$("input[type=file]")) {
  input.onchange = async () => { if (input.files[0]) form.elements[input.dataset.into].value = await input.files[0].text(); };
}
async function start() {
  const names = await (await fetch("/api/catalog")).json();
  const opts = (list) => list.map((n) => `<option>${esc(n)}</option>`).join("");
  $("#f-model").innerHTML = opts(names.models);
  $("#f-system").innerHTML = opts(names.systems);
  $("#f-framework").insertAdjacentHTML("beforeend", opts(names.frameworks));
  $("#f-objective").innerHTML = opts(names.choices.objective);
  $("#f-dtype").innerHTML = opts(names.choices.dtype);
  $("#f-dtype").value = "bf16";  // the CLI's defaults
  $("#f-objective").value = "time";
  const given = pageParams();
  $("#ready").textContent = "ready";
  document.body.dataset.ready = String(Math.round(performance.now()));
  loadPlotly();
  if (given.model || given.system) {
    fillForm(problemParams(given));
    runSearch(problemParams(given), { plan: given.plan || 1, compare: given.compare || null });
  } else {
    $("#f-model").value = "gpt3-13b"; $("#f-system").value = "dgx-a100-80gb";
  }
}
start();
