"""The command line a person uses: help, version, the catalogue printout."""

from __future__ import annotations

import json
import subprocess
import sys

CLI = [sys.executable, "-m", "managed_tools.server"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_version_and_help() -> None:
    assert run("--version").stdout.startswith("managed-tools ")
    helped = run("serve", "--help")
    assert helped.returncode == 0
    for flag in ("--workspace", "--data-dir", "--agent", "--session"):
        assert flag in helped.stdout
    bare = run()
    assert bare.returncode == 2 and "serve" in bare.stderr and bare.stdout == ""


def test_tools_for_a_person() -> None:
    out = run("tools")
    assert out.returncode == 0
    line = next(row for row in out.stdout.splitlines() if row.startswith("session_get_events"))
    assert "always_allow" in line and "read-only" in line and "event log" in line


def test_tools_as_json() -> None:
    listing = json.loads(run("tools", "--json").stdout)["tools"]
    tool = next(t for t in listing if t["name"] == "environment_describe")
    assert tool["inputSchema"]["type"] == "object"
    assert tool["annotations"]["readOnlyHint"] is True
    assert tool["_meta"]["managed-tools/tool"]["permissionPolicy"] == "always_allow"


def test_invalid_agent_name_is_refused() -> None:
    out = run("serve", "--agent", "../escape")
    assert out.returncode == 2 and "invalid configuration" in out.stderr
