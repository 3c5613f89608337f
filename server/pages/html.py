"""What the pages show: self-contained HTML (no script, no external asset; one stylesheet allowed by its hash)."""

from __future__ import annotations

import base64
import hashlib
from html import escape

from managed_tools.server.pages.board import Page

MAX_SECRET_CHARS = 8192
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


def notice(heading: str, text: str) -> str:
    return document(f"managed-tools: {heading}", f'<h1 id="outcome">{escape(heading)}</h1><p>{escape(text)}</p>')
