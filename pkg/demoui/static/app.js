// botctl demo page: polls the node API (same origin), renders with
// textContent only (a transcript is user input).
"use strict";

const api = "api/";
const $ = (sel) => document.querySelector(sel);
let cfg = null;
let heartbeat = /$^/;
// msgid → {phases: [{phase, at}], contents: Set} : what this page saw of
// each bot message, so the receipt and the progress stay visible after the
// content has moved on.
const seen = new Map();
let lastLeader = new Map();

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function time(s) {
  if (!s || s.startsWith("0001")) return "-";
  return new Date(s).toLocaleTimeString("en-GB", { hour12: false });
}

// tokenFromLink keeps a token given in the page's link (#token=…, as
// `botctl serve` prints it) for this tab and takes it out of the address
// bar: a fragment is never sent to the server, and now not left in history.
function tokenFromLink() {
  const m = location.hash.match(/^#token=([^&]+)/);
  if (!m) return;
  sessionStorage.setItem("botctl-token", decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search);
}

// token is the node API's token the person gave (api.token_file, or the
// data dir's api.token), if any.
function token() { return $("#token").value || sessionStorage.getItem("botctl-token"); }

// authorized adds the token to headers, when the person gave one.
function authorized(headers) {
  const t = token();
  if (t) headers["Authorization"] = "Bearer " + t;
  return headers;
}

// asksToken shows the token field: the node refused a chat request (401).
function asksToken(r) {
  if (r.status !== 401) return false;
  $("#token-row").hidden = false;
  return true;
}

async function getJSON(path) {
  const r = await fetch(api + path, { cache: "no-store", headers: authorized({}) });
  const body = await r.json().catch(() => ({ error: r.status + " " + r.statusText }));
  if (asksToken(r)) throw new Error(body.error || "this node asks for its API token");
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function chat() { return $("#user").value.trim() || "alice"; }

// phase of a bot frame as the user sees it now.
function phase(m) {
  if (m.kind === "markdown") return "pushed";
  if (!m.kind.startsWith("stream")) return m.kind;
  if (m.finished && cfg.truncated_note && m.content.endsWith(cfg.truncated_note)) return "truncated";
  if (m.finished) return "final";
  if (m.expired) return "expired";
  if (m.content === cfg.receipt) return "receipt";
  const last = m.content.split("\n").pop();
  if (heartbeat.test(last)) return "heartbeat";
  return "progress";
}

const labels = {
  receipt: "receipt 回执", progress: "progress 进度", heartbeat: "heartbeat 心跳", final: "final 完成",
  truncated: "truncated 截断", expired: "window expired 窗口已过", pushed: "pushed 推送 (aibot_send_msg)",
  template_card: "card 卡片", update_template_card: "card updated 卡片已更新", image: "image 图片",
  file: "file 文件", voice: "voice 语音", video: "video 视频",
};

// images: image id → object URL (or a pending promise), fetched with the
// token (an <img src> could not send it).
const images = new Map();

function imageEl(id) {
  const img = el("img", { class: "reply-image", alt: "image " + id, "data-image": id });
  let got = images.get(id);
  if (!got) {
    got = fetch(api + "images?" + new URLSearchParams({ id }), { headers: authorized({}) })
      .then((r) => (r.ok ? r.blob() : Promise.reject(new Error(r.statusText))))
      .then((b) => URL.createObjectURL(b))
      .catch(() => { images.delete(id); return ""; });
    images.set(id, got);
  }
  Promise.resolve(got).then((u) => { if (u) img.src = u; });
  return img;
}

// cardOf is the template card a bot message carries (parsed), or null.
function cardOf(m) {
  let raw = m.card;
  if (!raw && (m.kind === "template_card" || m.kind === "update_template_card" || (m.kind === "welcome" && m.content.startsWith("{")))) raw = m.content;
  if (!raw) return null;
  try { return JSON.parse(raw); } catch (e) { return null; }
}

// cardEl draws a card: titles, text and its buttons; a click sends the
// bot a template_card_event (through the simulator), as WeCom does.
function cardEl(card) {
  const t = card.main_title || {};
  const buttons = (card.button_list || []).map((b) => {
    const btn = el("button", { type: "button", class: "card-button", "data-key": b.key || "" }, b.text || b.key || "?");
    btn.addEventListener("click", () => clickCard(card.task_id, b.key));
    return btn;
  });
  return el("div", { class: "card", "data-card-task": card.task_id || "" },
    el("div", { class: "card-type" }, "🗂 " + (card.card_type || "card")),
    t.title ? el("div", { class: "card-title" }, t.title) : null,
    t.desc ? el("div", { class: "card-desc" }, t.desc) : null,
    card.sub_title_text ? el("div", { class: "card-desc" }, card.sub_title_text) : null,
    buttons.length ? el("div", { class: "card-buttons" }, ...buttons) : null);
}

async function clickCard(taskID, key) {
  if (!taskID || !key) return;
  try {
    const r = await fetch(api + "clicks", { method: "POST", headers: authorized({ "Content-Type": "application/json" }),
      body: JSON.stringify({ bot: $("#bot").value, user: chat(), task_id: taskID, event_key: key }) });
    const body = await r.json().catch(() => ({}));
    if (asksToken(r)) throw new Error(body.error || "this node asks for its API token");
    if (!r.ok) throw new Error(body.error || r.statusText);
    pollTranscript();
  } catch (e) {
    showChatError(e.message, "send");
  }
}

// extras are what a bot message shows beyond its text: its images and
// its card; media it sent by upload.
function extras(m) {
  const out = (m.image_ids || []).map(imageEl);
  if (m.images && !(m.image_ids || []).length) out.push(el("div", { class: "file" }, "🖼 " + m.images + " image(s)"));
  const card = cardOf(m);
  if (card) out.push(cardEl(card));
  if (["file", "voice", "video"].includes(m.kind)) out.push(el("div", { class: "file" }, "📎 " + m.kind + " (media_id " + m.content + ")"));
  return out;
}

// thinking splits a stream's content as WeCom shows it: a <think>…</think>
// block at its head is the backend's thinking, folded; the rest is the
// answer. {thinking: null} when there is no block.
function thinking(content) {
  const open = "<think>", close = "</think>";
  const end = content.indexOf(close);
  if (!content.startsWith(open) || end < 0) return { thinking: null, rest: content };
  return { thinking: content.slice(open.length, end), rest: content.slice(end + close.length).replace(/^\n+/, "") };
}

// thinkingEl is the folded thinking of a stream's content, or null.
function thinkingEl(m) {
  if (!m.kind.startsWith("stream")) return null;
  const t = thinking(m.content).thinking;
  if (t === null) return null;
  return el("details", { class: "thinking" }, el("summary", {}, "💭 thinking 思考"), el("div", { class: "thinking-text" }, t));
}

// text is what a bot message says in words ("" for a card or media),
// its thinking left out (thinkingEl).
function text(m) {
  if (cardOf(m) && !m.kind.startsWith("stream")) return "";
  if (["file", "voice", "video", "image"].includes(m.kind)) return "";
  return m.kind.startsWith("stream") ? thinking(m.content).rest : m.content;
}

function track(m) {
  let s = seen.get(m.msgid);
  if (!s) { s = { phases: [], contents: new Set() }; seen.set(m.msgid, s); }
  const p = phase(m);
  const last = s.phases[s.phases.length - 1];
  if (!last || last.phase !== p) s.phases.push({ phase: p, at: new Date(), n: 1 });
  else if (!s.contents.has(m.content)) last.n++;
  s.contents.add(m.content);
  return { p, s };
}

function renderMessages(msgs) {
  const box = $("#messages");
  const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 30;
  const nodes = [];
  for (const m of msgs) {
    if (m.from === "user") {
      const files = (m.media || []).map((f) => el("div", { class: "file" }, "🖼 " + f.kind + " " + f.filename + " (" + f.size + " bytes)"));
      nodes.push(el("div", { class: "msg user", "data-msgid": m.msgid, "data-kind": m.kind }, m.content, ...files));
      continue;
    }
    const { p, s } = track(m);
    const timeline = s.phases.map((x) => labels[x.phase].split(" ")[0] + (x.n > 1 ? " ×" + x.n : "") + " " + x.at.toLocaleTimeString("en-GB", { hour12: false }));
    nodes.push(el("div", { class: "msg bot", "data-msgid": m.msgid, "data-phase": p, "data-finished": String(m.finished), "data-kind": m.kind },
      el("div", { class: "meta" }, el("span", { class: "badge " + p }, labels[p] || p), " ", m.kind, m.reply_to ? "" : " · proactive push"),
      thinkingEl(m), text(m), ...extras(m),
      el("div", { class: "timeline" }, "seen: " + timeline.join(" → "))));
  }
  box.replaceChildren(...nodes);
  if (atBottom) box.scrollTop = box.scrollHeight;
}

async function pollTranscript() {
  if (!cfg || !cfg.chat) return;
  try {
    const t = await getJSON("transcript?" + new URLSearchParams({ bot: $("#bot").value, chat: chat() }));
    renderMessages(t.messages || []);
    if ($("#chat-error").dataset.from === "poll") $("#chat-error").hidden = true;
  } catch (e) {
    showChatError(e.message, "poll");
  }
}

function showChatError(msg, from) {
  const p = $("#chat-error");
  p.textContent = msg;
  p.dataset.from = from;
  p.hidden = false;
}

// base64Of is a file's bytes in standard base64 (an attached image).
async function base64Of(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

async function send(ev) {
  ev.preventDefault();
  const text = $("#text").value;
  const file = $("#image").files[0];
  if (!text.trim() && !file) return;
  const headers = authorized({ "Content-Type": "application/json" });
  $("#send").disabled = true;
  try {
    const msg = { bot: $("#bot").value, user: chat(), text };
    if (file) msg.image = { base64: await base64Of(file), filename: file.name };
    const r = await fetch(api + "messages", { method: "POST", headers, body: JSON.stringify(msg) });
    const body = await r.json().catch(() => ({}));
    if (asksToken(r)) throw new Error(body.error || "this node asks for its API token");
    if (!r.ok) throw new Error(body.error || r.statusText);
    if (!body.delivered) showChatError("posted, but no node holds the bot's connection right now: the message waits in WeCom's history for the gap backfill", "send");
    else $("#chat-error").hidden = true;
    $("#text").value = "";
    $("#image").value = "";
    pollTranscript();
  } catch (e) {
    showChatError(e.message, "send");
  } finally {
    $("#send").disabled = false;
  }
}

function renderCluster(v) {
  for (const k of ["errors", "bots", "nodes", "tasks", "incidents"]) v[k] = v[k] || [];
  $("#updated").textContent = "updated " + time(v.now) + " · served by " + v.node;
  const le = $("#live-error");
  le.hidden = v.errors.length === 0;
  le.textContent = v.errors.join("; ");

  $("#bots tbody").replaceChildren(...v.bots.map((b) => {
    const changed = lastLeader.has(b.id) && lastLeader.get(b.id) !== b.leader;
    lastLeader.set(b.id, b.leader);
    return el("tr", { "data-bot": b.id, "data-leader": b.leader, class: changed ? "changed" : "" },
      el("td", {}, b.id),
      el("td", { class: b.leader ? "leader" : "none" }, b.leader || "(none: electing 选举中)"),
      el("td", {}, b.term || "-"), el("td", {}, time(b.since)));
  }));
  $("#nodes tbody").replaceChildren(...v.nodes.map((n) => el("tr", { "data-node": n.id },
    el("td", {}, n.id + (n.id === v.node ? " (this page)" : "")), el("td", {}, n.address), el("td", {}, time(n.started)),
    el("td", {}, ...Object.entries(n.bots || {}).map(([id, s]) => el("span", { class: "state-" + s.state }, id + "=" + s.state + " "))))));
  const trs = v.bots.flatMap((b) => b.transitions).sort((a, b) => a.at.localeCompare(b.at)).slice(-8).reverse();
  $("#transitions").replaceChildren(...trs.map((t) => el("li", {}, time(t.at) + "  " + t.bot + "  " + t.node + "  " + t.event + (t.term ? " (term " + t.term + ")" : "") + (t.reason ? " — " + t.reason : ""))));
  $("#tasks tbody").replaceChildren(...v.tasks.map((t) => el("tr", { "data-task": t.id },
    el("td", {}, time(t.received)), el("td", {}, t.chat), el("td", {}, t.question),
    el("td", {}, t.exec + (t.attempt > 1 ? " #" + t.attempt : "")), el("td", {}, t.delivery), el("td", {}, (t.node || "-") + (t.tier ? " · " + t.tier : "")))));
  const incs = v.incidents.length ? v.incidents.map((i) => el("tr", { "data-incident": i.id },
    el("td", {}, time(i.detected)), el("td", {}, i.id), el("td", {}, i.bot), el("td", {}, i.level), el("td", {}, i.state + (i.method ? " · " + i.method : "")), el("td", {}, i.reason)))
    : [el("tr", {}, el("td", { colSpan: 6, class: "muted" }, "none 无"))];
  $("#incidents tbody").replaceChildren(...incs);
}

async function pollCluster() {
  try {
    renderCluster(await getJSON("cluster"));
  } catch (e) {
    // The node serving the page stopped: say so, keep the last view.
    const le = $("#live-error");
    le.textContent = "this node's API did not answer (" + e.message + "): open the page on another node";
    le.hidden = false;
  }
}

function loop(fn, ms) {
  const tick = async () => { await fn(); setTimeout(tick, ms); };
  tick();
}

async function start() {
  tokenFromLink();
  try {
    cfg = await getJSON("config");
  } catch (e) {
    $("#live-error").textContent = "cannot read the page's configuration: " + e.message;
    $("#live-error").hidden = false;
    return;
  }
  heartbeat = new RegExp(cfg.heartbeat_pattern);
  $("#served-by").textContent = "page served by node " + cfg.node;
  $("#bot").replaceChildren(...cfg.bots.map((b) => el("option", { value: b }, b)));
  if (!cfg.chat) {
    $("#chat-form").hidden = true;
    showChatError(cfg.chat_off, "config");
  }
  $("#chat-form").addEventListener("submit", send);
  $("#token").addEventListener("change", () => { sessionStorage.setItem("botctl-token", $("#token").value); pollTranscript(); });
  $("#user").addEventListener("change", () => { seen.clear(); pollTranscript(); });
  $("#bot").addEventListener("change", () => { seen.clear(); pollTranscript(); });
  document.body.dataset.ready = "true";
  loop(pollTranscript, 500);
  loop(pollCluster, 1000);
}

start();
