"""What a stdio server does not import (docs/decisions/lazy-start-up.md): a real `serve` over stdio answers the
handshake and tools/list, and on its way out names which of the modules only HTTP, OAuth, a PostgreSQL database,
the vault's keyring, a custom tool or a skill's frontmatter need it loaded. None, since they are imported where
they are used. It also counts the full garbage collections start-up ran: none, the collector being off until the
server is ready (server/cli/serving.py `collecting_from_here`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ONLY_WHEN_NEEDED = (
    "jwt",
    "keyring",
    "jsonschema",
    "asyncpg",
    "managed_tools.server.auth.oauth_tokens",
    "managed_tools.server.http.transport",
    "managed_tools.server.auth.oauth",
    "yaml",
    "httptools",
    "uvicorn.protocols.http.httptools_impl",
    "managed_tools.server.http.limits",
)
# Runs the real CLI in this interpreter and reports, at exit, which of those modules it loaded.
PROBE = f"""
import atexit, gc, runpy, sys
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)
atexit.register(lambda: print("LOADED", [m for m in {ONLY_WHEN_NEEDED!r} if m in sys.modules], file=sys.stderr))
atexit.register(lambda: print("FULL COLLECTIONS", len(full), file=sys.stderr))
sys.argv = ["managed-tools", *sys.argv[1:]]
runpy.run_module("managed_tools.server", run_name="__main__")
"""
HANDSHAKE = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
]


def test_stdio_serve_loads_no_oauth_postgres_keyring_or_jsonschema(workspace: Path, tmp_path: Path) -> None:
    where = ["serve", "--workspace", str(workspace), "--data-dir", str(tmp_path / "state")]
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *where],
        input="".join(json.dumps(message) + "\n" for message in HANDSHAKE),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parents[3],
    )
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.returncode == 0, out.stderr
    assert any(a.get("id") == 2 and len(a["result"]["tools"]) > 60 for a in answers), out.stdout[:500]
    assert "LOADED []" in out.stderr, out.stderr[-2000:]
    assert "FULL COLLECTIONS 0" in out.stderr, out.stderr[-2000:]
