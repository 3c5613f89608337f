"""What the pages show: self-contained HTML (no script, no external asset; one stylesheet allowed by its hash)."""

from __future__ import annotations

import base64
import hashlib
from html import escape
from typing import Any

from managed_tools.server.consent.board import Page

MAX_SECRET_CHARS = 8192
MAX_FIELD_CHARS = 2000
FIELD_PREFIX = "f_"  # a question's form field, apart from the page's own (csrf, decision)
CSS = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;color:#111}"
    "pre{white-space:pre-wrap;word-break:break-all;background:#f4f4f4;border:1px solid #ccc;padding:.75rem}"
    "button{font:inherit;padding:.4rem 1.2rem;margin-right:.75rem}input[type=password]{font:inherit;width:100%}"
    ".fine{color:#555;font-size:.9em}"
)
STYLE_HASH = base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'none'; style-src 'sha256-{STYLE_HASH}'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def document(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>{body}</main></body></html>"
    )


def question(page: Page) -> str:
    csrf = f'<input type="hidden" name="csrf" value="{escape(page.csrf)}">'
    fine = '<p class="fine">This page works once, for this request only, and expires in a few minutes.</p>'
    if page.kind == "question":
        return _question(page, csrf, fine)
    if page.kind == "approval":
        return document(
            "managed-tools: approve an action",
            "<h1>Approve this action?</h1>"
            "<p>A tool call is paused until you answer. It runs only if you approve exactly this:</p>"
            f'<pre id="action">{escape(page.text)}</pre>'
            f'<form method="post">{csrf}'
            '<button id="approve" name="decision" value="approve">Approve once</button>'
            '<button id="approve-session" name="decision" value="approve-session">Approve for this session</button>'
            '<button id="deny" name="decision" value="deny">Deny</button></form>'
            '<p class="fine">"For this session": exactly this command, cwd and environment run again without asking '
            "until the session ends or is interrupted.</p>" + fine,
        )
    return document(
        "managed-tools: enter a secret",
        f"<h1>Enter the secret {escape(page.variable or '')}</h1>"
        f"<p>The tool <code>{escape(page.tool_name)}</code> needs the secret "
        f'<code id="name">{escape(page.variable or "")}</code>:</p>'
        f'<p id="description">{escape(page.text)}</p>'
        f'<form method="post">{csrf}<p><label for="value">Value</label><br>'
        f'<input type="password" id="value" name="value" autocomplete="off" maxlength="{MAX_SECRET_CHARS}"></p>'
        '<button id="provide" name="decision" value="provide">Save</button>'
        '<button id="decline" name="decision" value="decline">Decline</button></form>'
        "<p>The value goes to the server only: neither the client nor the model sees it.</p>" + fine,
    )


def _question(page: Page, csrf: str, fine: str) -> str:
    """An upstream server's question: never our approval (it approves nothing of ours), so it says whose it is."""
    asker = escape(page.tool_name)
    head = (
        f"<h1>The upstream server <code>{asker}</code> asks</h1>"
        f'<pre id="message">{escape(page.text)}</pre>'
        "<p>This question comes from that server, not from managed-tools: your answer goes to it only and approves "
        "nothing else.</p>"
    )
    if page.link is not None:
        link = escape(page.link, quote=True)
        body = (
            f'<p>It asks you to open this address (check it first):</p><pre id="link">{escape(page.link)}</pre>'
            f'<p><a href="{link}" target="_blank" rel="noopener noreferrer">Open it</a></p>'
            f'<form method="post">{csrf}<button id="done" name="decision" value="done">I have done it</button>'
            '<button id="decline" name="decision" value="decline">Decline</button></form>'
        )
    else:
        fields = "".join(_field(name, spec) for name, spec in (page.form or {}).get("properties", {}).items())
        body = (
            f'<form method="post">{csrf}{fields}<button id="submit" name="decision" value="submit">Send</button>'
            '<button id="decline" name="decision" value="decline">Decline</button></form>'
        )
    return document(f"managed-tools: a question from {page.tool_name}", head + body + fine)


def _field(name: str, spec: dict[str, Any]) -> str:
    """One input of a flat form (string, number, integer, boolean, or a choice of strings)."""
    key = escape(FIELD_PREFIX + name, quote=True)
    label = f'<label for="{key}">{escape(str(spec.get("title") or name))}</label>'
    hint = f'<br><span class="fine">{escape(str(spec["description"]))}</span>' if spec.get("description") else ""
    if spec.get("type") == "boolean":
        return f'<p><input type="checkbox" id="{key}" name="{key}" value="true"> {label}{hint}</p>'
    if isinstance(spec.get("enum"), list):
        options = "".join(
            f'<option value="{escape(str(v), quote=True)}">{escape(str(v))}</option>' for v in spec["enum"]
        )
        return f'<p>{label}<br><select id="{key}" name="{key}">{options}</select>{hint}</p>'
    return f'<p>{label}<br><input type="text" id="{key}" name="{key}" maxlength="{MAX_FIELD_CHARS}">{hint}</p>'


def notice(heading: str, text: str) -> str:
    return document(f"managed-tools: {heading}", f'<h1 id="outcome">{escape(heading)}</h1><p>{escape(text)}</p>')
