"""The dashboard page: one self-contained document. Its script and stylesheet are inline and allowed by their
hashes; it loads nothing from elsewhere, and it builds every element from data with `textContent` (never markup),
so nothing a tool recorded can become script or markup on the page."""

from __future__ import annotations

import base64
import hashlib
from html import escape

from managed_tools.server.pages import html

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#16181d;background:#f6f7f9}
header{display:flex;align-items:center;gap:1rem;padding:.6rem 1.2rem;background:#1d2330;color:#fff}
header h1{font-size:1.05rem;margin:0}#live{font-size:.85rem;color:#f9c74f}#live.on{color:#90ee90}
main{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:1rem;padding:1rem 1.2rem}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:.6rem .9rem;min-width:0}
section.wide{grid-column:1/-1}h2{font-size:.95rem;margin:.1rem 0 .5rem}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f3f4f6;border:1px solid #d6d9de;padding:.5rem;
margin:.3rem 0;font:12.5px/1.4 ui-monospace,monospace;max-height:22rem;overflow:auto}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.2rem .4rem;border-bottom:1px solid #eceef1;
vertical-align:top}th{font-weight:600;color:#555}code{font:12.5px ui-monospace,monospace}
.card{border:1px solid #e0a800;background:#fffbea;border-radius:6px;padding:.5rem .7rem;margin:.4rem 0}
.card h3{margin:0;font-size:.95rem}button{font:inherit;padding:.25rem .8rem;margin:.2rem .4rem .2rem 0;cursor:pointer}
.muted{color:#667}.empty{color:#889;font-style:italic}ol{list-style:none;margin:0;padding:0;max-height:24rem;overflow:auto}
ol li{padding:.15rem 0;border-bottom:1px solid #f0f1f3;font-size:13px}.t{color:#667;margin-right:.5rem}
.ty{font-weight:600;margin-right:.4rem}.ok{color:#1a7f37}.bad{color:#b42318}svg{display:block;max-width:100%}
.card.orphan{border-color:#b8bec8;background:#f3f4f6}.mark{font-size:.8rem;font-weight:600;border-radius:3px;
padding:0 .35rem;margin-left:.4rem}.mark.live{background:#d7f5dd;color:#14532d}.mark.gone{background:#e4e6ea;color:#444}
h2 label{font-weight:400;font-size:.85rem;margin-left:.6rem}td,li{overflow-wrap:break-word}
@media (max-width:700px){main{grid-template-columns:minmax(0,1fr);padding:.6rem}header{flex-wrap:wrap;gap:.3rem .8rem}
section{padding:.5rem .6rem}tr:has(th){display:none}tr{display:block;border-bottom:1px solid #e3e6ea;padding:.2rem 0}
td{display:inline-block;border:0;padding:.1rem .4rem .1rem 0}button{padding:.45rem .8rem}}
"""

SCRIPT = r"""
"use strict";
const base = location.pathname.replace(/[^/]*$/, "");
const csrf = document.body.dataset.csrf;
let lastSeq = null, pending = null, lastState = null;
const $ = (id) => document.getElementById(id);
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function empty(box, text) { box.replaceChildren(el("p", text, "empty")); }
function short(id) { return id ? id.slice(-8) : ""; }
function clock(t) { return t ? t.slice(11, 19) : ""; }
async function refresh() {
  const r = await fetch(base + "state", {cache: "no-store"});
  if (!r.ok) return;
  const s = await r.json();
  approvals(s.approvals); sessions(s.sessions); versions(s.versions); trend(s.grades); refusals(s.refusals);
  lastState = s;
  if (lastSeq === null) { s.events.forEach(addEvent); lastSeq = s.lastSeq; listen(); }
  document.body.dataset.ready = "1";
}
function soon() { if (!pending) pending = setTimeout(() => { pending = null; refresh(); }, 120); }
function listen() {
  const source = new EventSource(base + "stream?after=" + lastSeq);
  source.addEventListener("event", (m) => { const e = JSON.parse(m.data); lastSeq = e.seq; addEvent(e); soon(); });
  source.onopen = () => { $("live").textContent = "live"; $("live").className = "on"; };
  source.onerror = () => { $("live").textContent = "reconnecting"; $("live").className = ""; };
}
function addEvent(e) {
  const list = $("events"), li = el("li");
  li.dataset.seq = e.seq;
  li.append(el("span", clock(e.created_at), "t"), el("span", e.type, "ty"));
  if (e.tool) li.append(el("code", e.tool), " ");
  li.append(el("span", e.summary || "", "muted"), " ", el("span", "session …" + short(e.session_id), "t"));
  list.prepend(li);
  while (list.children.length > 200) list.lastChild.remove();
}
function approvals(items) {
  const box = $("approvals");
  const gone = items.filter((a) => !a.clientAttached).length;
  $("waiting").textContent = items.length ? "(" + (items.length - gone) + " with a client waiting" +
    (gone ? ", " + gone + " whose client left" : "") + ")" : "";
  if (!items.length) return empty(box, "No call is waiting for a person.");
  box.replaceChildren(...items.map((a) => {
    const card = el("div", null, a.clientAttached ? "card" : "card orphan");
    card.id = "approval-" + a.id;
    card.dataset.attached = a.clientAttached ? "1" : "0";
    const title = el("h3", a.tool);
    title.append(a.clientAttached ? el("span", "client waiting", "mark live")
      : el("span", "client left", "mark gone"));
    card.append(title, el("p", "session …" + short(a.session) + " · asked at " + clock(a.requestedAt) +
      " · via " + a.channel, "muted"));
    if (a.clientAttached && a.channel === "input_required") card.append(el("p", "The client's own form is open " +
      "too: an answer here decides, and the call runs or stops when that form is closed.", "muted"));
    if (!a.clientAttached) card.append(el("p", "No client is attached to this session (idle since " +
      clock(a.lastActivityAt) + "): its model sees the answer only if it comes back.", "muted orphaned"));
    const what = el("pre", a.question); what.className = "what"; card.append(what);
    const note = el("p", "", "muted");
    const choices = a.kind === "tool_confirmation"
      ? [["approve", "Approve once"], ["approve-session", "Approve for this session"], ["deny", "Deny"]]
      : [["deny", "Deny"]];
    for (const [decision, label] of choices) {
      const b = el("button", label); b.dataset.decision = decision;
      b.addEventListener("click", () => answer(a, decision, note));
      card.append(b);
    }
    card.append(note);
    return card;
  }));
}
async function answer(a, decision, note) {
  const body = new URLSearchParams({csrf: csrf, request: a.id, token: a.answerToken, decision: decision});
  const r = await fetch(base + "answer", {method: "POST", body: body});
  const got = await r.json().catch(() => ({message: "refused (" + r.status + ")"}));
  note.textContent = got.message; note.className = r.ok ? "ok" : "bad";
  $("answered").textContent = got.message;
  soon();
}
function idle(s) { return (s.status === "idle" || s.status === "terminated") && !s.wakes.some((w) => !w.ended_at); }
function sessions(all) {
  const box = $("sessions"), every = $("show-idle").checked, items = every ? all : all.filter((s) => !idle(s));
  const hidden = all.length - items.length;
  $("idle-count").textContent = hidden ? hidden + " idle hidden" : "";
  if (!all.length) return empty(box, "No sessions yet.");
  if (!items.length) return empty(box, "No session is active now (" + hidden + " idle: show them above).");
  const table = el("table"), head = el("tr");
  ["session", "title", "status", "last activity", "events", "wakes"].forEach((h) => head.append(el("th", h)));
  table.append(head);
  for (const s of items) {
    const tr = el("tr"), open = s.wakes.filter((w) => !w.ended_at);
    const wakes = open.length ? open.map((w) => w.transport + " since " + clock(w.started_at)).join(", ")
      : (s.wakes.length ? "last ended " + clock(s.wakes[0].ended_at) : "none");
    [el("code", "…" + short(s.id)), el("td", s.title || ""), el("td", s.status, s.status === "requires_action" ?
      "bad" : ""), el("td", s.last_activity_at.replace("T", " ").slice(0, 19)), el("td", s.events),
     el("td", s.wakes.length + " (" + wakes + ")")].forEach((c) => {
      if (c.tagName === "TD") tr.append(c); else { const td = el("td"); td.append(c); tr.append(td); }
    });
    table.append(tr);
  }
  box.replaceChildren(table);
}
function versions(items) {
  const box = $("versions");
  if (!items.length) return empty(box, "No memory or substrate versions yet.");
  const table = el("table");
  for (const v of items.slice(0, 15)) {
    const tr = el("tr"), b = el("button", "diff"), td = el("td");
    b.addEventListener("click", () => diff(v));
    td.append(b);
    tr.append(el("td", v.store), el("td", v.document), el("td", clock(v.created_at)), el("td", v.size_bytes + " B"),
      el("td", v.source), td);
    table.append(tr);
  }
  box.replaceChildren(table);
}
async function diff(v) {
  const r = await fetch(base + "diff?store=" + v.store + "&id=" + encodeURIComponent(v.id));
  const got = await r.json();
  $("diff").textContent = got.diff || got.message;
}
function trend(items) {
  const box = $("trend");
  if (!items.length) return empty(box, "No outcome evaluated yet.");
  const ns = "http://www.w3.org/2000/svg", w = 360, h = 90, pad = 14;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "outcome grades over the latest evaluations");
  const x = (i) => pad + (items.length < 2 ? 0 : i * (w - 2 * pad) / (items.length - 1));
  const y = (level) => h - pad - level * (h - 2 * pad) / 2;
  for (const [level, name] of [[0, "blocked"], [1, "in progress"], [2, "done?"]]) {
    const line = document.createElementNS(ns, "line");
    line.setAttribute("x1", pad); line.setAttribute("x2", w - pad); line.setAttribute("y1", y(level));
    line.setAttribute("y2", y(level)); line.setAttribute("stroke", "#e3e6ea"); svg.append(line);
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", w - pad); label.setAttribute("y", y(level) - 2); label.setAttribute("font-size", "9");
    label.setAttribute("text-anchor", "end"); label.setAttribute("fill", "#889"); label.textContent = name;
    svg.append(label);
  }
  const path = document.createElementNS(ns, "polyline");
  path.setAttribute("points", items.map((g, i) => x(i) + "," + y(g.level)).join(" "));
  path.setAttribute("fill", "none"); path.setAttribute("stroke", "#3b6fd8"); path.setAttribute("stroke-width", "2");
  svg.append(path);
  const colours = ["#b42318", "#c98a00", "#1a7f37"];
  items.forEach((g, i) => {
    const dot = document.createElementNS(ns, "circle");
    dot.setAttribute("cx", x(i)); dot.setAttribute("cy", y(g.level)); dot.setAttribute("r", "3.5");
    dot.setAttribute("fill", colours[g.level]);
    const tip = document.createElementNS(ns, "title");
    tip.textContent = g.status + " (iteration " + g.iteration + ", " + g.evaluated_at + ")";
    dot.append(tip); svg.append(dot);
  });
  const latest = items[items.length - 1].status;
  box.replaceChildren(svg, el("p", items.length + " evaluation(s); latest: " + latest, "muted"));
}
function refusals(all) {
  listed($("refusals"), all.filter((r) => r.kind !== "waiting"), "Nothing refused.");
  listed($("held"), all.filter((r) => r.kind === "waiting"), "No call has waited for approval.");
}
function listed(box, items, none) {
  if (!items.length) return empty(box, none);
  const list = el("ol");
  for (const r of items) {
    const li = el("li");
    li.append(el("span", clock(r.created_at), "t"), el("span", r.kind, r.kind === "waiting" ? "ty" : "ty bad"));
    if (r.tool) li.append(el("code", r.tool), " ");
    li.append(el("span", r.detail, "muted"));
    list.append(li);
  }
  box.replaceChildren(list);
}
$("show-idle").addEventListener("change", () => { if (lastState) sessions(lastState.sessions); });
refresh();
"""


def _hash(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


# The approval pages' headers, with a CSP that allows this page's one script and the requests it makes home.
HEADERS = html.HEADERS | {
    "Content-Security-Policy": (
        f"default-src 'none'; script-src 'sha256-{_hash(SCRIPT)}'; style-src 'sha256-{_hash(CSS)}'; "
        "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
}


def document(csrf: str, where: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>managed-tools dashboard</title><style>{CSS}</style></head>"
        f'<body data-csrf="{escape(csrf)}"><header><h1>managed-tools</h1>'
        f'<span class="muted">{escape(where)}</span><span id="live">connecting</span></header><main>'
        '<section class="wide"><h2>Waiting for you <span id="waiting"></span></h2><div id="approvals"></div>'
        '<p id="answered" class="muted"></p></section>'
        '<section><h2>Live events</h2><ol id="events"></ol></section>'
        '<section><h2>Outcome trend</h2><div id="trend"></div><h2>Refused</h2><div id="refusals"></div>'
        '<h2>Waited for approval</h2><div id="held"></div></section>'
        '<section class="wide"><h2>Sessions and their wakes<label><input type="checkbox" id="show-idle"> show idle'
        '</label> <span id="idle-count" class="muted"></span></h2><div id="sessions"></div></section>'
        '<section class="wide"><h2>Memory and substrate versions</h2><div id="versions"></div>'
        '<pre id="diff">Choose a version to see what it changed.</pre></section>'
        f"</main><script>{SCRIPT}</script></body></html>"
    )
