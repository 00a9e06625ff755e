// The pwe dashboard: plain JavaScript, no library, no build step. Every value from the
// server reaches the page as text (textContent, text nodes, setAttribute of plain
// attributes): never innerHTML with data. Live updates come over server-sent events.
"use strict";

const STATES = ["waiting", "ready", "queued", "running", "done", "failed", "skipped", "cancelled", "quarantined",
                "held"];
const COLORS = {done: "#1a7f37", failed: "#cf222e", running: "#0969da", queued: "#8250df", waiting: "#afb8c1",
  ready: "#afb8c1", skipped: "#bf8700", cancelled: "#6e7781", lost: "#bf8700", quarantined: "#953800", held: "#8250df"};
const SVG = "http://www.w3.org/2000/svg";
let session = {authenticated: false, reads: false, csrf: null};
let streams = [];
let timers = [];
window.pweStats = {events: 0, records: 0, first: null, last: null};  // (bench/ui.py reads it)

// -- building the page from data, as text ---------------------------------------------------
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "on") for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else if (k === "text") e.textContent = String(v);
    else e.setAttribute(k, String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}
function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const kid of kids.flat(Infinity)) if (kid !== null && kid !== undefined)
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return e;
}
const fmt = n => (n === null || n === undefined) ? "?" : Number(n).toLocaleString("en-US");
const when = t => t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) : "?";
function dur(s) {
  if (s === null || s === undefined) return "?";
  s = Math.floor(s); const p = n => String(n).padStart(2, "0");
  return `${Math.floor(s / 3600)}:${p(Math.floor(s / 60) % 60)}:${p(s % 60)}`;
}
const stateSpan = s => el("span", {class: `state s-${String(s).split(/[ ;:]/)[0]}`, text: s});
function bar(counts, total) {
  const b = el("span", {class: "bar", title: STATES.filter(s => counts[s]).map(s => `${s} ${counts[s]}`).join(", ")});
  for (const s of ["done", "failed", "skipped", "cancelled", "quarantined", "held", "running", "queued"]) {
    const n = counts[s] || 0;
    if (n && total) { const part = el("span", {class: `b-${s}`}); part.style.width = `${(100 * n / total).toFixed(3)}%`;
      b.append(part); }  // (CSSOM, not a style attribute: the page's CSP allows no inline style)
  }
  return b;
}
function notice(text, bad) {
  const n = document.getElementById("notice");
  n.textContent = text || ""; n.hidden = !text; n.className = bad ? "bad" : "";
}
const main = () => document.getElementById("main");
function setMain(...kids) { const m = main(); m.replaceChildren(...kids); }

// -- talking to the server ---------------------------------------------------------------------
async function get(path) {
  const r = await fetch(path, {credentials: "same-origin"});
  const body = await r.json().catch(() => ({error: `HTTP ${r.status}`}));
  if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
  return body;
}
async function act(path, body) {
  const r = await fetch(path, {method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-PWE-CSRF": session.csrf || ""},
    body: JSON.stringify(body || {})});
  const out = await r.json().catch(() => ({error: `HTTP ${r.status}`}));
  if (!r.ok) throw new Error(out.error || `HTTP ${r.status}`);
  return out;
}
function listen(path, handlers) {
  for (const old of streams) old.close();  // (one stream a page: a route that overtook another keeps one)
  streams = [];
  const es = new EventSource(path);
  const dot = document.getElementById("live");
  es.onopen = () => dot.classList.add("on");
  es.onerror = () => dot.classList.remove("on");
  for (const [kind, fn] of Object.entries(handlers))
    es.addEventListener(kind, ev => { const s = window.pweStats; s.events++; s.last = performance.now();
      if (s.first === null) s.first = s.last; fn(JSON.parse(ev.data)); });
  streams.push(es);
  return es;
}
function leave() {
  for (const es of streams) es.close();
  for (const t of timers) clearInterval(t);
  streams = []; timers = [];
}
function button(label, fn, cls) {
  const b = el("button", {class: cls, type: "button", text: label});
  b.addEventListener("click", async () => {
    b.disabled = true;
    try { await fn(); } catch (e) { notice(e.message, true); } finally { b.disabled = false; }
  });
  return b;
}

// -- the runs ----------------------------------------------------------------------------------
function runsTable(runs) {
  const t = el("table", {id: "runs"},
    el("tr", {}, ["run", "from", "state", "progress", "", "started", "duration", "core-hours"].map(
      (h, i) => el("th", {class: [3, 6, 7].includes(i) ? "num" : null, text: h}))));
  for (const r of runs) {
    const tr = el("tr", {class: "click", "data-run": r.run_id, on: {click: () => { location.hash = `#/run/${encodeURIComponent(r.run_id)}`; }}},
      el("td", {}, el("a", {href: `#/run/${encodeURIComponent(r.run_id)}`, text: r.run_id})),
      el("td", {text: r.from}), el("td", {}, stateSpan(r.state)),
      el("td", {class: "num progress", text: r.total === null ? "?" : `${fmt(r.finished)}/${fmt(r.total)}`}),
      el("td", {}, bar({done: r.finished}, r.total)),
      el("td", {text: when(r.started)}), el("td", {class: "num", text: dur(r.duration)}),
      el("td", {class: "num", text: r.core_hours === null ? "?" : Number(r.core_hours).toFixed(3)}));
    t.append(tr);
  }
  return t;
}
async function showRuns() {
  setMain(el("h1", {text: "Runs"}), el("div", {id: "runs-box"}, el("p", {class: "muted", text: "loading…"})));
  const put = runs => document.getElementById("runs-box")?.replaceChildren(
    runs.length ? runsTable(runs) : el("p", {class: "muted", text: "no runs"}));
  put(await get("/api/runs"));
  listen("/api/live/runs", {runs: put});
}

// -- one run -----------------------------------------------------------------------------------
function dagView(dag, status) {
  const nodes = dag.nodes, depth = {};
  const into = {};
  for (const e of dag.edges) (into[e.to] = into[e.to] || []).push(e.from);
  const d = id => depth[id] ?? (depth[id] = Math.max(0, ...(into[id] || []).map(p => d(p) + 1)));
  nodes.forEach(n => d(n.id));
  const cols = {}; nodes.forEach(n => (cols[depth[n.id]] = cols[depth[n.id]] || []).push(n.id));
  const W = 190, H = 64, GX = 60, GY = 18, pos = {};
  let maxRows = 1;
  for (const [c, ids] of Object.entries(cols)) { ids.forEach((id, r) => pos[id] = [c * (W + GX), r * (H + GY)]);
    maxRows = Math.max(maxRows, ids.length); }
  const ncols = Object.keys(cols).length;
  const s = svg("svg", {id: "dag", width: ncols * (W + GX), height: maxRows * (H + GY)});
  for (const e of dag.edges) {
    const [x1, y1] = pos[e.from], [x2, y2] = pos[e.to];
    s.append(svg("path", {d: `M${x1 + W},${y1 + H / 2} C${x1 + W + GX / 2},${y1 + H / 2} ${x2 - GX / 2},${y2 + H / 2} ${x2},${y2 + H / 2}`,
      fill: "none", stroke: "#8c959f", "stroke-dasharray": e.matching === "barrier" ? "4 3" : "none"}));
  }
  for (const n of nodes) {
    const [x, y] = pos[n.id], c = (status.nodes || {})[n.id] || {};
    const total = STATES.reduce((a, k) => a + (c[k] || 0), 0) || n.members;
    const g = svg("g", {class: "dag-node", "data-node": n.id, transform: `translate(${x},${y})`});
    g.append(svg("rect", {width: W, height: H, rx: 6, fill: "#fff", stroke: "#d0d7de"}));
    g.append(svg("text", {x: 8, y: 16, "font-weight": 600}, n.id));
    let bx = 8;
    for (const k of ["done", "failed", "skipped", "cancelled", "quarantined", "held", "running", "queued"]) {
      const w = total ? (W - 16) * (c[k] || 0) / total : 0;
      if (w > 0) { g.append(svg("rect", {x: bx, y: 24, width: w, height: 8, fill: COLORS[k]})); bx += w; }
    }
    const reused = (status.reused || {})[n.id];
    g.append(svg("text", {x: 8, y: 50, fill: "#656d76"},
      STATES.filter(k => c[k]).map(k => `${k} ${fmt(c[k])}` + (k === "done" && reused ? ` (${fmt(reused)} reused)` : ""))
        .join(" · ") || `${fmt(n.members)} members`));
    g.append(svg("title", {}, `${n.id}: ${fmt(total)} members`));
    s.append(g);
  }
  return s;
}
function countsTable(rows, id) {
  const t = el("table", {id}, el("tr", {}, el("th", {text: ""}), STATES.map(s => el("th", {class: "num", text: s}))));
  for (const [name, c] of rows)
    t.append(el("tr", {}, el("td", {text: name}), STATES.map(s => el("td", {class: "num", text: fmt(c[s] || 0)}))));
  return t;
}
function progressTable(by, id, extra) {
  const keys = ["done", "failed", "running", "queued", "lost", "cancelled"];
  const t = el("table", {id}, el("tr", {}, el("th", {text: ""}), keys.map(k => el("th", {class: "num", text: k})),
    el("th", {text: ""})));
  for (const [name, c] of Object.entries(by).sort())
    t.append(el("tr", {}, el("td", {text: name}), keys.map(k => el("td", {class: "num", text: fmt(c[k] || 0)})),
      el("td", {class: "muted", text: extra ? extra(name) : ""})));
  return t;
}
function timelineView(tl) {
  const recs = tl.records.filter(r => r.start);
  if (!recs.length) return el("p", {class: "muted", text: "no attempt has started yet"});
  const t0 = Math.min(...recs.map(r => r.start)), now = Date.now() / 1000;
  const t1 = Math.max(...recs.map(r => r.end || now)), span = Math.max(t1 - t0, 0.001);
  const lanes = {}, W = 1000, rowH = 6;
  const rows = [];  // each pilot's attempts packed into rows, first fit
  for (const r of recs.sort((a, b) => a.start - b.start)) {
    const key = r.pilot || "?"; const ends = lanes[key] = lanes[key] || [];
    let i = ends.findIndex(e => e <= r.start);
    if (i < 0) { i = ends.length; ends.push(0); }
    ends[i] = r.end || now; rows.push([key, i, r]);
  }
  const order = []; for (const [k, ends] of Object.entries(lanes)) for (let i = 0; i < ends.length; i++) order.push(`${k}/${i}`);
  const s = svg("svg", {id: "timeline", width: W + 60, height: order.length * rowH + 24});
  for (const [key, i, r] of rows) {
    const x = 50 + W * (r.start - t0) / span, w = Math.max(1, W * ((r.end || now) - r.start) / span);
    const rect = svg("rect", {x, y: order.indexOf(`${key}/${i}`) * rowH, width: w, height: rowH - 1, fill: COLORS[r.state] || "#999"});
    rect.append(svg("title", {}, `${r.node}[${r.member}] attempt ${r.attempt}: ${r.state}` +
      (r.duration !== null && r.duration !== undefined ? `, ${r.duration}s` : "") + ` on ${r.node_name || "?"} (${r.pilot})`));
    s.append(rect);
  }
  s.append(svg("text", {x: 50, y: order.length * rowH + 16}, `${dur(span)} from ${when(t0)}; ${fmt(tl.attempts)} attempts` +
    (tl.attempts > recs.length ? ` (the ${fmt(recs.length)} latest drawn)` : "")));
  return s;
}

const runView = {id: null, q: "", state: "", node: "", offset: 0, limit: 50, visible: new Set(), member: null};
async function showRun(id, member) {
  Object.assign(runView, {id, offset: 0, member});
  const doc = await get(`/api/runs/${encodeURIComponent(id)}`);
  const q = el("input", {type: "text", id: "query", placeholder: "query, e.g. state=failed; T>300; outputs.energy<1.5"});
  q.value = runView.q;
  q.addEventListener("keydown", e => { if (e.key === "Enter") { runView.q = q.value; runView.offset = 0; loadMembers(); } });
  const nodeSel = el("select", {id: "node-filter"}, el("option", {value: "", text: "every node"}),
    doc.dag.nodes.map(n => el("option", {value: n.id, text: n.id})));
  nodeSel.addEventListener("change", () => { runView.node = nodeSel.value; runView.offset = 0; loadMembers(); });
  const stateSel = el("select", {id: "state-filter"}, el("option", {value: "", text: "every state"}),
    STATES.map(s => el("option", {value: s, text: s})));
  stateSel.addEventListener("change", () => { runView.state = stateSel.value; runView.offset = 0; loadMembers(); });
  const base = `/api/runs/${encodeURIComponent(id)}`;
  setMain(
    el("h1", {}, "Run ", el("span", {id: "run-id", text: id}), " ", el("span", {id: "phase"})),
    el("div", {class: "actions"},
      button("Cancel", async () => { if (!confirm(`Cancel ${id}?`)) return;
        const r = await act(`${base}/cancel`); notice(r.cancelled ? `${id}: cancelled` : `${id}: already finished`); }, "danger"),
      button("Retry failed", async () => { const r = await act(`${base}/retry`); notice(`${r.run_id}: retrying`); }),
      button("Retry selection", async () => { const query = document.getElementById("query").value;
        if (!query) throw new Error("write a query that selects the members to retry");
        const r = await act(`${base}/retry`, {query}); notice(`${r.run_id}: retrying ${fmt(r.selected)} selected`); }),
      button("Resume", async () => { const r = await act(`${base}/resume`); notice(`${r.run_id}: resumed`); }),
      el("input", {id: "set-pairs", placeholder: "memoryPerMember=8000 priority=5", size: 32,
                   title: "pwe set: what the members the query selects (all without one) ask for from their next attempt"}),
      button("Set for what has not started", async () => {
        const pairs = document.getElementById("set-pairs").value.trim().split(/\s+/).filter(Boolean);
        if (!pairs.length) throw new Error("write KEY=VALUE words: memoryPerMember, maxWallTimePerMember, threads, gpus, retries, priority, env.NAME");
        const query = document.getElementById("query").value;
        const r = await act(`${base}/set`, query ? {pairs, query} : {pairs});
        notice(r.taken ? `${r.run_id}: set for ${fmt(r.later)} members not started; ${fmt(r.running)} running keep what they asked`
                       : `${r.run_id}: no engine runs it; the next one takes the change before it hands out a member`); })),
    el("div", {id: "summary", class: "muted"}),
    el("h2", {text: "DAG"}), el("div", {id: "dag-box", class: "panel"}),
    el("h2", {text: "Nodes"}), el("div", {id: "counts-box"}),
    el("h2", {text: "Failures"}), el("div", {id: "failures-box", class: "panel"}, el("p", {class: "muted", text: "loading…"})),
    el("h2", {text: "Members"}),
    el("div", {class: "actions"}, q, nodeSel, stateSel, button("Search", async () => { runView.q = q.value; runView.offset = 0; await loadMembers(); })),
    el("div", {id: "members-box"}),
    el("div", {id: "member-box"}),
    el("h2", {text: "Pilots and machines"}), el("div", {id: "pilots-box", class: "row"}),
    el("h2", {text: "Timeline"}), el("div", {id: "timeline-box", class: "panel"}),
    el("h2", {text: "Events"}), el("div", {id: "feed", class: "feed panel"}));
  putStatus(doc);
  await loadMembers();
  if (window.pweStats.interactive === undefined) window.pweStats.interactive = performance.now();  // (bench/ui.py)
  if (member) showMember(member[0], member[1]);
  let tlWanted = true, tlBusy = false;
  const loadTimeline = async () => {
    if (!tlWanted || tlBusy) return; tlWanted = false; tlBusy = true;
    try { putTimeline(await get(`${base}/timeline`)); } catch (e) { notice(e.message, true); } finally { tlBusy = false; }
  };
  for (const t of timers) clearInterval(t);
  timers = [];
  setTimeout(loadTimeline, 50);
  timers.push(setInterval(loadTimeline, 2000));
  // what the failures have in common: read again when a member's end or a retry changed them, at most every 5 s
  // (each reading counts the run's state and reads up to 2,000 failed members' last stderr lines)
  let flWanted = true, flBusy = false, flLast = -Infinity;
  const loadFailures = async () => {
    if (!flWanted || flBusy || performance.now() - flLast < 5000) return;
    flWanted = false; flBusy = true; flLast = performance.now();
    try { putFailures(await get(`${base}/failures`)); }
    catch (e) { document.getElementById("failures-box")?.replaceChildren(el("p", {class: "bad", text: e.message})); }
    finally { flBusy = false; }
  };
  setTimeout(loadFailures, 100);
  timers.push(setInterval(loadFailures, 1000));
  let membersWanted = false;
  timers.push(setInterval(() => { if (membersWanted) { membersWanted = false; loadMembers(); } }, 1000));
  listen(`/api/live/runs/${encodeURIComponent(id)}`, {
    status: s => { putStatus({...s, dag: doc.dag}); },  // (the status as it is now: an engine gone is gone)
    journal: j => {
      window.pweStats.records += j.n;
      tlWanted = true;
      const feed = document.getElementById("feed");
      for (const r of j.records.slice(-30)) {
        if (r.n !== undefined && runView.visible.has(`${r.n}:${r.m}`)) membersWanted = true;
        if (runView.member && r.n === runView.member[0] && r.m === runView.member[1]) showMember(r.n, r.m);
        feed.prepend(el("div", {text: `${when(r.t)}  ${r.e}` + (r.n !== undefined ? `  ${r.n}[${r.m}]` : "") +
          (r.a ? ` attempt ${r.a}` : "") + (r.rc !== undefined ? ` exit ${r.rc}` : "") + (r.by ? `  by ${r.by}` : "")}));
      }
      while (feed.childNodes.length > 200) feed.lastChild.remove();
      if (j.records.some(r => r.e !== "end" && r.e !== "start" && r.e !== "assign")) membersWanted = true;
      if (j.records.some(r => (r.e === "end" && (r.rc || r.why || r.reason)) || ["retry", "unassign"].includes(r.e))) flWanted = true;
    }});
}
// the done that did not run here, as pwe status says them: reused from earlier runs, complete by products
function notRun(doc) {
  const sum = o => Object.values(o || {}).reduce((a, v) => a + v, 0);
  const reused = sum(doc.reused), complete = sum(doc.complete);
  const said = [reused ? `${fmt(reused)} reused from earlier runs` : "", complete ? `${fmt(complete)} complete by products` : ""]
    .filter(Boolean);
  return said.length ? el("span", {id: "not-run", text: ` · of the done, ${said.join(", ")}, not run`}) : "";
}
function putStatus(doc) {
  const phase = document.getElementById("phase"); if (!phase) return;
  phase.replaceChildren(stateSpan(doc.phase));
  const t = doc.totals || {}, total = STATES.reduce((a, k) => a + (t[k] || 0), 0);
  const ch = doc.core_hours;
  document.getElementById("summary").replaceChildren(
    el("span", {id: "progress", text: `${fmt((t.done || 0) + (t.failed || 0) + (t.skipped || 0) + (t.cancelled || 0) + (t.quarantined || 0))}/${fmt(total)} finished`}),
    " ", bar(t, total),
    notRun(doc),
    ch ? ` · core-hours: done ${Number(ch.done).toFixed(3)}, failed ${Number(ch.failed).toFixed(3)}` : "",
    doc.budget && doc.budget.limit !== null && doc.budget.limit !== undefined ?
      el("span", {id: "budget", text: ` · budget: ${Number(doc.budget.spent).toFixed(3)} core-hours spent, ` +
        `~${Number(doc.budget.projected).toFixed(3)} projected of ${doc.budget.limit}`}) : "",
    doc.engine && doc.phase === "running" ? ` · engine pid ${doc.engine.pid} on ${doc.engine.host}` : "",  // (as pwe status)
    doc.halted && doc.halted.why ? ` · ${doc.halted.why}` : "",  // (the failure or core-hour budget: as pwe status)
    ` · ${doc.run_dir}`);
  document.getElementById("dag-box").replaceChildren(dagView(doc.dag, doc));
  document.getElementById("counts-box").replaceChildren(
    countsTable([...Object.entries(doc.nodes || {}), ["total", t]], "counts"));
  runView.pilots = doc.pilots || {};
}
function putTimeline(tl) {
  const box = document.getElementById("timeline-box"); if (!box) return;
  box.replaceChildren(timelineView(tl));
  const pilots = runView.pilots || {};
  document.getElementById("pilots-box").replaceChildren(
    el("div", {class: "panel"}, el("strong", {text: "per pilot"}), progressTable(tl.by_pilot, "by-pilot",
      p => { const x = pilots[p] || tl.pilots[p] || {}; return [x.state, x.host || x.lane, x.job ? `job ${x.job}` : ""].filter(Boolean).join(" "); })),
    el("div", {class: "panel"}, el("strong", {text: "per machine"}), progressTable(tl.by_machine, "by-machine")));
}
// pwe failures' views, the first rows of each: by parameter value first (the values most over-represented
// among the failures), then by reason, by error signature, by host
const FAILURE_ROWS = 10;
function rowsTable(id, heads, rows, nums) {
  const t = el("table", {id}, el("tr", {}, heads.map((h, i) => el("th", {class: nums.includes(i) ? "num" : null, text: h}))));
  for (const r of rows) t.append(el("tr", {}, r.map((v, i) => el("td", {class: nums.includes(i) ? "num" : null, text: v}))));
  return t;
}
function putFailures(doc) {
  const box = document.getElementById("failures-box"); if (!box) return;
  if (!doc.failed) { box.replaceChildren(el("p", {class: "muted", id: "no-failures", text: "no member failed"})); return; }
  const first = (rows, what) => rows.length > FAILURE_ROWS ? ` (the first ${FAILURE_ROWS} of ${fmt(rows.length)} ${what})` : "";
  const pct = x => `${Math.round(100 * x)}%`;
  box.replaceChildren(...[  // (replaceChildren takes nodes, not lists of them: flattened here)
    el("strong", {text: `by parameter value${first(doc.by_value, "values")}`}),
    el("p", {class: "muted", text: "the values most over-represented among the failures first: difference is the share of " +
      "the node's failed members with the value less the share of its done members with it, in points"}),
    rowsTable("failures-by-value", ["node", "parameter", "value", "failed", "done", "rate", "difference"],
      doc.by_value.slice(0, FAILURE_ROWS).map(r => [r.node, r.parameter, r.value, fmt(r.failed), fmt(r.done), pct(r.rate),
        `${r.difference > 0 ? "+" : ""}${Math.round(r.difference)}`]), [3, 4, 5, 6]),
    doc.not_compared.map(r => el("p", {class: "muted", text: `${r.node} ${r.parameter}: ${fmt(r.values)} values, not compared`})),
    el("p", {id: "failures-by-reason", text: "by reason: " + doc.by_reason.slice(0, FAILURE_ROWS).map(r => `${r.reason} × ${fmt(r.members)}`).join(", ")}),
    el("strong", {text: "by error signature (the last line on stderr, numbers and paths folded)" +
      (doc.signatures_read < doc.failed ? `, read from ${fmt(doc.signatures_read)} of ${fmt(doc.failed)}` : "") +
      first(doc.by_signature, "signatures")}),
    rowsTable("failures-by-signature", ["members", "signature", "for example"],
      doc.by_signature.slice(0, FAILURE_ROWS).map(r => [fmt(r.members), r.signature, r.example]), [0]),
    doc.by_host && doc.by_host.length ? [
      el("strong", {text: `by host (attempts)${first(doc.by_host, "hosts")}`}),
      rowsTable("failures-by-host", ["host", "failed", "done", "rate"],
        doc.by_host.slice(0, FAILURE_ROWS).map(r => [r.host, fmt(r.failed), fmt(r.done), pct(r.rate)]), [1, 2, 3])] : null,
  ].flat(Infinity).filter(Boolean));
}
async function loadMembers() {
  const p = new URLSearchParams({offset: runView.offset, limit: runView.limit});
  if (runView.q) p.set("q", runView.q); if (runView.node) p.set("node", runView.node); if (runView.state) p.set("state", runView.state);
  const box = document.getElementById("members-box"); if (!box) return;
  let page;
  try { page = await get(`/api/runs/${encodeURIComponent(runView.id)}/members?${p}`); }
  catch (e) { box.replaceChildren(el("p", {class: "bad", id: "members-error", text: e.message})); return; }
  runView.visible = new Set(page.members.map(m => `${m.node}:${m.member}`));
  const t = el("table", {id: "members"}, el("tr", {}, ["member", "state", "attempts", "exit", "why", "parameters", "outputs"].map(
    h => el("th", {class: ["attempts", "exit"].includes(h) ? "num" : null, text: h}))));
  for (const m of page.members) {
    t.append(el("tr", {class: "click member-row", "data-member": `${m.node}:${m.member}`, on: {click: () => showMember(m.node, m.member)}},
      el("td", {text: `${m.node}[${m.member}]`}), el("td", {}, stateSpan(m.state)), el("td", {class: "num", text: m.attempts}),
      el("td", {class: "num", text: m.exit_status ?? ""}), el("td", {text: m.why || ""}),
      el("td", {text: Object.entries(m.parameters).map(([k, v]) => `${k}=${v}`).join(" ")}),
      el("td", {text: Object.entries(m.outputs).map(([k, v]) => `${k}=${v}`).join(" ")})));
  }
  const pager = el("div", {class: "pager"},
    button("◀ previous", async () => { runView.offset = Math.max(0, runView.offset - runView.limit); await loadMembers(); }),
    el("span", {id: "page-range", text: page.members.length ? `${fmt(page.offset + 1)}–${fmt(page.offset + page.members.length)}` : "none"}),
    button("next ▶", async () => { if (page.more) { runView.offset += runView.limit; await loadMembers(); } }));
  pager.lastChild.disabled = !page.more; pager.firstChild.disabled = page.offset === 0;
  box.replaceChildren(t, pager);
}
async function showMember(node, index) {
  runView.member = [node, index];
  const base = `/api/runs/${encodeURIComponent(runView.id)}/members/${encodeURIComponent(node)}/${index}`;
  const box = document.getElementById("member-box"); if (!box) return;
  try {
    const [m, logs, why] = await Promise.all([get(base), get(`${base}/logs?tail=200`).catch(e => ({error: e.message})),
      get(`${base}/explain`).catch(e => ({error: e.message}))]);
    const kv = (k, v) => el("tr", {}, el("td", {text: k}), el("td", {text: v}));
    box.replaceChildren(el("div", {class: "panel", id: "member"},
      el("h2", {text: `${node}[${index}]`}),
      el("table", {class: "kv"}, kv("state", m.state), kv("attempts", m.attempts), kv("exit status", m.exit_status ?? ""),
        m.why ? kv("why", m.why) : null,
        Object.entries(m.parameters).map(([k, v]) => kv(`parameter ${k}`, v)),
        Object.entries(m.outputs).map(([k, v]) => kv(`output ${k}`, v)),
        kv("files", m.files.map(f => `${f.name} (${fmt(f.bytes)} B)`).join(", ") || "none"),
        m.products.length ? kv("products", m.products.map(p => `${p.path}${p.exists ? "" : " (missing)"}`).join(", ")) : null),
      el("div", {id: "explain"}, explainView(why, base)),
      logs.error ? el("p", {class: "muted", text: logs.error}) : ["stdout", "stderr"].map(k => logs[k] ? [
        el("strong", {text: k + (logs[k].cut ? ` (last part; ${fmt(logs[k].cut)} bytes before it)` : "")}),
        el("pre", {class: "log", id: `log-${k}`, text: logs[k].text})] : null)));
    clearTimeout(runView.tail);
    if (["running", "queued"].includes(m.state)) runView.tail = setTimeout(() => {  // a live tail: its logs grow between events
      if (runView.member && runView.member[0] === node && runView.member[1] === index &&
          document.getElementById("member")) showMember(node, index); }, 2000);
  } catch (e) { box.replaceChildren(el("p", {class: "bad", text: e.message})); }
}

// pwe explain's layers: the member (what it waits for, what holds it), its placement, its allocation. The batch
// system is asked why a queued pilot job waits only when the button says so (?ask=1), never per view
function explainView(doc, base) {
  if (doc.error) return el("p", {class: "muted", text: doc.error});
  const names = {member: "the member", placement: "placement", allocation: "allocation"};
  const ask = button("Ask the batch system", async () => {
    const fresh = await get(`${base}/explain?ask=1`);
    document.getElementById("explain")?.replaceChildren(explainView(fresh, base));
  });
  return [el("strong", {text: "Explain"}),
    Object.entries(doc.layers).map(([k, lines]) => el("div", {class: "layer", id: `explain-${k}`},
      el("em", {text: names[k] || k}), el("ul", {}, lines.map(line => el("li", {text: line}))))),
    doc.layers.allocation ? el("div", {class: "actions"}, ask) : null];
}

// -- triggers and hosts ------------------------------------------------------------------------
async function showTriggers() {
  const rows = await get("/api/triggers");
  const t = el("table", {id: "triggers"}, el("tr", {}, ["trigger", "when", "next", "overlap", "workflow", "enabled", ""].map(h => el("th", {text: h}))));
  for (const g of rows)
    t.append(el("tr", {"data-trigger": g.id}, el("td", {text: g.id}), el("td", {text: g.when}), el("td", {text: g.next || "–"}),
      el("td", {text: g.overlap}), el("td", {text: g.workflow}), el("td", {text: g.enabled ? "yes" : "no"}),
      el("td", {}, button("Fire now", async () => { const r = await act(`/api/triggers/${encodeURIComponent(g.id)}/fire`); notice(`${g.id}: ${r.run_id}`); }),
        " ", button(g.enabled ? "Disable" : "Enable", async () => {
          await act(`/api/triggers/${encodeURIComponent(g.id)}/${g.enabled ? "disable" : "enable"}`); showTriggers(); }))));
  setMain(el("h1", {text: "Triggers"}), rows.length ? t : el("p", {class: "muted", text: "no triggers (pwe trigger add)"}));
}
async function showHosts() {
  const rows = await get("/api/hosts");
  const t = el("table", {id: "hosts"}, el("tr", {}, ["host", "protocol", "contact", "cores/node", "nodes", "defined in", "check"].map(h => el("th", {text: h}))));
  for (const h of rows) {
    const out = el("div", {class: "check"});
    t.append(el("tr", {"data-host": h.name}, el("td", {text: h.name}), el("td", {text: h.protocol}), el("td", {text: h.contact}),
      el("td", {class: "num", text: h.cores_per_node ?? "?"}), el("td", {class: "num", text: h.nodes ?? "–"}), el("td", {text: h.source}),
      el("td", {}, button("Check", async () => {
        const r = await act(`/api/hosts/${encodeURIComponent(h.name)}/check`);
        out.replaceChildren(...r.checks.map(c => el("div", {class: c.ok ? "s-done" : "s-failed", text: `${c.ok ? "✓" : "✗"} ${c.check}: ${c.detail}`})));
      }), out)));
  }
  setMain(el("h1", {text: "Hosts"}), t);
}

// -- routing -----------------------------------------------------------------------------------
async function route() {
  leave(); notice("");
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  try {
    if (!session.reads) { setMain(el("p", {text: "This dashboard needs its token: open the address pwe ui printed."})); return; }
    if (parts[0] === "run" && parts[1]) await showRun(parts[1], parts[2] === "member" ? [parts[3], Number(parts[4])] : null);
    else if (parts[0] === "triggers") await showTriggers();
    else if (parts[0] === "hosts") await showHosts();
    else await showRuns();
    document.body.dataset.ready = "1";
  } catch (e) { setMain(el("p", {class: "bad", id: "error", text: e.message})); }
}
async function start() {
  try { session = await get("/api/session"); } catch (e) { notice(e.message, true); }
  document.getElementById("who").textContent = session.authenticated ? "actions allowed" : "read only (actions need the token)";
  window.addEventListener("hashchange", route);
  await route();
}
start();
