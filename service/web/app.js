// collplan crossover map: plain JavaScript over the service's JSON API (docs/service.md).
// The map: POST /v1/map, one row of bands per node count. A point's menu: POST /v1/explain.
// The time view: a batch of /v1/explain over sizes at one node count. Overlays: POST
// /v1/overlay/sweep (measured points) and /v1/overlay/tuning (NCCL's logged decisions). Diff:
// a second /v1/map, compared band by band in the page.
"use strict";

const $ = (id) => document.getElementById(id);
const SVGNS = "http://www.w3.org/2000/svg";
const MINLOG = 3, MAXLOG = 34; // 8 B .. 16 GiB
const W = 840, H = 560, ML = 62, MR = 14, MT = 16, MB = 44;
const PW = W - ML - MR, PH = H - MT - MB;

const state = {
  tables: null, map: null, map2: null, view: "map", nodes: 0,
  measured: [], logged: [], pinned: false, probe: null, seq: 0, menuSeq: 0, timeData: null,
};

// ---- formatting --------------------------------------------------------------------------

function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, v = b;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (Number.isInteger(v) ? v : v.toFixed(v < 10 ? 2 : 1)) + " " + u[i];
}
function fmtTick(b) { // 8, 64, 512, 4K ...
  const u = ["", "K", "M", "G", "T"];
  let i = 0, v = b;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return v + u[i];
}
function fmtShort(b) { // 1.37M: a crossover's label
  const u = ["", "K", "M", "G", "T"];
  let i = 0, v = b;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (Number.isInteger(v) ? String(v) : v.toPrecision(3)) + u[i];
}
const plural = (n, one) => `${n} ${one}${n === 1 ? "" : "s"}`;
// fmtNum is v with two decimals as planner explain prints it (Go's %.2f: the exact value of the
// double rounded half to even; toFixed rounds an exact tie such as 43.125 up). "-" for the menu's
// -1 (not legal).
function fmtNum(v) {
  if (v < 0) return "-";
  const [ip, fp] = v.toFixed(100).split("."); // the double's exact decimal digits (|v| >= 2^-100)
  const head = BigInt(ip + fp.slice(0, 2)), rest = fp.slice(2);
  const up = rest[0] > "5" || (rest[0] === "5" && (/[1-9]/.test(rest.slice(1)) || head % 2n === 1n));
  const d = (head + (up ? 1n : 0n)).toString().padStart(3, "0");
  return d.slice(0, -2) + "." + d.slice(-2);
}
function fmtTime(us) {
  if (us >= 1e6) return (us / 1e6).toPrecision(3) + " s";
  if (us >= 1e3) return (us / 1e3).toPrecision(3) + " ms";
  return us.toPrecision(3) + " us";
}

// ---- colours -----------------------------------------------------------------------------

const HUE = { TREE: 130, RING: 212, COLLNET_DIRECT: 28, COLLNET_CHAIN: 48, NVLS: 275, NVLS_TREE: 325, PAT: 0 };
const LIGHT = { LL: 76, LL128: 58, SIMPLE: 38 };
function colour(algo, proto) {
  const h = HUE[algo] ?? 180, l = LIGHT[proto] ?? 50;
  return `hsl(${h}, 62%, ${l}%)`;
}

// ---- API ---------------------------------------------------------------------------------

async function api(method, path, body) {
  const opt = { method, headers: {} };
  if (body !== undefined) {
    opt.headers["Content-Type"] = "application/json";
    opt.body = JSON.stringify(body);
  }
  const r = await fetch(path, opt);
  const text = await r.text();
  let v;
  try { v = JSON.parse(text); } catch (e) { throw new Error(`${path}: HTTP ${r.status}, not JSON`); }
  if (!r.ok) {
    throw new Error(`${path}: ${v.error}` + (v.field ? ` (field ${v.field})` : ""));
  }
  return v;
}

function setStatus(msg, isError) {
  const s = $("status");
  s.textContent = msg;
  s.className = isError ? "error" : "";
}

// The class of the map: the form's table, collective, dtype, op, tuner and overlay choice.
function baseQuery(second) {
  const q = {
    node: second ? $("table2").value : $("table").value,
    coll: $("coll").value, dtype: $("dtype").value, op: $("op").value,
  };
  const tuner = second ? $("tuner2").value : $("tuner").value;
  if (tuner) q.tuner = tuner;
  if (second ? $("nooverlay2").checked : $("nooverlay").checked) q.no_overlay = true;
  return q;
}

// ---- geometry ----------------------------------------------------------------------------

const xOf = (b) => ML + (Math.log2(Math.max(b, 1)) - MINLOG) / (MAXLOG - MINLOG) * PW;
const bytesAt = (x) => Math.round(2 ** (MINLOG + (x - ML) / PW * (MAXLOG - MINLOG)));

function el(name, attrs, parent) {
  const e = document.createElementNS(SVGNS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function title(e, text) { el("title", {}, e).textContent = text; return e; }

function svgDefs(svg) {
  const defs = el("defs", {}, svg);
  const p = el("pattern", { id: "hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" }, defs);
  el("rect", { width: 6, height: 6, fill: "rgba(255,255,255,0.25)" }, p);
  el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#d00", "stroke-width": 2 }, p);
}

function sizeAxis(svg) {
  const g = el("g", { class: "axis" }, svg);
  for (let k = MINLOG; k <= MAXLOG; k++) {
    const x = xOf(2 ** k);
    el("line", { x1: x, x2: x, y1: MT, y2: MT + PH, class: "gridline" }, g);
    if ((k - MINLOG) % 3 === 0 || k === MAXLOG) {
      el("text", { x, y: MT + PH + 14, "text-anchor": "middle", class: "tick" }, g).textContent = fmtTick(2 ** k);
    }
  }
  el("text", { x: ML + PW / 2, y: H - 8, "text-anchor": "middle", class: "axistitle" }, g).textContent =
    "message size (bytes, log scale)";
}

// ---- loading -----------------------------------------------------------------------------

// placed is the node count an overlay (a sweep's run, a log) is drawn at: the one it names, else
// its ranks over the table's GPUs per node when that divides, said so in the overlay panel; 0 when
// neither (not drawn).
function placed(o) {
  if (o.nodes > 0) return { nodes: o.nodes, note: "" };
  const t = state.tables && state.tables.tables.find((t) => t.name === $("table").value);
  if (t && o.ranks > 0 && o.ranks % t.gpus_per_node === 0) {
    return { nodes: o.ranks / t.gpus_per_node, note: `node count not given: ${o.ranks} ranks / ${t.gpus_per_node} GPUs per node of ${t.name}` };
  }
  return { nodes: 0, note: "not drawn: no node count, and its ranks do not fill the table's nodes" };
}

function overlayNodes() {
  const ns = new Set();
  for (const m of state.measured) for (const r of m.runs) if (placed(r).nodes > 0) ns.add(placed(r).nodes);
  for (const l of state.logged) if (placed(l).nodes > 0) ns.add(placed(l).nodes);
  return ns;
}

async function loadMap() {
  const seq = ++state.seq;
  $("svg").dataset.state = "loading";
  setStatus("pricing the map ...");
  try {
    const q = baseQuery(false);
    let map = await api("POST", "/v1/map", q);
    const have = new Set(map.rows.map((r) => r.nodes));
    const extra = [...overlayNodes()].filter((n) => !have.has(n));
    if (extra.length) { // the overlays' node counts get rows of their own
      const counts = [...have, ...extra].sort((a, b) => a - b).slice(0, 64);
      map = await api("POST", "/v1/map", { ...q, node_counts: counts });
    }
    let map2 = null;
    if ($("diff").checked) {
      map2 = await api("POST", "/v1/map", { ...baseQuery(true), node_counts: map.rows.map((r) => r.nodes) });
    }
    if (seq !== state.seq) return;
    state.map = map; state.map2 = map2; state.timeData = null;
    fillNodes();
    await render(seq);
    // The menu shown follows the class: the same point, priced again (pinned stays pinned).
    const p = state.probe;
    if (seq === state.seq && p && map.rows.some((r) => r.nodes === p.nodes)) showMenu(p.nodes, p.bytes, state.pinned);
  } catch (e) {
    if (seq !== state.seq) return;
    setStatus(e.message, true);
    $("svg").dataset.state = "error";
  }
}

function fillNodes() {
  const sel = $("nodes");
  const want = state.nodes || Number(sel.value) || 1;
  sel.textContent = "";
  for (const r of state.map.rows) {
    const o = document.createElement("option");
    o.value = r.nodes; o.textContent = `${r.nodes} (${r.n_ranks || "?"} ranks)`;
    sel.appendChild(o);
  }
  const rows = state.map.rows.map((r) => r.nodes);
  state.nodes = rows.includes(want) ? want : rows[0];
  sel.value = String(state.nodes);
}

async function render(seq) {
  const svg = $("svg");
  svg.dataset.state = "loading";
  const ok = state.view === "time" ? await renderTime(seq) : renderMap();
  if (seq !== undefined && seq !== state.seq) return;
  if (!ok) { svg.dataset.state = "error"; return; } // renderTime said why in #status
  renderLegend();
  renderOverlayInfo();
  renderDiffInfo();
  const m = state.map;
  svg.dataset.coll = m.coll;
  svg.dataset.view = state.view;
  svg.dataset.nodes = String(state.nodes);
  svg.dataset.state = "ready";
  setStatus(`${m.coll} ${m.dtype} ${m.op}, ${fmtBytes(m.min)} to ${fmtBytes(m.max)}, generation ${m.generation}` +
    (state.view === "time" ? `; time per legal cell at ${plural(state.nodes, "node")}` : `; ${m.rows.length} node counts`));
}

// ---- the map view ------------------------------------------------------------------------

// pickAt is the (algo, proto) of row at size b, or null.
function pickAt(row, b) {
  for (const bd of row.bands) if (b >= bd.lo && b <= bd.hi) return bd;
  return null;
}

// diffIntervals are the sizes where two rows' picks differ: [{lo, hi, a, b}].
function diffIntervals(r1, r2) {
  const out = [];
  let i = 0, j = 0;
  while (i < r1.bands.length && j < r2.bands.length) {
    const a = r1.bands[i], b = r2.bands[j];
    const lo = Math.max(a.lo, b.lo), hi = Math.min(a.hi, b.hi);
    if (lo <= hi && (a.algo !== b.algo || a.proto !== b.proto)) {
      const last = out[out.length - 1];
      if (last && last.hi + 1 === lo && last.a === a && last.b === b) last.hi = hi;
      else out.push({ lo, hi, a, b });
    }
    if (a.hi <= b.hi) i++; else j++;
  }
  return out;
}

function renderMap() {
  const svg = $("svg");
  svg.textContent = "";
  svgDefs(svg);
  svg.setAttribute("aria-label", "crossover map: rows are node counts, bands are size ranges with one pick");
  $("charttitle").textContent = "Crossover map";
  sizeAxis(svg);
  const rows = [...state.map.rows].sort((a, b) => b.nodes - a.nodes); // largest at the top
  const rh = Math.min(34, PH / rows.length);
  const top = MT + (PH - rh * rows.length) / 2;
  el("text", { x: 12, y: MT + PH / 2, transform: `rotate(-90 12 ${MT + PH / 2})`, "text-anchor": "middle", class: "axistitle" }, svg)
    .textContent = "node count";
  const rowY = new Map();
  rows.forEach((row, i) => {
    const y = top + i * rh;
    rowY.set(row.nodes, y + rh / 2);
    el("text", { x: ML - 6, y: y + rh / 2 + 4, "text-anchor": "end", class: "rowlabel" }, svg).textContent = String(row.nodes);
    if (row.error) {
      title(el("text", { x: ML + 6, y: y + rh / 2 + 4, class: "rowlabel" }, svg), row.error).textContent = "no plan: " + row.error;
      return;
    }
    const g = el("g", { class: "row", "data-nodes": row.nodes }, svg);
    row.bands.forEach((bd, k) => {
      const x0 = xOf(bd.lo), x1 = xOf(bd.hi + 1);
      const r = el("rect", {
        x: x0, y: y + 1, width: Math.max(x1 - x0, 1.5), height: rh - 2, fill: colour(bd.algo, bd.proto),
        class: "band", tabindex: 0, role: "button", "data-nodes": row.nodes, "data-lo": bd.lo, "data-hi": bd.hi,
        "data-algo": bd.algo, "data-proto": bd.proto, "data-k": k,
        "aria-label": `${row.nodes} nodes, ${fmtBytes(bd.lo)} to ${fmtBytes(bd.hi)}: ${bd.algo}/${bd.proto}`,
      }, g);
      title(r, `${row.nodes} nodes (${row.n_ranks} ranks), ${bd.lo}..${bd.hi} B: ${bd.algo}/${bd.proto}, ` +
        `${fmtTime(bd.time_lo_us)} .. ${fmtTime(bd.time_hi_us)}` + (row.policy !== "builtin" ? `, policy ${row.policy}` : ""));
      r.addEventListener("mousemove", (ev) => hoverBand(ev, r));
      r.addEventListener("click", (ev) => probe(r, bytesFromEvent(ev, r), true));
      r.addEventListener("keydown", (ev) => keyBand(ev, r));
    });
    if (row.nodes === state.nodes) {
      el("rect", { x: ML - 1, y: y, width: PW + 2, height: rh, class: "rowsel" }, svg);
    }
    if (state.map2) {
      const r2 = state.map2.rows.find((r) => r.nodes === row.nodes);
      if (r2 && !r2.error) {
        for (const d of diffIntervals(row, r2)) {
          title(el("rect", { x: xOf(d.lo), y: y + 1, width: Math.max(xOf(d.hi + 1) - xOf(d.lo), 2), height: rh - 2, class: "diff",
            "data-nodes": row.nodes, "data-lo": d.lo, "data-hi": d.hi }, svg),
          `pick changed: ${d.a.algo}/${d.a.proto} -> ${d.b.algo}/${d.b.proto}`);
        }
      }
    }
  });
  drawOverlaysOnMap(svg, rowY, rh);
  restoreProbe();
  return true;
}

function bytesFromEvent(ev, r) {
  const pt = $("svg").createSVGPoint();
  pt.x = ev.clientX; pt.y = ev.clientY;
  const x = pt.matrixTransform($("svg").getScreenCTM().inverse()).x;
  const lo = Number(r.dataset.lo), hi = Number(r.dataset.hi);
  return Math.min(hi, Math.max(lo, bytesAt(x)));
}

function bandMid(r) {
  const lo = Number(r.dataset.lo), hi = Number(r.dataset.hi);
  return Math.min(hi, Math.max(lo, Math.round(Math.sqrt(lo * hi))));
}

let hoverTimer = 0;
function hoverBand(ev, r) {
  if (state.pinned) return;
  const b = bytesFromEvent(ev, r);
  clearTimeout(hoverTimer);
  hoverTimer = setTimeout(() => probe(r, b, false), 60);
}

function keyBand(ev, r) {
  const k = ev.key;
  if (k === "Enter" || k === " ") {
    ev.preventDefault();
    probe(r, bandMid(r), true);
    return;
  }
  if (k === "Escape") { unpin(); return; }
  const bands = [...document.querySelectorAll("rect.band")];
  const rowOf = (e) => Number(e.dataset.nodes);
  let next = null;
  if (k === "ArrowRight" || k === "ArrowLeft") {
    const same = bands.filter((e) => rowOf(e) === rowOf(r));
    const i = same.indexOf(r) + (k === "ArrowRight" ? 1 : -1);
    next = same[i];
  } else if (k === "ArrowUp" || k === "ArrowDown") {
    const rows = [...new Set(bands.map(rowOf))]; // top to bottom in document order
    const i = rows.indexOf(rowOf(r)) + (k === "ArrowDown" ? 1 : -1);
    if (i >= 0 && i < rows.length) {
      const mid = bandMid(r);
      next = bands.find((e) => rowOf(e) === rows[i] && Number(e.dataset.lo) <= mid && mid <= Number(e.dataset.hi));
    }
  } else return;
  ev.preventDefault();
  if (next) next.focus();
}

function unpin() {
  state.pinned = false;
  $("menu").dataset.pinned = "0";
  document.querySelectorAll("rect.band.probe").forEach((e) => e.classList.remove("probe"));
}

function restoreProbe() {
  if (!state.probe) return;
  const p = state.probe;
  const r = [...document.querySelectorAll("rect.band")].find((e) =>
    Number(e.dataset.nodes) === p.nodes && Number(e.dataset.lo) <= p.bytes && p.bytes <= Number(e.dataset.hi));
  if (r && state.pinned) r.classList.add("probe");
}

// probe shows the priced menu of one point (node count of r's row, b bytes); pin keeps it.
async function probe(r, b, pin) {
  const nodes = Number(r.dataset.nodes);
  if (pin) {
    state.pinned = true;
    document.querySelectorAll("rect.band.probe").forEach((e) => e.classList.remove("probe"));
    r.classList.add("probe");
  }
  await showMenu(nodes, b, pin);
}

async function showMenu(nodes, bytes, pin) {
  const seq = ++state.menuSeq;
  const menu = $("menu");
  menu.dataset.ready = "0";
  state.probe = { nodes, bytes };
  let plan;
  try {
    plan = await api("POST", "/v1/explain", { ...baseQuery(false), nodes, bytes });
  } catch (e) {
    if (seq === state.menuSeq) setStatus(e.message, true);
    return;
  }
  if (seq !== state.menuSeq) return;
  renderMenu(plan, nodes, bytes, pin);
}

const MENUCOLS = [
  ["algo", "algo", "l"], ["proto", "proto", "l"], ["lat_us", "lat_us"], ["bw_gbps", "bw_gbps"],
  ["correction", "corr"], ["model_time_us", "model_us"], ["time_us", "time_us"], ["reason", "reason", "reason"],
];

function renderMenu(plan, nodes, bytes, pin) {
  const menu = $("menu");
  menu.textContent = "";
  const q = plan.query;
  $("menutitle").textContent = `Priced menu: ${q.coll}, ${fmtBytes(q.bytes)}, ${plural(q.n_nodes, "node")}`;
  $("menuinfo").textContent = `${q.bytes} bytes, ${q.dtype} ${q.op}, on ${q.topology} (${q.n_ranks} ranks): ` +
    `${plan.algo}/${plan.proto} ${fmtNum(plan.time_us)} us, ${plan.channels} channels` +
    (plan.tuner !== "none" ? `, tuner ${plan.tuner}` : "") + (plan.tuner_note ? ` (${plan.tuner_note})` : "") +
    (pin ? ". Pinned: Escape unpins." : "");
  const head = menu.createTHead().insertRow();
  const th0 = document.createElement("th"); th0.textContent = ""; head.appendChild(th0);
  for (const [, label, cls] of MENUCOLS) {
    const th = document.createElement("th");
    th.textContent = label; if (cls) th.className = cls === "reason" ? "l" : cls;
    head.appendChild(th);
  }
  const body = menu.createTBody();
  for (const c of plan.menu) {
    const tr = body.insertRow();
    tr.dataset.algo = c.algo; tr.dataset.proto = c.proto;
    const isPick = c.algo === plan.algo && c.proto === plan.proto;
    if (isPick) tr.className = "pick"; else if (c.time_us < 0) tr.className = "illegal";
    const mark = tr.insertCell(); mark.textContent = isPick ? "\u2605" : "";
    mark.title = isPick ? "the pick" : "";
    for (const [key, , cls] of MENUCOLS) {
      const td = tr.insertCell();
      td.dataset.key = key;
      const v = c[key];
      if (typeof v === "number") {
        td.dataset.v = String(v);
        td.textContent = key === "correction" && c.time_us < 0 ? "-" : fmtNum(v);
        if (key === "bw_gbps" && c.time_us < 0) td.textContent = "-";
      } else {
        td.dataset.v = v ?? "";
        td.textContent = v ?? "";
        if (cls === "reason") td.title = v ?? "";
      }
      if (cls) td.className = cls;
    }
  }
  menu.dataset.coll = q.coll;
  menu.dataset.nodes = String(nodes);
  menu.dataset.bytes = String(bytes);
  menu.dataset.pinned = pin ? "1" : "0";
  menu.dataset.ready = "1";
}

// ---- overlays on the map -----------------------------------------------------------------

function measuredTime(p) { // the out-of-place time as nccl-tests prints first, else the in-place one
  if (p.oop_valid) return { t: p.oop_us, ok: true };
  if (p.ip_valid) return { t: p.ip_us, ok: true };
  return { t: p.oop_us, ok: false };
}

function runOnMap(r) { return r.coll === state.map.coll && placed(r).nodes > 0; }

function drawOverlaysOnMap(svg, rowY, rh) {
  const g = el("g", { class: "overlays" }, svg);
  const m = state.map;
  for (const ms of state.measured) {
    for (const run of ms.runs) {
      const pn = placed(run).nodes;
      if (!runOnMap(run) || !rowY.has(pn)) continue;
      for (const p of run.points) {
        if (p.bytes < m.min || p.bytes > m.max) continue;
        const mt = measuredTime(p);
        const c = el("circle", { cx: xOf(p.bytes), cy: rowY.get(pn), r: Math.min(4, rh / 4),
          class: "measured" + (mt.ok ? "" : " invalid"), "data-bytes": p.bytes, "data-nodes": pn }, g);
        title(c, `${ms.file}:${p.line}: ${p.bytes} B measured ${fmtTime(mt.t)}` + (mt.ok ? "" : " (not valid)"));
      }
    }
  }
  for (const lg of state.logged) {
    const ln = placed(lg).nodes;
    if (!(ln > 0) || !rowY.has(ln)) continue;
    const row = m.rows.find((r) => r.nodes === ln);
    const y = rowY.get(ln) - rh / 4;
    for (const d of lg.decisions) {
      if (d.coll !== m.coll || !(d.nbytes > 0) || d.nbytes < m.min || d.nbytes > m.max) continue;
      const x = xOf(d.nbytes), s = Math.min(5, rh / 4);
      const pk = row ? pickAt(row, d.nbytes) : null;
      const agree = pk && pk.algo === d.algo && pk.proto === d.proto;
      const e = el("path", { d: `M${x} ${y - s} L${x + s} ${y} L${x} ${y + s} L${x - s} ${y} Z`, fill: colour(d.algo, d.proto),
        class: "logged" + (agree ? "" : " disagree"), "data-bytes": d.nbytes, "data-nodes": ln }, g);
      title(e, `${lg.file}:${d.line}: NCCL picked ${d.algo}/${d.proto} at ${d.nbytes} B (x${d.count})` +
        (pk ? `; the model picks ${pk.algo}/${pk.proto}` : ""));
    }
  }
}

// ---- the time view -----------------------------------------------------------------------

function timeSizes(min, max) {
  const out = [];
  for (let k = MINLOG; k <= MAXLOG; k++) {
    for (const b of [2 ** k, 3 * 2 ** (k - 1)]) if (b >= min && b <= max && b >= 8) out.push(b);
  }
  out.push(min, max);
  return [...new Set(out)].sort((a, b) => a - b);
}

async function renderTime(seq) {
  const m = state.map;
  const row = m.rows.find((r) => r.nodes === state.nodes);
  const svg = $("svg");
  const key = JSON.stringify([baseQuery(false), state.nodes, m.min, m.max]);
  if (!state.timeData || state.timeData.key !== key) {
    const sizes = timeSizes(m.min, m.max);
    const q = baseQuery(false);
    let res;
    try {
      res = await api("POST", "/v1/explain", sizes.map((b) => ({ ...q, nodes: state.nodes, bytes: b })));
    } catch (e) {
      setStatus(e.message, true);
      return false;
    }
    if (seq !== undefined && seq !== state.seq) return false;
    state.timeData = { key, sizes, plans: res.results };
  }
  const { sizes, plans } = state.timeData;
  svg.textContent = "";
  svgDefs(svg);
  $("charttitle").textContent = `Predicted time per cell at ${state.nodes} nodes`;
  svg.setAttribute("aria-label", `predicted time per legal cell against size at ${state.nodes} nodes`);
  sizeAxis(svg);
  // cells: (algo, proto) -> [[bytes, time] or null]
  const cells = new Map();
  plans.forEach((p, i) => {
    for (const c of p.menu) {
      const k = c.algo + "/" + c.proto;
      if (!cells.has(k)) cells.set(k, { algo: c.algo, proto: c.proto, pts: [] });
      cells.get(k).pts.push(c.time_us >= 0 ? [sizes[i], c.time_us] : null);
    }
  });
  let tmin = Infinity, tmax = 0;
  for (const c of cells.values()) for (const p of c.pts) if (p) { tmin = Math.min(tmin, p[1]); tmax = Math.max(tmax, p[1]); }
  for (const ms of state.measured) for (const run of ms.runs) {
    if (run.coll !== m.coll || placed(run).nodes !== state.nodes) continue;
    for (const p of run.points) { const t = measuredTime(p).t; if (t > 0) { tmin = Math.min(tmin, t); tmax = Math.max(tmax, t); } }
  }
  if (!(tmax > 0)) { setStatus(`no legal cell at ${plural(state.nodes, "node")}`, true); return false; }
  const l0 = Math.floor(Math.log10(tmin)), l1 = Math.ceil(Math.log10(tmax));
  const yOf = (t) => MT + PH - (Math.log10(t) - l0) / Math.max(l1 - l0, 1) * PH;
  const ga = el("g", { class: "axis" }, svg);
  for (let l = l0; l <= l1; l++) {
    el("line", { x1: ML, x2: ML + PW, y1: yOf(10 ** l), y2: yOf(10 ** l), class: "gridline" }, ga);
    el("text", { x: ML - 6, y: yOf(10 ** l) + 4, "text-anchor": "end", class: "tick" }, ga).textContent = fmtTime(10 ** l);
  }
  el("text", { x: 12, y: MT + PH / 2, transform: `rotate(-90 12 ${MT + PH / 2})`, "text-anchor": "middle", class: "axistitle" }, svg)
    .textContent = "predicted time (log scale)";
  const gc = el("g", { class: "cells" }, svg);
  for (const c of cells.values()) {
    let d = "", pen = false;
    for (const p of c.pts) {
      if (!p) { pen = false; continue; }
      d += (pen ? "L" : "M") + xOf(p[0]).toFixed(1) + " " + yOf(p[1]).toFixed(1);
      pen = true;
    }
    if (!d) continue;
    title(el("path", { d, class: "cell", stroke: colour(c.algo, c.proto), "data-algo": c.algo, "data-proto": c.proto }, gc),
      `${c.algo}/${c.proto}`);
  }
  const co = [];
  if (row && !row.error) {
    const gp = el("g", { class: "picks" }, svg);
    row.bands.forEach((bd, k) => {
      const cell = cells.get(bd.algo + "/" + bd.proto);
      const pts = [[bd.lo, bd.time_lo_us]];
      if (cell) cell.pts.forEach((p) => { if (p && p[0] > bd.lo && p[0] < bd.hi) pts.push(p); });
      pts.push([bd.hi, bd.time_hi_us]);
      const d = pts.map((p, i) => (i ? "L" : "M") + xOf(p[0]).toFixed(1) + " " + yOf(p[1]).toFixed(1)).join("");
      title(el("path", { d, class: "pick", "data-algo": bd.algo, "data-proto": bd.proto }, gp), `pick ${bd.algo}/${bd.proto}, ${bd.lo}..${bd.hi} B`);
      if (k > 0) {
        const x = xOf(bd.lo);
        el("line", { x1: x, x2: x, y1: MT, y2: MT + PH, class: "crossover", "data-bytes": bd.lo }, gp);
        el("text", { x: x + 2, y: MT + 10 + (k % 3) * 11, class: "crosslabel" }, gp).textContent = fmtShort(bd.lo);
        co.push({ prev: row.bands[k - 1], bd });
      }
    });
    if (state.map2) {
      const r2 = state.map2.rows.find((r) => r.nodes === row.nodes);
      if (r2 && !r2.error) for (const dd of diffIntervals(row, r2)) {
        title(el("rect", { x: xOf(dd.lo), y: MT + PH - 10, width: Math.max(xOf(dd.hi + 1) - xOf(dd.lo), 2), height: 10, class: "diff",
          "data-nodes": row.nodes, "data-lo": dd.lo, "data-hi": dd.hi }, svg), `pick changed: ${dd.a.algo}/${dd.a.proto} -> ${dd.b.algo}/${dd.b.proto}`);
      }
    }
  }
  const go = el("g", { class: "overlays" }, svg);
  for (const ms of state.measured) for (const run of ms.runs) {
    if (run.coll !== m.coll || placed(run).nodes !== state.nodes) continue;
    for (const p of run.points) {
      const mt = measuredTime(p);
      if (p.bytes < m.min || p.bytes > m.max || !(mt.t > 0)) continue;
      title(el("circle", { cx: xOf(p.bytes), cy: yOf(mt.t), r: 3.5, class: "measured" + (mt.ok ? "" : " invalid"),
        "data-bytes": p.bytes, "data-nodes": state.nodes }, go), `${ms.file}:${p.line}: ${p.bytes} B measured ${fmtTime(mt.t)}`);
    }
  }
  for (const lg of state.logged) {
    if (placed(lg).nodes !== state.nodes) continue;
    for (const d of lg.decisions) {
      if (d.coll !== m.coll || !(d.nbytes > 0) || d.nbytes < m.min || d.nbytes > m.max) continue;
      const x = xOf(d.nbytes), y = MT + PH - 18, s = 5;
      const pk = row ? pickAt(row, d.nbytes) : null;
      const agree = pk && pk.algo === d.algo && pk.proto === d.proto;
      title(el("path", { d: `M${x} ${y - s} L${x + s} ${y} L${x} ${y + s} L${x - s} ${y} Z`, fill: colour(d.algo, d.proto),
        class: "logged" + (agree ? "" : " disagree"), "data-bytes": d.nbytes, "data-nodes": state.nodes }, go),
      `${lg.file}:${d.line}: NCCL picked ${d.algo}/${d.proto} at ${d.nbytes} B`);
    }
  }
  renderCrossovers(row, co);
  return true;
}

function renderCrossovers(row, co) {
  const box = $("crossovers");
  box.textContent = "";
  if (!row) return;
  const h = document.createElement("h2");
  h.textContent = `Crossovers at ${plural(row.nodes, "node")} (${co.length})`;
  box.appendChild(h);
  const ul = document.createElement("ul");
  for (const { prev, bd } of co) {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.className = "crossover-item";
    b.dataset.bytes = bd.lo;
    b.textContent = `${bd.lo.toLocaleString("en")} B (${fmtBytes(bd.lo)}): ${prev.algo}/${prev.proto} \u2192 ${bd.algo}/${bd.proto}`;
    b.addEventListener("click", () => { state.pinned = true; showMenu(row.nodes, bd.lo, true); });
    li.appendChild(b); ul.appendChild(li);
  }
  box.appendChild(ul);
}

// ---- legend, overlay and diff panels -----------------------------------------------------

function renderLegend() {
  const lg = $("legend");
  lg.textContent = "";
  const seen = new Map();
  for (const mp of [state.map, state.map2]) {
    if (!mp) continue;
    for (const r of mp.rows) for (const b of r.bands) seen.set(b.algo + "/" + b.proto, b);
  }
  for (const l of state.logged) for (const d of l.decisions) seen.set(d.algo + "/" + d.proto, d);
  for (const [k, b] of [...seen.entries()].sort()) {
    const s = document.createElement("span");
    s.className = "item"; s.dataset.cell = k;
    const sw = document.createElement("span");
    sw.className = "sw"; sw.style.background = colour(b.algo, b.proto);
    s.appendChild(sw); s.appendChild(document.createTextNode(k));
    lg.appendChild(s);
  }
  const extras = [];
  if (state.measured.length) extras.push("\u25cb measured (sweep)");
  if (state.logged.length) extras.push("\u25c6 NCCL's logged pick (red edge: differs from the model)");
  if (state.map2) extras.push("hatched: pick changed in the diff");
  if (state.view === "time") extras.push("thick line: the pick; dashed: crossovers");
  for (const t of extras) {
    const s = document.createElement("span"); s.textContent = t; lg.appendChild(s);
  }
}

function renderOverlayInfo() {
  const box = $("overlayinfo");
  box.textContent = "";
  if (!state.measured.length && !state.logged.length) return;
  const h = document.createElement("h2"); h.textContent = "Overlays"; box.appendChild(h);
  const ul = document.createElement("ul");
  const add = (t) => { const li = document.createElement("li"); li.textContent = t; ul.appendChild(li); };
  const m = state.map;
  for (const ms of state.measured) {
    for (const run of ms.runs) {
      let why = placed(run).note;
      if (run.coll !== m.coll) why = `not drawn: its collective is ${run.coll || "unknown"}, the map's ${m.coll}`;
      add(`${ms.file}:${run.line}: ${run.coll || "?"} ${run.dtype} ${run.nodes || "?"} nodes x ${run.gpus_per_node || "?"} GPUs` +
        (run.algo || run.proto ? `, pinned ${run.algo || "*"}/${run.proto || "*"}` : "") + `, ${run.points.length} rows` + (why ? `; ${why}` : ""));
    }
    if (ms.problems.length) add(`${ms.file}: ${ms.problems.length} problems, first: line ${ms.problems[0].line}: ${ms.problems[0].msg}`);
  }
  for (const lg of state.logged) {
    const here = lg.decisions.filter((d) => d.coll === m.coll && d.nbytes > 0);
    let agree = 0;
    const pl = placed(lg);
    const row = m.rows.find((r) => r.nodes === pl.nodes);
    for (const d of here) { const pk = row && pickAt(row, d.nbytes); if (pk && pk.algo === d.algo && pk.proto === d.proto) agree++; }
    add(`${lg.file}: NCCL ${lg.nccl_version || "?"}, ${lg.nodes || "?"} nodes, ${lg.ranks || "?"} ranks: ` +
      `${lg.decisions.length} distinct decisions, ${here.length} of ${m.coll}; the model agrees on ${agree}` +
      (pl.note ? `; ${pl.note}` : ""));
  }
  box.appendChild(ul);
}

function renderDiffInfo() {
  const box = $("diffinfo");
  box.textContent = "";
  if (!state.map2) return;
  const h = document.createElement("h2");
  const q2 = baseQuery(true);
  h.textContent = `Diff: ${$("table").value}${$("nooverlay").checked ? " (no overlay)" : ""}${$("tuner").value ? " tuner " + $("tuner").value : ""}` +
    ` vs ${q2.node}${q2.no_overlay ? " (no overlay)" : ""}${q2.tuner ? " tuner " + q2.tuner : ""}`;
  box.appendChild(h);
  const ul = document.createElement("ul");
  let n = 0;
  for (const row of state.map.rows) {
    const r2 = state.map2.rows.find((r) => r.nodes === row.nodes);
    if (!r2 || row.error || r2.error) continue;
    for (const d of diffIntervals(row, r2)) {
      n++;
      const li = document.createElement("li");
      li.className = "diff-item";
      li.textContent = `${row.nodes} nodes, ${fmtBytes(d.lo)}..${fmtBytes(d.hi)}: ${d.a.algo}/${d.a.proto} \u2192 ${d.b.algo}/${d.b.proto}`;
      ul.appendChild(li);
    }
  }
  if (!n) { const li = document.createElement("li"); li.textContent = "no pick changed"; ul.appendChild(li); }
  box.appendChild(ul);
}

// ---- uploads -----------------------------------------------------------------------------

async function upload(input, path, list) {
  const f = input.files[0];
  if (!f) return;
  try {
    const text = await f.text();
    const v = await api("POST", path, { name: f.name, text });
    list.push(v);
    input.value = "";
    await loadMap();
  } catch (e) {
    setStatus(`${f.name}: ${e.message}`, true);
  }
}

// ---- start -------------------------------------------------------------------------------

async function start() {
  try {
    state.tables = await api("GET", "/v1/tables");
  } catch (e) {
    setStatus(e.message, true);
    return;
  }
  for (const id of ["table", "table2"]) {
    const sel = $(id);
    for (const t of state.tables.tables) {
      const o = document.createElement("option");
      o.value = t.name; o.textContent = `${t.name} (${t.gpu}, ${t.gpus_per_node} GPUs)`;
      sel.appendChild(o);
    }
  }
  for (const id of ["tuner", "tuner2"]) {
    for (const t of state.tables.tuners) {
      const o = document.createElement("option"); o.value = t; o.textContent = t; $(id).appendChild(o);
    }
  }
  const names = state.tables.tables.map((t) => t.name);
  if (names.includes("h100")) $("table").value = "h100";
  if (names.includes("h200")) $("table2").value = "h200";
  const params = new URLSearchParams(location.search);
  for (const k of ["table", "coll", "dtype", "op", "view"]) if (params.get(k)) $(k).value = params.get(k);
  state.view = $("view").value;
  for (const id of ["table", "coll", "dtype", "op", "tuner", "nooverlay", "diff", "table2", "tuner2", "nooverlay2"]) {
    $(id).addEventListener("change", () => loadMap());
  }
  $("view").addEventListener("change", () => { state.view = $("view").value; $("crossovers").textContent = ""; render(++state.seq); });
  $("nodes").addEventListener("change", () => { state.nodes = Number($("nodes").value); render(++state.seq); });
  $("sweepfile").addEventListener("change", () => upload($("sweepfile"), "/v1/overlay/sweep", state.measured));
  $("tuningfile").addEventListener("change", () => upload($("tuningfile"), "/v1/overlay/tuning", state.logged));
  $("clear").addEventListener("click", () => { state.measured = []; state.logged = []; loadMap(); });
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape") unpin(); });
  await loadMap();
}

start();
