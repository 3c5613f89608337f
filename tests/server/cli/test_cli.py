"""The command line a person uses: help, version, the catalogue printout."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from managed_tools.server.config.serve_config import ServeConfig

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
    assert "permissionPolicy" not in tool["_meta"]["managed-tools/tool"]  # the default, always_allow, is not sent


def test_invalid_agent_name_is_refused() -> None:
    out = run("serve", "--agent", "../escape")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "argument --agent: " in out.stderr and "letters, digits" in out.stderr and "'../escape'" in out.stderr


def test_approval_wait_must_be_a_positive_finite_number_of_seconds() -> None:
    for value in ("-5", "nan", "inf", "0", "3601", "soon"):
        out = run("serve", "--approval-wait", value)
        assert out.returncode == 2 and "Traceback" not in out.stderr, value
        assert "argument --approval-wait: takes a number of seconds above 0 and at most 3600; not" in out.stderr, value
    accepted = run("serve", "--approval-wait", "0.5", "--agent", "../x")  # parses, then stops at the agent name
    assert "--approval-wait:" not in accepted.stderr and "argument --agent" in accepted.stderr


def test_approval_wait_from_config_json_is_checked_too(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for value in ("-5", "NaN", "Infinity", "0", "3601"):
        (data / "config.json").write_text(f'{{"approvalWaitSeconds": {value}}}')
        out = run("tools", "--workspace", str(tmp_path / "ws"), "--data-dir", str(data))
        assert out.returncode == 2 and "Traceback" not in out.stderr, value
        assert "config.json is invalid at approvalWaitSeconds" in out.stderr, value
        assert "takes a number of seconds above 0 and at most 3600" in out.stderr, value


def test_a_zero_wait_is_refused_not_replaced_by_the_default(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="above 0 and at most 3600"):
        ServeConfig.build(workspace=tmp_path, data_dir=tmp_path.parent / "data", approval_wait_seconds=0)


def test_a_reader_that_stops_early_ends_the_printout_quietly() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written, as with `| head -1` on a long printout
    with os.fdopen(write_end, "wb") as stdout:
        out = subprocess.run([*CLI, "tools"], check=False, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == ""


def test_tools_piped_into_head() -> None:
    out = subprocess.run(
        f"{shlex.join(CLI)} tools --json | head -1",
        shell=True,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout == "{\n" and out.stderr == ""


def test_a_subcommand_error_shows_that_subcommands_usage() -> None:
    out = run("serve", "--bogus")
    assert out.returncode == 2
    assert out.stderr.startswith("usage: managed-tools serve ") and "unrecognized arguments: --bogus" in out.stderr


def test_log_level_is_explained_and_takes_any_case() -> None:
    helped = run("serve", "--help").stdout
    assert "{DEBUG,INFO,WARNING,ERROR}" in helped and "any case" in helped
    for level in ("debug", "Info"):
        out = run("serve", "--log-level", level, "--agent", "../x")  # parses, then stops at the agent name
        assert "argument --log-level" not in out.stderr and "argument --agent" in out.stderr, level
    assert "argument --log-level: invalid choice: 'LOUD'" in run("serve", "--log-level", "loud").stderr


def test_version_does_not_load_the_sdk() -> None:
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['managed-tools', '--version']\n"
        "try:\n"
        "    runpy.run_module('managed_tools.server', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'pydantic', 'anyio', 'starlette'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=False, capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == [f"managed-tools {out.stdout.split()[1]}", "[]"], out


def test_tools_lists_the_catalogue_as_served(tmp_path: Path) -> None:
    # config.json's custom tool and policy, and an extension module's tools, as `serve` would publish them.
    workspace, data_dir = tmp_path / "workspace", tmp_path / "data"
    workspace.mkdir()
    data_dir.mkdir()
    custom = {"name": "ask_weather", "description": "A person reports the weather.", "outputSchema": {"type": "object"}}
    policy = {"environment_describe": "always_ask"}
    (data_dir / "config.json").write_text(json.dumps({"customTools": [custom], "policy": policy}))
    tests = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)])}
    where = ["--workspace", str(workspace), "--data-dir", str(data_dir), "--tools-module", "support.probe_extension"]
    out = subprocess.run(
        [*CLI, "tools", "--json", *where], check=False, capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, out.stderr
    listed = {t["name"]: t["_meta"]["managed-tools/tool"] for t in json.loads(out.stdout)["tools"]}
    assert listed["ask_weather"]["ownership"] == "custom"
    assert {"probe_picture", "probe_chatty", "probe_pick"} <= set(listed)
    assert listed["environment_describe"]["permissionPolicy"] == "always_ask"
    assert "ask_weather" not in run("tools", "--json").stdout  # without them: the built-in catalogue only
    printed = subprocess.run([*CLI, "tools", *where], check=False, capture_output=True, text=True, timeout=60, env=env)
    assert re.search(r"^environment_describe +always_ask ", printed.stdout, re.MULTILINE), printed.stdout
    assert re.search(r"^probe_picture ", printed.stdout, re.MULTILINE), printed.stdout


def test_tools_says_what_is_wrong_with_a_tools_module(tmp_path: Path) -> None:
    out = run("tools", "--data-dir", str(tmp_path / "data"), "--tools-module", str(tmp_path / "absent.py"))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.splitlines() == [
        f"managed-tools: Tools module file {str(tmp_path / 'absent.py')!r} does not exist or is not a file."
    ]
