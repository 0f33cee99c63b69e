// cachecast's operator console: plain JavaScript, no library. Every figure
// comes from the daemon's read routes under api/ (the local API's own
// JSON: api/v1/fleet is GET /v1/fleet). Data is put in the page with
// textContent only, never as HTML.
"use strict";

const API = "api/v1";
const $ = (s) => document.querySelector(s);
const state = { view: "", timers: [], fleetPrev: new Map(), spark: new Map(), topicsPrev: new Map(), key: null, historySig: "", tail: null };

// el makes an element with text or children.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k instanceof Node ? k : String(k));
  return e;
}
const badge = (cls, text) => el("span", { class: "badge " + cls, text });
const enc = encodeURIComponent;

async function get(path) {
  const res = await fetch(API + path, { headers: { Accept: "application/json" }, cache: "no-store" });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error((body.error && body.error.message) || res.status + " " + res.statusText);
  return body;
}

function showError(err) {
  const e = $("#error");
  e.hidden = !err;
  e.textContent = err ? String(err.message || err) : "";
}

// every runs fn now and then each ms after the last run ended, while the
// view is shown.
function every(ms, fn) {
  let stopped = false, t = 0;
  const run = async () => {
    try { await fn(); showError(null); } catch (err) { showError(err); }
    if (!stopped) t = setTimeout(run, ms);
  };
  run();
  state.timers.push(() => { stopped = true; clearTimeout(t); });
}

// sparkline draws the last values as an SVG polyline.
function sparkline(values) {
  const w = 80, h = 18, svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark"); svg.setAttribute("width", w); svg.setAttribute("height", h);
  const max = Math.max(1, ...values);
  const pts = values.map((v, i) => `${(i * w / Math.max(1, values.length - 1)).toFixed(1)},${(h - 1 - v / max * (h - 2)).toFixed(1)}`);
  const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  pl.setAttribute("points", pts.join(" "));
  svg.append(pl);
  return svg;
}
function pushSpark(id, v) {
  const a = state.spark.get(id) || [];
  a.push(v); if (a.length > 60) a.shift();
  state.spark.set(id, a);
  return a;
}

const fmtRate = (r) => r == null ? "…" : r < 10 ? r.toFixed(1) : Math.round(r).toString();
function fmtIn(ms) {
  if (ms <= 0) return "now";
  const s = Math.ceil(ms / 1000);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor(s % 3600 / 60) + " min";
}
const fmtSeconds = (x) => x < 1 ? Math.round(x * 1000) + " ms" : x.toFixed(1) + " s";
// agreement is the observer's comparisons with peers' views: the share
// that agreed, and how many.
function agreement(o) {
  const n = o.agreed + o.differed;
  return n ? `${(100 * o.agreement_ratio).toFixed(n > 1000 ? 3 : 1)}% of ${n}` : "–";
}
const shortOrigin = (o) => o ? o.replace(/^0+(?=.)/, "") : "";

// ---- Fleet ----
async function refreshFleet() {
  const f = await get("/fleet");
  $("#node").textContent = f.node;
  const tbody = $("#fleet tbody");
  const rows = [];
  let up = 0;
  const names = new Map(f.members.map((m) => [m.origin, m.name]));
  for (const m of f.members) {
    const s = m.summary, prev = state.fleetPrev.get(m.name);
    let pub = null, app = null, fresh = true;
    if (s && prev && prev.s) {
      const dt = (Date.parse(s.time) - Date.parse(prev.s.time)) / 1000;
      if (dt > 0) { pub = Math.max(0, (s.published - prev.s.published) / dt); app = Math.max(0, (s.applied - prev.s.applied) / dt); }
      else { pub = prev.pub; app = prev.app; fresh = false; } // the same answer again (the node shares one a half second)
    }
    if (fresh) state.fleetPrev.set(m.name, { s, pub, app });
    const isUp = m.state === "alive" && !!s;
    if (isUp) up++;
    const stateCell = el("td", {}, badge(isUp ? "up" : "down", isUp ? "up" : (m.state === "alive" ? "no answer" : "down")), el("span", { class: "sub", text: m.state }));
    const lag = el("td", { class: "mono" });
    for (const l of m.lag || []) lag.append(el("div", { text: `${names.get(l.origin) || shortOrigin(l.origin)}: ${l.records} rec, ${l.seconds.toFixed(1)} s` }));
    if (!(m.lag || []).length) lag.append(m.self ? "—" : "0");
    const flags = el("td");
    if (s && s.degraded) flags.append(badge("warn", "degraded"));
    if (s && s.away) flags.append(badge("down", "away"));
    if (s && s.catch_up) flags.append(badge("warn", "catching up: " + s.catch_up.phase));
    if (s && !s.healthy) flags.append(badge("down", "unhealthy"));
    if (s && s.clock_behind) flags.append(badge("warn", "clock behind"));
    if (m.clock_ahead) flags.append(badge("warn", `clock ahead ${m.clock_ahead_seconds.toFixed(1)} s`));
    if (m.too_old) flags.append(badge("warn", "protocol too old"));
    if (!m.connected && !m.self && m.state === "alive") flags.append(badge("warn", "data port unreachable"));
    if (m.error) flags.append(el("div", { class: "sub", text: m.error }));
    const offset = s ? Math.round((m.clock_offset_seconds || 0) * 1000) : null;
    const tr = el("tr", { "data-member": m.name, "data-up": isUp ? "1" : "0", class: isUp ? "" : "member-down" },
      el("td", {}, el("b", { text: m.name }), m.self ? el("span", { class: "sub", text: " (this node)" }) : null),
      stateCell,
      el("td", { class: "num", text: m.protocol || "" }),
      el("td", { class: "mono", text: shortOrigin(m.origin) }),
      el("td", { text: s ? s.version : "" }),
      el("td", { class: "num", text: s ? s.keys : "" }),
      el("td", { class: "num", title: s && s.observer ? s.observer.summary : "", text: s && s.observer && s.observer.freshness_p99_seconds ? fmtSeconds(s.observer.freshness_p99_seconds) : "–" }),
      el("td", { class: "num", title: s && s.observer ? s.observer.summary : "", text: s && s.observer ? agreement(s.observer) : "–" }),
      el("td", { class: "num" }, el("span", { class: "rate", text: fmtRate(pub) }), sparkline(fresh ? pushSpark("p:" + m.name, pub || 0) : state.spark.get("p:" + m.name) || [])),
      el("td", { class: "num" }, el("span", { class: "rate", text: fmtRate(app) }), sparkline(fresh ? pushSpark("a:" + m.name, app || 0) : state.spark.get("a:" + m.name) || [])),
      lag,
      el("td", { class: "num", text: offset == null ? "" : (offset >= 0 ? "+" : "") + offset + " ms" }),
      flags);
    rows.push(tr);
  }
  tbody.replaceChildren(...rows);
  $("#fleet-summary").textContent = `${up} of ${f.members.length} members up, as ${f.node} sees them at ${f.time}`;
}

// ---- Keys ----
async function refreshTopics() {
  const t = await get("/topics");
  const rows = t.topics.map((x) => {
    const tr = el("tr", { class: "clickable", "data-topic": x.name }, el("td", { text: x.name }), el("td", { class: "num", text: x.keys }), el("td", { class: "num", text: x.messages }));
    tr.onclick = () => { $("#key-topic").value = x.name; searchKeys(); };
    return tr;
  });
  $("#topics tbody").replaceChildren(...rows);
}

async function searchKeys() {
  const topic = $("#key-topic").value.trim(), prefix = $("#key-prefix").value;
  if (!topic) return;
  try {
    const r = await get(`/topics/${enc(topic)}/keys?limit=200&prefix=${enc(prefix)}`);
    $("#key-list").replaceChildren(...r.keys.map((k) => {
      const li = el("li", { text: k, "data-key": k });
      li.onclick = () => openKey(topic, k);
      return li;
    }));
    if (!r.keys.length) $("#key-list").replaceChildren(el("li", { class: "sub", text: "no key" }));
    showError(null);
  } catch (err) { showError(err); }
}

function openKey(topic, key) {
  state.key = { topic, key };
  location.hash = `#keys/${enc(topic)}/${enc(key)}`;
}

const keyRows = [
  ["value", (e) => e ? (e.binary ? "hex " : "") + e.value + (e.truncated ? " …" : "") : "", "value"],
  ["size", (e) => e ? e.size + " B" : ""],
  ["tag", (e) => e ? e.tag : ""],
  ["version (hlc)", (e) => e ? e.hlc : ""],
  ["origin", (e) => e ? shortOrigin(e.origin) : ""],
  ["seq", (e) => e ? e.seq : ""],
  ["written", (e) => e ? e.time : ""],
  ["expires", (e) => e ? (e.expires_at ? e.expires_at + " (in " + fmtIn(Date.parse(e.expires_at) - Date.now()) + ")" : "never") : ""],
  ["sha-256", (e) => e ? e.sha256.slice(0, 16) + "…" : ""],
];
const fieldOf = (label) => label.split(" ")[0];

async function refreshKey() {
  if (!state.key) return;
  const { topic, key } = state.key;
  $("#key-title").textContent = `${topic} / ${key}`;
  const r = await get(`/topics/${enc(topic)}/nodes/${enc(key)}`);
  const answered = r.nodes.filter((n) => n.answered && !n.error);
  const v = $("#key-verdict");
  v.replaceChildren(r.same ? badge("up", `the same on all ${r.nodes.length} members`) :
    badge("down", `not the same everywhere: ${answered.length} of ${r.nodes.length} answered` + (r.nodes.some((n) => n.differs) ? ", some differ" : "")));
  v.setAttribute("data-same", r.same ? "1" : "0");
  const head = el("tr", {}, el("th", { text: "" }), ...r.nodes.map((n) => el("th", { "data-node": n.name }, n.name,
    el("div", {}, !n.answered || n.error ? badge("down", "no answer") : n.differs ? badge("warn", "differs") : badge("up", n.found ? "same" : "absent (same)")))));
  $("#key-across thead").replaceChildren(head);
  const rows = [];
  const ref = answered.find((n) => !n.differs);
  for (const [label, fn, cls] of keyRows) {
    rows.push(el("tr", {}, el("th", { text: label }), ...r.nodes.map((n) => {
      if (!n.answered || n.error) return el("td", { class: "noanswer", "data-node": n.name, "data-field": fieldOf(label), text: label === "value" ? (n.error || "no answer") : "" });
      const text = n.found ? String(fn(n.entry)) : (label === "value" ? "(no live value)" : "");
      const refText = ref ? (ref.found ? String(fn(ref.entry)) : (label === "value" ? "(no live value)" : "")) : text;
      const td = el("td", { "data-node": n.name, "data-field": fieldOf(label), class: (text !== refText && label !== "expires" ? "differs " : "") + "mono" });
      td.append(cls ? el("span", { class: "value", text }) : text);
      return td;
    })));
  }
  rows.push(el("tr", {}, el("th", { text: "pending" }), ...r.nodes.map((n) => {
    const td = el("td", { "data-node": n.name, "data-field": "pending", class: "mono" + (n.differs ? " differs" : "") });
    for (const p of n.pending || []) {
      const what = p.cancel ? "cancel" : p.delete ? "delete" : JSON.stringify(p.value.length > 40 ? p.value.slice(0, 40) + "…" : p.value);
      td.append(el("div", { text: `${what} at ${p.effective_at} (in ${fmtIn(Date.parse(p.effective_at) - Date.now())})` }));
    }
    return td;
  })));
  $("#key-across tbody").replaceChildren(...rows);
  // The history is read again when this node's entry or pending records
  // change (a write, a delete, an increment, an expiry change, a cancel).
  const self = r.nodes.find((n) => n.self) || {};
  const sig = JSON.stringify([topic, key, self.found && self.entry, self.pending]);
  if (sig !== state.historySig) {
    await refreshHistory(topic, key);
    state.historySig = sig;
  }
}

// historyWhat is what a record of a key's history did.
function historyWhat(h) { return recordWhat(h, h.target && h.target.hlc); }

// tailWhat is what a message of the subscribe stream did, said as a
// record of the history is: the stream names a changed version by its
// origin and seq where the history has its hlc.
function tailWhat(d) {
  const of = d.increment_of || d.expiry_of;
  const binary = d.value == null;
  return recordWhat({
    kind: d.cancel ? "cancel" : d.delete ? "delete" : d.increment_of ? "counter" : d.expiry_of ? "expiry" : "write",
    value: binary ? d.value_base64 : d.value, binary: binary, base64: binary,
    effective_at: d.effective_at, expires_at: d.expires_at, absent: !!(of && of.absent),
  }, of && of.origin ? `${shortOrigin(of.origin)}:${of.seq}` : null);
}

// recordWhat says what record r did (its kind, value, times); version
// names the version an expiry change or an increment applies to.
function recordWhat(r, version) {
  const short = (v) => JSON.stringify(v.length > 60 ? v.slice(0, 60) + "…" : v);
  const on = r.absent ? (version ? ` from 0, after version ${version}` : " from 0 (no value before)") :
    version ? ` of version ${version}` : "";
  switch (r.kind) {
    case "write": return (r.effective_at ? `scheduled for ${r.effective_at}: ` : "") + (r.binary ? (r.base64 ? "base64 " : "hex ") : "") + short(r.value) +
      (r.expires_at ? `, expires at ${r.expires_at}` : "");
    case "delete": return r.effective_at ? `delete scheduled for ${r.effective_at}` : "(deleted)";
    case "cancel": return `cancels what is scheduled for ${r.effective_at}`;
    case "expiry": return (r.expires_at ? `expires at ${r.expires_at}` : "no expiry") + on;
    case "counter": return `+${r.value}${on}`;
  }
  return r.kind;
}

async function refreshHistory(topic, key) {
  const h = await get(`/topics/${enc(topic)}/history/${enc(key)}?limit=50`);
  $("#key-history-note").textContent = `${h.records.length} record${h.records.length === 1 ? "" : "s"}, newest first; ` +
    (h.truncated ? `the last ${h.scanned} messages of ${topic} read: older records may be in the log` : `all of ${topic}'s ${h.scanned} messages retained read`);
  const rows = h.records.map((x) => el("tr", { "data-kind": x.kind, "data-hlc": x.hlc },
    el("td", { class: "num", text: x.offset }), el("td", { text: x.kind }),
    el("td", { class: "mono" }, el("span", { class: "value", text: historyWhat(x) })), el("td", { text: x.tag }),
    el("td", { class: "mono", text: x.hlc }), el("td", { class: "mono", text: shortOrigin(x.origin) }), el("td", { class: "num", text: x.seq }),
    el("td", { class: "mono", title: x.time, text: x.time.slice(11) })));
  $("#key-history tbody").replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 8, class: "sub", text: "no record of this key in the log" }))]));
}

// ---- Time ----
async function refreshTime() {
  const t = await get("/topics");
  const rows = [];
  for (const topic of t.topics.map((x) => x.name)) {
    const p = await get(`/topics/${enc(topic)}/pending?limit=100`);
    for (const r of p.pending) {
      const at = Date.parse(r.effective_at);
      const what = r.cancel ? "cancel" : r.delete ? "delete" : "value " + JSON.stringify((r.value || r.value_base64 || "").slice(0, 40));
      const tr = el("tr", { class: "clickable", "data-topic": topic, "data-key": r.key },
        el("td", { text: topic }), el("td", { class: "mono", text: r.key }), el("td", { class: "mono", text: r.effective_at }),
        el("td", { class: "num countdown", "data-at": at, text: fmtIn(at - Date.now()) }), el("td", { text: what }),
        el("td", { class: "mono", text: r.expires_at || "" }));
      tr.onclick = () => openKey(topic, r.key);
      rows.push(tr);
    }
  }
  rows.sort((a, b) => a.querySelector(".countdown").dataset.at - b.querySelector(".countdown").dataset.at);
  $("#pending tbody").replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 6, class: "sub", text: "nothing pending" }))]));
}

// refreshExpiries lists the soonest expiries of every topic (the route
// walks a topic's keys: read every 5 s, the countdowns tick meanwhile).
async function refreshExpiries() {
  const t = await get("/topics");
  const rows = [], cut = [];
  for (const topic of t.topics.map((x) => x.name)) {
    const x = await get(`/topics/${enc(topic)}/expiries?limit=100`);
    if (x.truncated) cut.push(`${topic} (first ${x.scanned} keys)`);
    for (const r of x.expiries) {
      const at = Date.parse(r.expires_at);
      const value = r.value != null ? r.value : "base64 " + r.value_base64;
      const tr = el("tr", { class: "clickable", "data-topic": topic, "data-key": r.key },
        el("td", { text: topic }), el("td", { class: "mono", text: r.key }), el("td", { class: "mono", text: r.expires_at }),
        el("td", { class: "num countdown", "data-at": at, text: fmtIn(at - Date.now()) }),
        el("td", { class: "mono", text: JSON.stringify(value.length > 40 ? value.slice(0, 40) + "…" : value) }), el("td", { text: r.tag }));
      tr.onclick = () => openKey(topic, r.key);
      rows.push(tr);
    }
  }
  rows.sort((a, b) => a.querySelector(".countdown").dataset.at - b.querySelector(".countdown").dataset.at);
  $("#expiries tbody").replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 6, class: "sub", text: "no value expires" }))]));
  $("#expiries-note").textContent = "The 100 soonest of each topic, read every 5 s. " +
    (cut.length ? "Not every key was looked at in " + cut.join(", ") + ": a sooner expiry may be among the others." : "Every key was looked at.");
}

// ---- Traffic ----
async function refreshRates() {
  const t = await get("/topics");
  const now = Date.now(), rows = [];
  const sel = $("#tail-topic"), chosen = sel.value;
  sel.replaceChildren(...t.topics.map((x) => el("option", { value: x.name, text: x.name })));
  if (chosen) sel.value = chosen;
  for (const x of t.topics) {
    const prev = state.topicsPrev.get(x.name);
    let rate = null;
    if (prev && now > prev.at) rate = Math.max(0, (x.messages - prev.messages) * 1000 / (now - prev.at));
    state.topicsPrev.set(x.name, { at: now, messages: x.messages });
    rows.push(el("tr", {}, el("td", { text: x.name }), el("td", { class: "num", text: x.messages }), el("td", { class: "num", text: fmtRate(rate) }),
      el("td", {}, sparkline(pushSpark("t:" + x.name, rate || 0)))));
  }
  $("#rates tbody").replaceChildren(...rows);
}

function stopTail() {
  if (state.tail) { state.tail.close(); state.tail = null; }
  $("#tail-state").textContent = "";
}

function startTail(ev) {
  ev.preventDefault();
  stopTail();
  const topic = $("#tail-topic").value, prefix = $("#tail-prefix").value, tags = $("#tail-tags").value.trim();
  if (!topic) return;
  // linger: the node gathers a tenth of a second of messages into one
  // write (a tail open in a browser then costs it a wake and a write per
  // tenth of a second, not per message).
  let url = `${API}/topics/${enc(topic)}/subscribe?from=latest&linger=100ms`;
  if (tags) url += "&tags=" + enc(tags);
  const es = new EventSource(url);
  state.tail = es;
  $("#tail-state").textContent = "following " + topic;
  const tbody = $("#tail tbody");
  es.onmessage = (m) => {
    const d = JSON.parse(m.data);
    if (prefix && !d.key.startsWith(prefix)) return;
    const value = tailWhat(d);
    tbody.prepend(el("tr", {}, el("td", { class: "mono", text: d.time }), el("td", { text: d.topic }), el("td", { class: "mono", text: d.key }),
      el("td", { text: d.tag }), el("td", { class: "mono" }, el("span", { class: "value", text: value.slice(0, 200) })), el("td", { class: "mono", text: shortOrigin(d.origin) }), el("td", { class: "num", text: d.seq })));
    while (tbody.children.length > 200) tbody.lastChild.remove();
  };
  es.onerror = () => { $("#tail-state").textContent = "stream interrupted; reconnecting"; };
}

// ---- Groups ----
// refreshGroups shows every member's consumer groups, a row per member
// and group; a member that did not answer is one row saying so.
async function refreshGroups() {
  const g = await get("/fleet/groups");
  const rows = [];
  for (const n of g.nodes) {
    const who = () => el("td", {}, el("b", { text: n.name }), n.self ? el("span", { class: "sub", text: " (this node)" }) : null);
    if (!n.answered || n.error) {
      rows.push(el("tr", { "data-node": n.name, "data-answered": n.answered ? "1" : "0", class: "member-down" }, who(),
        el("td", { colspan: 11 }, badge("down", n.answered ? "not serving" : "no answer"), el("span", { class: "sub", text: n.error }))));
      continue;
    }
    if (!n.groups.length) rows.push(el("tr", { "data-node": n.name, "data-answered": "1" }, who(), el("td", { colspan: 11, class: "sub", text: "no consumer group" })));
    for (const x of n.groups) {
      rows.push(el("tr", { "data-node": n.name, "data-answered": "1", "data-group": x.topic + "/" + x.group }, who(),
        el("td", { text: x.topic }), el("td", { text: x.group }), el("td", { class: "num", text: x.queues }),
        el("td", { class: "mono", text: (x.nodes || []).map((h) => `${shortOrigin(h.node)} (${h.queues.length})`).join(", ") }),
        el("td", { class: "members", text: (x.members || []).map((m) => `${m.id} (${m.inflight})`).join(", ") }),
        el("td", { class: "num", text: x.inflight }), el("td", { class: "num", text: x.backlog }), el("td", { class: "num", text: x.delivered }),
        el("td", { class: "num", text: x.acked }), el("td", { class: "num", text: x.retries }), el("td", { class: "num", text: `${x.dead_letters} (${x.dlq} kept)` })));
    }
  }
  $("#groups tbody").replaceChildren(...rows);
}

// ---- views ----
function show() {
  const [view, topic, key] = (location.hash.slice(1) || "fleet").split("/");
  for (const stop of state.timers) stop();
  state.timers = [];
  if (view !== "traffic") stopTail();
  state.view = view;
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== "view-" + view;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("on", a.dataset.view === view);
  switch (view) {
    case "fleet": every(1000, refreshFleet); break;
    case "keys":
      if (topic && key) { state.key = { topic: decodeURIComponent(topic), key: decodeURIComponent(key) }; $("#key-topic").value = state.key.topic; }
      every(5000, refreshTopics);
      every(1000, refreshKey);
      break;
    case "time": every(1000, refreshTime); every(5000, refreshExpiries); break;
    case "traffic": every(2000, refreshRates); break;
    case "groups": every(2000, refreshGroups); break;
  }
}

function tick() {
  $("#clock").textContent = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  for (const c of document.querySelectorAll(".countdown")) c.textContent = fmtIn(c.dataset.at - Date.now());
}

window.addEventListener("hashchange", show);
window.addEventListener("DOMContentLoaded", () => {
  $("#key-search").addEventListener("submit", (e) => { e.preventDefault(); searchKeys(); });
  $("#tail-form").addEventListener("submit", startTail);
  $("#tail-stop").addEventListener("click", stopTail);
  setInterval(tick, 250);
  show();
});
