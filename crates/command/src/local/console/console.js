// The console of `tgq local` (docs/BOT.md, "The console"). Plain script, no build step: it reads the admin
// routes, listens to /admin/console/events and redraws the view on show. Every value from the
// store reaches the page as text nodes, never as markup.
"use strict";

const state = {
  view: "updates",
  selected: null, // [bot, update id] of the update shown in the panel
  chat: "1001",
  bot: "",
  samples: [], // {t, status, latency} from the event stream, for the charts
  status: null,
  refreshing: false,
  again: false,
};

// ---- the page's plumbing -------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const $ = (selector) => document.querySelector(selector);

function notice(text) {
  const box = $("#notice");
  box.textContent = text || "";
  box.hidden = !text;
}

function headers(extra) {
  const all = Object.assign({}, extra);
  const token = sessionStorage.getItem("tgq-admin-token");
  if (token) all.Authorization = "Bearer " + token;
  return all;
}

// Calls an admin route; answers its `result`, or throws an Error carrying the route's reason.
async function call(path, body) {
  const init = body === undefined
    ? { headers: headers() }
    : { method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body) };
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new Error("tgq local does not answer (" + error.message + "): is it still running?");
  }
  let answer = null;
  try { answer = await response.json(); } catch (_) { /* not JSON: said below */ }
  if (response.status === 403) {
    $("#token").hidden = false;
    throw new Error(answer && answer.result ? String(answer.result) : "forbidden");
  }
  if (!answer) throw new Error(path + " answered " + response.status + " without JSON");
  if (!response.ok || !answer.ok) {
    const error = new Error(typeof answer.result === "string" ? answer.result : JSON.stringify(answer.result));
    error.status = response.status;
    error.answer = answer.result;
    throw error;
  }
  return answer.result;
}

function clock(ms) {
  if (!ms) return "";
  const d = new Date(ms);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function ago(ms) {
  if (!ms) return "";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return Math.round(s) + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  return Math.round(s / 3600) + " h ago";
}

function until(ms) {
  const s = Math.max(0, (ms - Date.now()) / 1000);
  return s < 60 ? "in " + s.toFixed(s < 10 ? 1 : 0) + " s" : "in " + Math.round(s / 60) + " min";
}

function badge(status) {
  return el("span", { class: "badge " + status }, status);
}

function pretty(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return String(text); }
}

// ---- the event stream ---------------------------------------------------------------------

// Read with fetch, not EventSource, so that it can carry the admin token.
async function listen() {
  const live = $("#live");
  for (;;) {
    try {
      const response = await fetch("/admin/console/events", { headers: headers() });
      if (response.status === 403) {
        $("#token").hidden = false;
        const answer = await response.json().catch(() => null);
        notice(answer && answer.result ? String(answer.result) : "forbidden");
        live.textContent = "needs the admin token";
        live.className = "";
        await new Promise((resolve) => $("#token").addEventListener("submit", resolve, { once: true }));
        continue;
      }
      live.textContent = "live";
      live.className = "up";
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
          if (data) changed(JSON.parse(data));
        }
      }
    } catch (_) { /* said below, then tried again */ }
    live.textContent = "reconnecting…";
    live.className = "";
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

function changed(event) {
  if (event.status && !event.status.error) {
    state.status = event.status;
    state.samples.push({ t: event.at, status: event.status, latency: event.latency });
    const horizon = event.at - 11 * 60 * 1000;
    while (state.samples.length > 2 && state.samples[0].t < horizon) state.samples.shift();
    figures();
  }
  refresh();
}

function figures() {
  const s = state.status;
  if (!s) return;
  const c = s.counters;
  $("#figures").textContent = [
    c.received + " received", c.processed + " done", c.retried + " retried",
    s.stats.pending + " waiting", s.stats.in_flight + " running", s.stats.dead + " dead letters",
  ].join(" · ");
}

// Redraws the view on show, once at a time: a change during a redraw asks for one more.
async function refresh() {
  if (state.refreshing) { state.again = true; return; }
  state.refreshing = true;
  try {
    do {
      state.again = false;
      await draw();
    } while (state.again);
    notice("");
  } catch (error) {
    notice(error.message);
  } finally {
    state.refreshing = false;
  }
}

async function draw() {
  switch (state.view) {
    case "updates": await drawFeed(); if (state.selected) await drawDetail(); break;
    case "chats": await drawChats(); break;
    case "talk": await drawConversation(); break;
    case "dead": await drawDead(); break;
    case "audit": await drawAudit(); break;
    case "payments": await drawPayments(); break;
    case "charts": drawCharts(); break;
  }
}

// ---- updates ------------------------------------------------------------------------------

function nextRun(update) {
  const q = update.queued;
  if (!q) return "";
  if (q.running) return "running";
  if (q.runs_again_at) return el("span", { "data-until": q.runs_again_at }, until(q.runs_again_at));
  return "";
}

async function drawFeed() {
  const updates = await call("/admin/console/feed?limit=200");
  const body = $("#feed tbody");
  const rows = updates.map((u) => {
    const key = u.bot_id + ":" + u.update_id;
    const on = state.selected && state.selected[0] === u.bot_id && String(state.selected[1]) === String(u.update_id);
    return el("tr", { "data-update": key, class: on ? "on" : "", onclick: () => { location.hash = "#update/" + encodeURIComponent(u.bot_id) + "/" + u.update_id; } },
      el("td", { class: "mono" }, u.update_id), el("td", {}, u.kind, u.says ? el("div", { class: "says" }, u.says) : null), el("td", { class: "mono" }, u.group),
      el("td", {}, badge(u.status)), el("td", {}, u.attempts), el("td", { title: clock(u.received_at) }, ago(u.received_at)),
      el("td", {}, nextRun(u)));
  });
  body.replaceChildren(...rows);
  $("#feed-empty").hidden = updates.length > 0;
}

const WORDS = {
  RECEIVED: "received: stored, not yet on the queue",
  QUEUED: "queued",
  PROCESSING: "running",
  RETRYING: "failed, waiting to retry",
  DONE: "done",
  DEAD: "dead: given up on",
};

function timeline(detail) {
  const items = [el("li", {}, el("span", { class: "mono" }, clock(detail.received_at)), " received by the webhook")];
  if (detail.journal.length) {
    let run = 0;
    for (const entry of detail.journal) {
      const runText = entry.status === "PROCESSING" ? " (run " + entry.attempts + ")" : "";
      if (entry.status === "PROCESSING") run = entry.attempts;
      items.push(el("li", {}, el("span", { class: "mono" }, clock(entry.at)), " ", badge(entry.status), " ", WORDS[entry.status] + runText));
    }
    if (run === 0 && detail.first_attempt_at) items.splice(1, 0, el("li", {}, el("span", { class: "mono" }, clock(detail.first_attempt_at)), " first run"));
  } else {
    if (detail.first_attempt_at) items.push(el("li", {}, el("span", { class: "mono" }, clock(detail.first_attempt_at)), " first run"));
    items.push(el("li", {}, "now ", badge(detail.status), " ", WORDS[detail.status],
      el("span", { class: "hint" }, " (the times of each step are kept while this process runs)")));
  }
  const q = detail.queued;
  if (q && q.runs_again_at) items.push(el("li", {}, "runs again ", el("span", { "data-until": q.runs_again_at }, until(q.runs_again_at)), " (" + q.receives + " receives so far)"));
  if (q && q.running) items.push(el("li", {}, "a worker runs it now (receive " + q.receives + ")"));
  return el("ul", { class: "timeline" }, items);
}

function outcome(action, status) {
  const s = action.state;
  if (!s) return "";
  switch (s.state) {
    case "succeeded": {
      const { kind, ...rest } = s;
      delete rest.state;
      if (kind === "message") return "sent: message " + rest.message_id + " in chat " + rest.chat_id;
      if (kind === "true") return "done";
      if (kind === "json" || kind === "small") return "result " + rest.json;
      return kind + " " + JSON.stringify(rest);
    }
    case "failed": return el("span", { class: "error" }, "refused " + s.code + ": " + s.description);
    case "uncertain": return el("span", { class: "error" }, "uncertain: its earlier outcome is unknown and it is at-most-once, so it was not sent again");
    case "pending": return status === "PROCESSING" ? "in flight" : el("span", { class: "error" }, "uncertain: no result was recorded");
    default: return JSON.stringify(s);
  }
}

async function drawDetail() {
  const [bot, id] = state.selected;
  const panel = $("#detail");
  let detail;
  try {
    detail = await call("/admin/console/update?bot=" + encodeURIComponent(bot) + "&id=" + encodeURIComponent(id));
  } catch (error) {
    panel.replaceChildren(el("p", { class: "error" }, error.message));
    return;
  }
  const parts = [
    el("h2", {}, "Update " + detail.update_id + " ", badge(detail.status)),
    el("p", { class: "hint" }, detail.kind + " · chat " + detail.group + " · bot " + detail.bot_id + " · " + detail.attempts + " run" + (detail.attempts === 1 ? "" : "s")),
    el("h3", {}, "Timeline"), timeline(detail),
  ];
  if (detail.last_error) parts.push(el("h3", {}, "Last error"), el("p", { class: "error", id: "last-error" }, detail.last_error));
  if (detail.burial) {
    parts.push(el("h3", {}, "Dead letter"), el("p", { class: "error" }, detail.burial.reason + " (" + detail.burial.class + "): " + detail.burial.error));
    parts.push(await letterActions(detail));
  }
  parts.push(el("h3", {}, "Calls and steps, in order"));
  parts.push(detail.actions.length
    ? el("table", {}, el("tbody", {}, detail.actions.map((a) => el("tr", {},
      el("td", { class: "mono" }, "#" + a.seq), el("td", {}, a.method), el("td", { class: "hint" }, a.delivery.replace(/_/g, "-")), el("td", {}, outcome(a, detail.status))))))
    : el("p", { class: "hint" }, "none recorded"));
  if (detail.sent.length) parts.push(el("h3", {}, "What the bot sent"), el("div", { class: "phone small" }, detail.sent.map((entry) => botBubble(entry))));
  const changes = detail.journal.filter((e) => e.state);
  parts.push(el("h3", {}, "The chat's state"));
  if (changes.length) {
    for (const change of changes) {
      parts.push(el("p", { class: "hint" }, "before the run that finished at " + clock(change.at)), el("pre", {}, change.state.before === null ? "(none)" : pretty(change.state.before)));
      parts.push(el("p", { class: "hint" }, "after it"), el("pre", {}, pretty(change.state.after)));
    }
  } else if (detail.status === "DONE") {
    parts.push(el("p", { class: "hint" }, detail.journal.length ? "its run did not change the state" : "what its run changed is kept while this process runs"));
  }
  parts.push(el("p", { class: "hint" }, "now"), el("pre", {}, detail.state_now === null ? "(none)" : pretty(detail.state_now)));
  if (detail.timers.length) {
    parts.push(el("h3", {}, "The chat's timers"), el("ul", {}, detail.timers.map((t) => el("li", {}, t.key + " due " + clock(t.due) + " (update " + t.id + ")"))));
  }
  parts.push(el("h3", {}, "The update as received"), el("pre", {}, JSON.stringify(detail.payload, null, 2)));
  panel.replaceChildren(...parts);
}

async function letterActions(detail) {
  let letters = [];
  try { letters = await call("/admin/dlq?limit=1000"); } catch (error) { return el("p", { class: "error" }, error.message); }
  const letter = letters.find((l) => l.bot_id === detail.bot_id && l.update_id === detail.update_id);
  if (!letter) return el("p", { class: "hint" }, "its letter is no longer among the dead letters");
  return el("div", { class: "row" }, el("span", { class: "mono" }, letter.id),
    el("button", { onclick: () => act("replay", letter.id), "data-replay": letter.id }, "Replay"),
    el("button", { class: "danger", onclick: () => act("purge", letter.id), "data-purge": letter.id }, "Purge"));
}

// ---- dead letters and audit ------------------------------------------------------------------

async function act(what, id) {
  if (what === "purge" && !confirm("Purge dead letter " + id + "? Its update will never run.")) return;
  const report = $("#dead-report");
  try {
    const result = await call("/admin/dlq/" + what, { ids: [id], all: false, dry_run: false, force: false, principal: "console" });
    const done = what === "replay" ? "replayed" : "purged";
    const said = result.acted.map((o) => o.id + " " + done + ": " + o.detail).concat(result.skipped.map((o) => o.id + " not " + done + ": " + o.detail));
    if (result.stopped) said.push("stopped: " + result.stopped);
    report.textContent = said.join("; ") || "nothing to do";
    notice("");
  } catch (error) {
    report.textContent = "";
    notice(what + " " + id + ": " + error.message);
  }
  refresh();
}

async function drawDead() {
  const letters = await call("/admin/dlq?limit=500");
  $("#dead tbody").replaceChildren(...letters.map((l) => el("tr", { "data-letter": l.id },
    el("td", { class: "mono" }, l.id),
    el("td", {}, l.update_id === null ? "—" : el("a", { href: "#update/" + encodeURIComponent(l.bot_id) + "/" + l.update_id }, l.update_id)),
    el("td", { class: "mono" }, l.group || ""), el("td", {}, l.reason_text || l.reason), el("td", {}, l.attempts),
    el("td", { class: "error" }, l.error),
    el("td", {}, el("button", { onclick: () => act("replay", l.id), "data-replay": l.id }, "Replay"), " ",
      el("button", { class: "danger", onclick: () => act("purge", l.id), "data-purge": l.id }, "Purge")))));
  $("#dead-empty").hidden = letters.length > 0;
}

async function drawAudit() {
  const entries = await call("/admin/audit?limit=200");
  $("#audit tbody").replaceChildren(...entries.map((e) => el("tr", {},
    el("td", { title: new Date(e.at).toISOString() }, clock(e.at)), el("td", {}, e.principal), el("td", {}, e.action),
    el("td", { class: "mono" }, e.letter_id || ""), el("td", {}, e.update_id === null ? "" : e.update_id), el("td", {}, e.outcome))));
  $("#audit-empty").hidden = entries.length > 0;
}

// ---- payments -----------------------------------------------------------------------------

// A moment as the ledger shows it: the date and the time, local.
function day(ms) {
  if (!ms) return "";
  const d = new Date(ms);
  const pad = (n) => String(n).padStart(2, "0");
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
}

function period(subscription) {
  if (!subscription) return "";
  const until = new Date(subscription.until * 1000).toISOString().slice(0, 10);
  return (subscription.renewal ? "renewal" : "first") + ", until " + until;
}

async function drawPayments() {
  const entries = await call("/admin/payments?limit=500");
  $("#payments tbody").replaceChildren(...entries.map((e) => el("tr", { "data-charge": e.id },
    el("td", { title: new Date(e.recorded_at).toISOString() }, day(e.recorded_at)),
    el("td", {}, e.bot_id), el("td", { class: "mono" }, e.id), el("td", {}, e.user),
    el("td", {}, e.stars), el("td", { class: "mono" }, e.payload),
    el("td", {}, el("a", { href: "#update/" + encodeURIComponent(e.bot_id) + "/" + e.update_id }, e.update_id)),
    el("td", e.refunded_at ? { title: new Date(e.refunded_at).toISOString(), class: "refunded" } : {}, e.refunded_at ? day(e.refunded_at) : ""),
    el("td", {}, period(e.subscription)))));
  $("#payments-empty").hidden = entries.length > 0;
}

// ---- chats --------------------------------------------------------------------------------

function holds(chat) {
  const head = chat.pending[0];
  if (!head) return el("span", { class: "hint" }, "nothing waiting");
  const id = head.update_id === null ? "a message" : "update " + head.update_id;
  if (head.queued.running) return id + " is running";
  if (head.queued.runs_again_at) {
    return el("span", {}, id + " failed (run " + head.attempts + ") and holds the chat until it runs again ",
      el("span", { "data-until": head.queued.runs_again_at }, until(head.queued.runs_again_at)),
      head.last_error ? el("span", { class: "error" }, ": " + head.last_error) : "");
  }
  return id + " is next";
}

async function drawChats() {
  const [chats, waits] = await Promise.all([call("/admin/console/chats"), call("/admin/console/waits")]);
  $("#holds").replaceChildren(...waits.map((w) => el("p", { class: "error", "data-wait": w.bot_id },
    "Telegram's flood control holds every send of bot " + w.bot_id + " until " + clock(w.until) + " (",
    el("span", { "data-until": w.until }, until(w.until)), ")")));
  $("#chats tbody").replaceChildren(...chats.map((c) => el("tr", { "data-chat": c.group },
    el("td", {}, c.bot_id), el("td", { class: "mono" }, /^\d+$/.test(c.group) ? el("a", { href: "#talk/" + c.group + "/" + encodeURIComponent(c.bot_id) }, c.group) : c.group),
    el("td", {}, c.pending.map((p) => p.update_id).join(", ") || "—"), el("td", {}, holds(c)),
    el("td", {}, c.state === null ? el("span", { class: "hint" }, "none") : el("pre", {}, pretty(c.state))))));
  $("#chats-empty").hidden = chats.length > 0;
}

// ---- talking to the bot ---------------------------------------------------------------------

// Telegram's formatting: entities by UTF-16 offsets, or the HTML or MarkdownV2 parse modes.
function formatted(text, params) {
  if (Array.isArray(params.entities) || Array.isArray(params.caption_entities)) return withEntities(text, params.entities || params.caption_entities);
  const mode = String(params.parse_mode || "").toLowerCase();
  if (mode === "html") return fromHtml(text);
  if (mode === "markdownv2" || mode === "markdown") return fromMarkdown(text);
  return [document.createTextNode(text)];
}

const TAGS = { bold: "b", italic: "i", underline: "u", strikethrough: "s", code: "code", pre: "pre", spoiler: "span", blockquote: "blockquote", expandable_blockquote: "blockquote" };

function withEntities(text, entities) {
  const out = [];
  let at = 0;
  const sorted = entities.slice().sort((a, b) => a.offset - b.offset);
  for (const entity of sorted) {
    if (entity.offset < at) continue; // nested entities are drawn flat
    out.push(document.createTextNode(text.slice(at, entity.offset)));
    const inner = text.slice(entity.offset, entity.offset + entity.length);
    let node;
    if (entity.type === "text_link" || entity.type === "url") node = link(entity.url || inner, inner);
    else if (TAGS[entity.type]) node = el(TAGS[entity.type], { class: entity.type === "spoiler" ? "spoiler" : null }, inner);
    else node = document.createTextNode(inner);
    out.push(node);
    at = entity.offset + entity.length;
  }
  out.push(document.createTextNode(text.slice(at)));
  return out;
}

function link(href, text) {
  const safe = /^(https?:|tg:)/i.test(href) ? href : null;
  return safe ? el("a", { href: safe, target: "_blank", rel: "noopener noreferrer" }, text) : document.createTextNode(text);
}

const HTML_TAGS = { b: "b", strong: "b", i: "i", em: "i", u: "u", ins: "u", s: "s", strike: "s", del: "s", code: "code", pre: "pre", blockquote: "blockquote" };

function fromHtml(text) {
  const parsed = new DOMParser().parseFromString("<body>" + text, "text/html").body;
  const copy = (node) => {
    if (node.nodeType === Node.TEXT_NODE) return document.createTextNode(node.textContent);
    if (node.nodeType !== Node.ELEMENT_NODE) return null;
    const name = node.tagName.toLowerCase();
    const children = Array.from(node.childNodes).map(copy);
    if (name === "a") return link(node.getAttribute("href") || "", node.textContent);
    if (name === "tg-spoiler" || (name === "span" && node.classList.contains("tg-spoiler"))) return el("span", { class: "spoiler" }, children);
    if (HTML_TAGS[name]) return el(HTML_TAGS[name], {}, children);
    return el("span", {}, children);
  };
  return Array.from(parsed.childNodes).map(copy).filter(Boolean);
}

function fromMarkdown(text) {
  const marks = [["```", "pre"], ["||", "spoiler"], ["__", "u"], ["*", "b"], ["_", "i"], ["~", "s"], ["`", "code"]];
  const root = { tag: null, children: [] };
  const stack = [root];
  let plain = "";
  const flush = () => { if (plain) { stack[stack.length - 1].children.push(document.createTextNode(plain)); plain = ""; } };
  for (let i = 0; i < text.length;) {
    if (text[i] === "\\" && i + 1 < text.length) { plain += text[i + 1]; i += 2; continue; }
    const link = /^\[([^\]]*)\]\(([^)]*)\)/.exec(text.slice(i));
    if (link) { flush(); stack[stack.length - 1].children.push(linkNode(link[2], link[1])); i += link[0].length; continue; }
    const mark = marks.find(([m]) => text.startsWith(m, i));
    if (mark) {
      flush();
      const top = stack[stack.length - 1];
      if (top.mark === mark[0]) {
        stack.pop();
        stack[stack.length - 1].children.push(el(top.tag === "spoiler" ? "span" : top.tag, { class: top.tag === "spoiler" ? "spoiler" : null }, top.children));
      } else {
        stack.push({ mark: mark[0], tag: mark[1], children: [] });
      }
      i += mark[0].length;
      continue;
    }
    plain += text[i];
    i += 1;
  }
  flush();
  // An entity left open is shown as typed.
  while (stack.length > 1) {
    const open = stack.pop();
    stack[stack.length - 1].children.push(document.createTextNode(open.mark), ...open.children);
  }
  return root.children;
}

function linkNode(href, text) { return link(href, text); }

function markupOf(params) {
  let markup = params.reply_markup;
  if (typeof markup === "string") { try { markup = JSON.parse(markup); } catch (_) { markup = null; } }
  return markup || null;
}

function keyboard(markup, messageId) {
  if (!markup) return null;
  if (Array.isArray(markup.inline_keyboard)) {
    return el("div", { class: "keyboard" }, markup.inline_keyboard.map((row) => el("div", {}, row.map((button) => {
      if (button.url) return link(button.url, button.text);
      if (button.callback_data !== undefined) return el("button", { "data-callback": button.callback_data, onclick: () => press(messageId, button.callback_data) }, button.text);
      return el("button", { disabled: true, title: "not pressable from the console" }, button.text);
    }))));
  }
  if (Array.isArray(markup.keyboard)) {
    return el("div", { class: "keyboard" }, markup.keyboard.map((row) => el("div", {}, row.map((button) => {
      const label = typeof button === "string" ? button : button.text;
      return el("button", { "data-reply": label, onclick: () => say(label) }, label);
    }))));
  }
  return null;
}

// One outbox entry as Telegram would show it.
function botBubble(entry) {
  const params = entry.params || {};
  const text = params.text !== undefined ? String(params.text) : params.caption !== undefined ? String(params.caption) : null;
  const id = params.message_id !== undefined && entry.method.startsWith("edit") ? params.message_id : entry.id;
  const body = [];
  if (entry.method !== "sendMessage") body.push(el("span", { class: "method" }, methodLine(entry.method, params)), text !== null ? el("br") : null);
  if (text !== null) body.push(...formatted(text, params));
  return el("div", { class: "bubble bot", "data-outbox": entry.id }, body, keyboard(markupOf(params), id),
    el("span", { class: "meta" }, clock(entry.at)));
}

function methodLine(method, params) {
  if (method === "answerCallbackQuery") return "answered the button" + (params.text ? ":" : "");
  if (method.startsWith("edit")) return "edited message " + params.message_id;
  if (method.startsWith("send")) return method.slice(4).toLowerCase() || method;
  return method;
}

function userBubble(update) {
  const p = update.payload || {};
  let text;
  if (p.message && p.message.text !== undefined) text = p.message.text;
  else if (p.callback_query) text = "pressed “" + p.callback_query.data + "”";
  else text = update.kind;
  return el("div", { class: "bubble me", "data-update": update.update_id }, text,
    el("span", { class: "meta" }, clock(update.received_at) + " ", badge(update.status),
      update.last_error ? el("span", { class: "error" }, " " + update.last_error) : ""));
}

async function drawConversation() {
  const bot = state.bot ? "&bot=" + encodeURIComponent(state.bot) : "";
  const talk = await call("/admin/console/conversation?chat=" + encodeURIComponent(state.chat) + bot);
  const items = talk.updates.map((u) => ({ t: u.received_at, node: userBubble(u) }))
    .concat(talk.sent.map((s) => ({ t: s.at, node: botBubble(s) })))
    .sort((a, b) => a.t - b.t);
  const box = $("#conversation");
  const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 20;
  box.replaceChildren(...(items.length ? items.map((i) => i.node) : [el("p", { class: "hint" }, "Nothing said in chat " + state.chat + " yet. Write below: it goes through the webhook like a message from Telegram.")]));
  if (atBottom) box.scrollTop = box.scrollHeight;
}

async function send(body) {
  const said = $("#said");
  if (state.bot) body.bot = state.bot;
  try {
    const result = await call("/admin/console/send", body);
    said.textContent = "update " + result.update_id + ": the webhook answered " + result.webhook.status + " " + JSON.stringify(result.webhook.answer);
    notice("");
  } catch (error) {
    said.textContent = "";
    notice("not sent: " + error.message);
  }
  refresh();
}

function say(text) { return send({ chat_id: Number(state.chat), text }); }
function press(messageId, data) { return send({ chat_id: Number(state.chat), message_id: messageId, callback_data: data }); }

// ---- charts -------------------------------------------------------------------------------

function series() {
  const rate = (pick) => (a, b) => Math.max(0, pick(b) - pick(a)) / Math.max(0.001, (b.t - a.t) / 1000);
  return [
    ["Received per second", rate((s) => s.status.counters.received)],
    ["Done per second", rate((s) => s.status.counters.processed)],
    ["Retried and dead per second", rate((s) => s.status.counters.retried + s.status.counters.dead_lettered)],
    ["Waiting on the queue", (a, b) => b.status.stats.pending],
    ["Running", (a, b) => b.status.stats.in_flight],
    ["Dead letters", (a, b) => b.status.stats.dead],
    ["End-to-end latency, ms (mean)", (a, b) => {
      const n = b.latency.count - a.latency.count;
      return n > 0 ? 1000 * (b.latency.sum_seconds - a.latency.sum_seconds) / n : null;
    }],
  ];
}

function drawCharts() {
  const box = $("#charts");
  const samples = state.samples;
  const now = Date.now();
  const from = now - 10 * 60 * 1000;
  box.replaceChildren(...series().map(([title, value]) => {
    const points = [];
    for (let i = 1; i < samples.length; i++) {
      const v = value(samples[i - 1], samples[i]);
      if (v !== null && samples[i].t >= from) points.push([samples[i].t, v]);
    }
    if (points.length) points.push([now, points[points.length - 1][1]]);
    const max = Math.max(1, ...points.map((p) => p[1]));
    const xy = points.map(([t, v]) => ((t - from) / (now - from) * 300).toFixed(1) + "," + (88 - v / max * 84).toFixed(1)).join(" ");
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", "0 0 300 90");
    svg.setAttribute("preserveAspectRatio", "none");
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", xy);
    svg.append(line);
    const last = points.length ? points[points.length - 1][1] : null;
    return el("div", { class: "chart" }, el("h3", {}, title, el("span", { class: "now" }, last === null ? "—" : (Math.round(last * 10) / 10) + " now · max " + Math.round(max * 10) / 10)), svg);
  }));
}

// ---- navigation ---------------------------------------------------------------------------

function route() {
  const parts = location.hash.slice(1).split("/").map(decodeURIComponent);
  let view = parts[0] || "updates";
  if (view === "update" && parts.length === 3) {
    state.selected = [parts[1], parts[2]];
    view = "updates";
  }
  if (view === "talk" && parts[1]) {
    state.chat = parts[1];
    $("#pick").chat.value = parts[1];
    if (parts[2] !== undefined) {
      state.bot = parts[2];
      $("#pick").bot.value = state.bot;
    }
  }
  if (!document.getElementById("view-" + view)) view = "updates";
  state.view = view;
  for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== "view-" + view;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("on", a.dataset.view === view);
  refresh();
}

function start() {
  window.addEventListener("hashchange", route);
  $("#token").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem("tgq-admin-token", event.target.token.value.trim());
    event.target.token.value = "";
    $("#token").hidden = true;
    notice("");
    refresh();
  });
  $("#pick").addEventListener("submit", (event) => {
    event.preventDefault();
    state.bot = event.target.bot.value.trim();
    location.hash = "#talk/" + event.target.chat.value + (state.bot ? "/" + encodeURIComponent(state.bot) : "");
  });
  $("#say").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = event.target.text.value;
    if (!text) return;
    event.target.text.value = "";
    say(text);
  });
  $("#raw").addEventListener("submit", (event) => {
    event.preventDefault();
    let update;
    try { update = JSON.parse(event.target.update.value); } catch (error) { notice("not JSON: " + error.message); return; }
    send({ update });
  });
  // The countdowns tick on their own; the charts slide; nothing is fetched for it.
  setInterval(() => {
    if (document.hidden) return;
    for (const node of document.querySelectorAll("[data-until]")) node.textContent = until(Number(node.dataset.until));
    if (state.view === "charts") drawCharts();
  }, 1000);
  route();
  listen();
}

start();
