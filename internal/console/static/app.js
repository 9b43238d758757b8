// The console's page: the sandbox list, live from the gateway's watch
// (server-sent events, no polling), and one sandbox's page. Everything a
// sandbox or a caller wrote (names, labels, reasons, logs) goes into the
// page as text (textContent), never as markup.
"use strict";

const state = { session: null, sandboxes: new Map(), synced: false, logs: null };
const $ = (id) => document.getElementById(id);
const PHASES = ["pending", "provisioning", "ready", "paused", "stopping", "stopped", "exited", "error", "deleting"];

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

async function call(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") opts.headers["X-CSRF-Token"] = state.session.csrf;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(path, opts);
  const data = await resp.json().catch(() => ({ error: resp.statusText }));
  if (resp.status === 401) location.href = "/login";
  if (!resp.ok) throw new Error(data.error || resp.statusText);
  return data;
}

function age(stamp) {
  if (!stamp) return "-";
  const s = Math.max(0, Math.floor((Date.now() - Date.parse(stamp)) / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 172800) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

function labelsOf(sb) {
  const labels = (sb.spec && sb.spec.labels) || {};
  return Object.keys(labels).sort().map((k) => k + "=" + labels[k]).join(", ");
}

// --- the list

function matches(sb) {
  const phase = $("filter-phase").value;
  if (phase && sb.phase !== phase) return false;
  const want = $("filter-label").value.trim();
  if (!want) return true;
  const [k, v] = want.split("=", 2);
  const labels = (sb.spec && sb.spec.labels) || {};
  return v === undefined ? k in labels : labels[k] === v;
}

let drawQueued = false;
function drawList() {
  if (drawQueued) return;
  drawQueued = true;
  requestAnimationFrame(() => {
    drawQueued = false;
    const body = document.createElement("tbody");
    const list = [...state.sandboxes.values()].filter(matches).sort((a, b) => a.name.localeCompare(b.name));
    for (const sb of list) {
      const tr = document.createElement("tr");
      tr.dataset.name = sb.name;
      const name = el("td");
      const a = el("a", sb.name);
      a.href = "#/sandbox/" + encodeURIComponent(sb.name);
      name.append(a);
      tr.append(name, el("td", sb.tenant), el("td", sb.phase, "phase phase-" + sb.phase), el("td", sb.desired_state),
        el("td", sb.generation), el("td", age(sb.created_at)), el("td", sb.reason), el("td", labelsOf(sb)));
      body.append(tr);
    }
    $("sandboxes").replaceChild(body, $("sandboxes").tBodies[0]);
    $("live").textContent = state.synced ? "live · " + state.sandboxes.size + " sandboxes" : "loading…";
  });
}

function watch() {
  if (state.watch) state.watch.close();
  state.sandboxes.clear();
  state.synced = false;
  drawList();
  const source = new EventSource("/api/watch");
  state.watch = source;
  source.addEventListener("sandbox", (e) => {
    const ev = JSON.parse(e.data);
    if (ev.type === "SYNCED") {
      state.synced = true;
    } else if (ev.type === "DELETED") {
      state.sandboxes.delete(ev.sandbox.id);
    } else if (ev.sandbox) {
      state.sandboxes.set(ev.sandbox.id, ev.sandbox);
    }
    drawList();
    if (currentName() && ev.sandbox && ev.sandbox.name === currentName()) showSandbox(currentName());
  });
  source.addEventListener("error", () => {
    $("live").textContent = "reconnecting…";
    state.synced = false;
    state.sandboxes.clear();
  });
}

function parseCreate(form) {
  const f = new FormData(form);
  const labels = {};
  for (const pair of String(f.get("labels") || "").split(",")) {
    const [k, v] = pair.split("=", 2).map((s) => (s || "").trim());
    if (k) labels[k] = v || "";
  }
  const command = String(f.get("command") || "").trim();
  return {
    name: String(f.get("name") || "").trim(),
    image: String(f.get("image") || "").trim(),
    command: command ? command.split(/\s+/) : [],
    labels,
    policy: String(f.get("policy") || ""),
  };
}

// --- one sandbox

function currentName() {
  const m = location.hash.match(/^#\/sandbox\/(.+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

function action(name, what, label) {
  const b = el("button", label, "act");
  b.dataset.action = what;
  b.addEventListener("click", async () => {
    if (what === "delete-force" && !confirm("Delete " + name + " at once, without a graceful stop?")) return;
    $("sb-error").hidden = true;
    try {
      await call("POST", "/api/sandboxes/" + encodeURIComponent(name) + "/" + what);
      if (what.startsWith("delete")) location.hash = "#/";
      else showSandbox(name);
    } catch (err) {
      $("sb-error").textContent = err.message;
      $("sb-error").hidden = false;
    }
  });
  return b;
}

async function showSandbox(name) {
  let data;
  try {
    data = await call("GET", "/api/sandboxes/" + encodeURIComponent(name));
  } catch (err) {
    $("sb-error").textContent = err.message;
    $("sb-error").hidden = false;
    return;
  }
  const sb = data.sandbox;
  $("sb-name").textContent = sb.name;
  const actions = $("sb-actions");
  actions.replaceChildren();
  if (state.session.may_act) {
    const snap = el("button", "Snapshot", "act");
    snap.dataset.action = "snapshot";
    snap.addEventListener("click", async () => {
      const snapName = prompt("Name of the snapshot of " + sb.name + ":");
      if (!snapName) return;
      try {
        await call("POST", "/api/sandboxes/" + encodeURIComponent(sb.name) + "/snapshot", { name: snapName });
        $("sb-error").textContent = "snapshot " + snapName + " taken";
        $("sb-error").className = "note";
      } catch (err) {
        $("sb-error").textContent = err.message;
        $("sb-error").className = "error";
      }
      $("sb-error").hidden = false;
    });
    actions.append(snap);
    actions.append(action(sb.name, "stop", "Stop"), action(sb.name, "start", "Start"), action(sb.name, "pause", "Pause"),
      action(sb.name, "resume", "Resume"), action(sb.name, "delete", "Delete"), action(sb.name, "delete-force", "Delete --force"));
  }
  const facts = $("sb-facts");
  facts.replaceChildren();
  const fact = (k, v) => facts.append(el("dt", k), el("dd", v));
  fact("id", sb.id);
  fact("tenant", sb.tenant);
  fact("phase", sb.phase);
  fact("desired", sb.desired_state);
  fact("generation", sb.generation);
  fact("reason", sb.reason || "-");
  fact("image", (sb.spec && sb.spec.image) || "(default)");
  fact("command", ((sb.spec && sb.spec.command) || []).join(" ") || "(the image's)");
  fact("labels", labelsOf(sb) || "-");
  fact("protections", typeof sb.protections === "string" ? sb.protections : JSON.stringify(sb.protections || {}));
  $("sb-policy").textContent = (sb.spec && sb.spec.policy) || "(the default policy)";
  const body = document.createElement("tbody");
  for (const op of data.history.operations || []) {
    const tr = document.createElement("tr");
    tr.append(el("td", op.id), el("td", op.kind), el("td", op.state), el("td", op.generation), el("td", op.started_at),
      el("td", op.actor || "-"), el("td", op.error));
    body.append(tr);
  }
  $("sb-history").replaceChild(body, $("sb-history").tBodies[0]);
  followLogs(sb.name);
  followDenials(sb.name);
  call("GET", "/api/sandboxes/" + encodeURIComponent(sb.name) + "/credentials")
    .then((c) => table("sb-credentials", c.uses.map((u) => [u.time, u.secret, u.credential, u.verdict,
      (u.method + " " + u.host + ":" + u.port + u.path).trim(), u.reason || ""])))
    .catch(() => table("sb-credentials", []));
}

function table(id, rows) {
  const body = document.createElement("tbody");
  for (const cells of rows) {
    const tr = document.createElement("tr");
    for (const c of cells) tr.append(el("td", c));
    body.append(tr);
  }
  $(id).replaceChild(body, $(id).tBodies[0]);
}

function followDenials(name) {
  if (state.denials && state.denials.name === name) return;
  if (state.denials) state.denials.source.close();
  table("sb-denials", []);
  const source = new EventSource("/api/sandboxes/" + encodeURIComponent(name) + "/denials");
  source.addEventListener("denial", (e) => {
    const d = JSON.parse(e.data);
    const tr = document.createElement("tr");
    for (const c of [d.time, d.verdict, d.host, d.port, (d.method + " " + d.path).trim(), d.policy, d.reason]) tr.append(el("td", c));
    $("sb-denials").tBodies[0].append(tr);
  });
  state.denials = { name, source };
}

async function showPools() {
  const data = await call("GET", "/api/pools");
  table("pools", (data.pools || []).map((p) => [p.name, p.size, p.ready, p.members, (p.spec && p.spec.image) || "(default)"]));
}

async function showDoctor() {
  $("doctor-error").hidden = true;
  try {
    const r = await call("GET", "/api/doctor");
    table("tiers", (r.tiers || []).map((t) => [t.name, t.available ? "yes" : "no", t.detail]));
    table("replicas", (r.replicas || []).map((x) => [x.id, x.leader ? "yes" : "", x.alive ? "yes" : "no", x.epoch, x.sandboxes, age(x.seen_at)]));
    table("findings", (r.findings || []).map((f) => [f.sandbox, f.problem, f.action]));
  } catch (err) {
    $("doctor-error").textContent = err.message;
    $("doctor-error").hidden = false;
  }
}

function followLogs(name) {
  if (state.logs && state.logs.name === name) return;
  if (state.logs) state.logs.source.close();
  $("sb-logs").textContent = "";
  const source = new EventSource("/api/sandboxes/" + encodeURIComponent(name) + "/logs");
  source.addEventListener("log", (e) => {
    const chunk = JSON.parse(e.data);
    $("sb-logs").append(document.createTextNode(chunk.stdout + chunk.stderr));
  });
  state.logs = { name, source };
}

// --- the terminal: an exec with a TTY over a WebSocket

function openTerminal(name) {
  closeTerminal();
  const term = new Terminal({ convertEol: false, fontSize: 13 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open($("terminal"));
  fit.fit();
  const q = new URLSearchParams({ csrf: state.session.csrf, rows: term.rows, cols: term.cols, command: $("term-command").value });
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host +
    "/api/sandboxes/" + encodeURIComponent(name) + "/terminal?" + q);
  ws.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  ws.addEventListener("message", (e) => {
    if (typeof e.data !== "string") {
      term.write(new Uint8Array(e.data));
      return;
    }
    const f = JSON.parse(e.data);
    term.write("\r\n[" + (f.error ? f.error : "exited " + f.exit) + "]\r\n");
  });
  ws.addEventListener("close", () => term.write("\r\n[closed]\r\n"));
  term.onData((d) => { if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(d)); });
  term.onResize(({ rows, cols }) => { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: { rows, cols } })); });
  const refit = () => fit.fit();
  window.addEventListener("resize", refit);
  state.terminal = { term, ws, refit };
  term.focus();
}

function closeTerminal() {
  if (!state.terminal) return;
  state.terminal.ws.close();
  state.terminal.term.dispose();
  window.removeEventListener("resize", state.terminal.refit);
  state.terminal = null;
}

// --- charts: drawn as SVG, from the list and from the doctor's stats,
// sampled every 2 s while the page is open

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}

// bars draws labelled horizontal bars, one per [label, value, note].
function bars(id, rows) {
  const max = Math.max(1, ...rows.map((r) => r[1]));
  const chart = svg("svg", { width: 760, height: 22 * rows.length + 4, role: "img" });
  rows.forEach(([label, value, note], i) => {
    const y = 22 * i + 2;
    chart.append(svg("text", { x: 0, y: y + 14 }, label));
    chart.append(svg("rect", { x: 160, y, width: Math.max(1, (340 * value) / max), height: 18, class: "bar" }));
    chart.append(svg("text", { x: 160 + Math.max(1, (340 * value) / max) + 6, y: y + 14 }, note === undefined ? value : note));
  });
  $(id).replaceChildren(chart);
}

// line draws the last samples as a polyline with its newest value.
function line(id, samples) {
  const max = Math.max(1, ...samples);
  const chart = svg("svg", { width: 640, height: 120, role: "img" });
  const points = samples.map((v, i) => `${(620 * i) / Math.max(1, samples.length - 1)},${110 - (100 * v) / max}`).join(" ");
  chart.append(svg("polyline", { points, class: "line" }));
  chart.append(svg("text", { x: 0, y: 12 }, "now " + (samples.length ? samples[samples.length - 1].toFixed(1) : "-") + "/s, max " + max.toFixed(1) + "/s"));
  $(id).replaceChildren(chart);
}

function drawPhases() {
  const counts = new Map();
  for (const sb of state.sandboxes.values()) counts.set(sb.phase, (counts.get(sb.phase) || 0) + 1);
  bars("chart-phases", [...counts.entries()].sort((a, b) => b[1] - a[1]));
}

async function sampleStats() {
  try {
    const r = await call("GET", "/api/doctor");
    const stats = r.stats || {};
    const now = Date.now(), ops = Number(stats.operations || 0);
    const c = state.charts;
    if (c.last) c.ops.push((1000 * Math.max(0, ops - c.last.ops)) / Math.max(1, now - c.last.at));
    c.last = { ops, at: now };
    c.ops = c.ops.slice(-60);
    line("chart-ops", c.ops);
    bars("chart-calls", (stats.driver_calls || []).filter((d) => Number(d.count) > 0).map((d) =>
      [d.kind, d.p95_seconds * 1000, (d.p50_seconds * 1000).toFixed(0) + " / " + (d.p95_seconds * 1000).toFixed(0) + " ms · " + d.count]));
    bars("chart-egress", Object.entries(stats.egress || {}).map(([verdict, n]) => [verdict, Number(n)]));
  } catch (err) {
    $("charts-error").textContent = err.message;
    $("charts-error").hidden = false;
    if (state.charts) state.charts.noStats = true; // the phases still come from the list
  }
}

function startCharts() {
  stopCharts();
  $("charts-error").hidden = true;
  state.charts = { ops: [], last: null, timer: setInterval(() => { drawPhases(); if (!state.charts.noStats) sampleStats(); }, 2000) };
  drawPhases();
  sampleStats();
}

function stopCharts() {
  if (state.charts) clearInterval(state.charts.timer);
  state.charts = null;
}

// --- routing

function route() {
  const name = currentName();
  const pages = { "#/pools": "pools", "#/doctor": "doctor", "#/charts": "charts" };
  const page = name !== null ? "sandbox" : pages[location.hash] || "list";
  $("charts-view").hidden = page !== "charts";
  if (page === "charts") startCharts();
  else stopCharts();
  $("list-view").hidden = page !== "list";
  $("sandbox-view").hidden = page !== "sandbox";
  $("pools-view").hidden = page !== "pools";
  $("doctor-view").hidden = page !== "doctor";
  if (page === "pools") return showPools();
  if (page === "doctor") return showDoctor();
  if (page !== "sandbox" && state.denials) {
    state.denials.source.close();
    state.denials = null;
  }
  if (name === null) {
    if (state.logs) state.logs.source.close();
    state.logs = null;
    closeTerminal();
    drawList();
  } else {
    $("sb-error").hidden = true;
    showSandbox(name);
  }
}

function showWho() {
  $("who").textContent = state.session.caller + " · " + state.session.role + (state.session.every ? " · every tenant" : " · tenant " + state.session.tenant);
}

// An admin acts in every tenant or in one it picks; the API decides.
async function tenantPicker() {
  if (!state.session.admin) return;
  const data = await call("GET", "/api/tenants");
  const pick = $("tenant");
  pick.append(el("option", "every tenant"));
  pick.options[0].value = "";
  for (const t of data.tenants || []) pick.append(el("option", t.name));
  pick.value = state.session.every ? "" : state.session.tenant;
  pick.hidden = false;
  pick.addEventListener("change", async () => {
    state.session = await call("POST", "/api/tenant", { tenant: pick.value });
    showWho();
    watch();
    route();
  });
}

async function main() {
  state.session = await call("GET", "/api/session");
  showWho();
  tenantPicker();
  for (const p of PHASES) $("filter-phase").append(el("option", p));
  $("filter-phase").addEventListener("change", drawList);
  $("filter-label").addEventListener("input", drawList);
  $("new").hidden = !state.session.may_act;
  $("term-open").hidden = !state.session.may_act;
  $("term-open").addEventListener("click", () => openTerminal(currentName()));
  $("new").addEventListener("click", () => { $("create").hidden = !$("create").hidden; });
  $("create").addEventListener("submit", async (e) => {
    e.preventDefault();
    $("create-error").hidden = true;
    try {
      const req = parseCreate(e.target);
      await call("POST", "/api/sandboxes", req);
      e.target.reset();
      $("create").hidden = true;
    } catch (err) {
      $("create-error").textContent = err.message;
      $("create-error").hidden = false;
    }
  });
  window.addEventListener("hashchange", route);
  watch();
  route();
  setInterval(drawList, 30000); // ages
}

main();
