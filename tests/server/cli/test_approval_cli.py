"""The approval commands a person runs while an agent waits: lean (no MCP SDK, no catalogue), and `pending` shows
first the requests someone may be waiting on now."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from managed_tools.stores import approvals, sessions, wake_requests
from managed_tools.stores.db import Database

pytestmark = pytest.mark.anyio

# Run as the `managed-tools` script would, then name the modules that process loaded, on a file of its own.
PROBE = (
    "import atexit, os, runpy, sys\n"
    "atexit.register(lambda: open(os.environ['LOADED'], 'w').write('\\n'.join(sys.modules)))\n"
    "sys.argv = ['managed-tools', *sys.argv[1:]]\n"
    "runpy.run_module('managed_tools.server', run_name='__main__')\n"
)
HEAVY = (
    "mcp",
    "mcp_types",
    "managed_tools.server.mcp.app",
    "managed_tools.server.cli.serving",
    "managed_tools.tools.catalogue",
)


class Ran:
    def __init__(self, done: subprocess.CompletedProcess[str], loaded: set[str]) -> None:
        self.returncode, self.stdout, self.stderr, self.loaded = done.returncode, done.stdout, done.stderr, loaded

    def heavy(self) -> list[str]:
        return sorted(m for m in self.loaded if m in HEAVY or m.split(".")[0] in ("mcp", "mcp_types"))


def run(tmp_path: Path, *argv: str, cwd: Path | None = None) -> Ran:
    loaded = tmp_path / f"loaded-{os.urandom(4).hex()}"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        env={**os.environ, "LOADED": str(loaded)},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Ran(done, set(loaded.read_text().split("\n")) if loaded.exists() else set())


async def ask(db: Database, *, tool: str = "bash", kind: Any = "tool_confirmation", wake: str = "closed") -> str:
    """A request as a paused call leaves it, in a session whose wake is `open` (this process), `closed`, or `dead`
    (left open by a server that was killed)."""
    async with db.write() as tx:
        session = await sessions.create_session(tx, "default", owner=sessions.LOCAL_OWNER)
        opened = await sessions.open_wake(tx, session.id, transport="stdio", setup_fingerprint="test")
        if wake == "closed":
            await sessions.close_wake(tx, opened.id)
        elif wake == "dead":
            await tx.execute("UPDATE wakes SET pid = ? WHERE id = ?", (_dead_pid(), opened.id))
        record = await approvals.create(
            tx, session_id=session.id, wake_id=opened.id, kind=kind, tool_name=tool,
            arguments={"command": "make test"}, args_digest=os.urandom(32).hex(), channel="out_of_band",
            question=f"Run {tool}?",
        )  # fmt: skip
    return record.id


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped): no process has it now."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


State = tuple[Path, Path, Database]  # the workspace, its data dir, its state database


@pytest.fixture
async def state(tmp_path: Path) -> State:
    workspace, data_dir = tmp_path / "workspace", tmp_path / "data"
    workspace.mkdir()
    data_dir.mkdir()
    db = await Database.open(data_dir / "state.db", local_dir=data_dir)
    return workspace, data_dir, db


def place(workspace: Path, data_dir: Path) -> tuple[str, ...]:
    return ("--workspace", str(workspace), "--data-dir", str(data_dir))


async def test_pending_approve_deny_and_interrupt_load_neither_the_sdk_nor_the_catalogue(
    tmp_path: Path, state: State
) -> None:
    workspace, data_dir, db = state
    first, second = await ask(db), await ask(db, tool="write")
    await db.close()
    flags = place(workspace, data_dir)
    listed = run(tmp_path, "pending", *flags)
    assert listed.returncode == 0 and first in listed.stdout and second in listed.stdout, listed.stderr
    approved = run(tmp_path, "approve", first, *flags)
    assert approved.returncode == 0 and f"Approved bash (request {first})" in approved.stdout, approved.stderr
    denied = run(tmp_path, "deny", second, "--note", "not now", *flags)
    assert denied.returncode == 0 and "Denied write" in denied.stdout, denied.stderr
    unknown = run(tmp_path, "approve", "0193f2c1-7d4e-7b55-9f3e-2a1c9d8e4b10", *flags)
    assert unknown.returncode == 1 and "No permission request" in unknown.stderr
    stopped = run(tmp_path, "interrupt", *flags)
    assert stopped.returncode == 0 and "Interrupted session" in stopped.stdout, stopped.stderr
    for ran in (listed, approved, denied, unknown, stopped):
        assert "managed_tools.stores.approvals" in ran.loaded  # the probe sees what it loads
        assert ran.heavy() == []


async def test_respond_builds_only_the_custom_tool_it_answers(tmp_path: Path, state: State) -> None:
    workspace, data_dir, db = state
    custom = {"name": "ask_human", "description": "Ask a person.", "outputSchema": {
        "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}  # fmt: skip
    (data_dir / "config.json").write_text(json.dumps({"customTools": [custom]}))
    request = await ask(db, tool="ask_human", kind="custom_tool")
    await db.close()
    wrong = run(tmp_path, "respond", request, "--json", '{"answer": 3}', *place(workspace, data_dir))
    assert wrong.returncode == 1 and "does not match ask_human's output schema" in wrong.stderr
    answered = run(tmp_path, "respond", request, "--json", '{"answer": "yes"}', *place(workspace, data_dir))
    assert answered.returncode == 0 and "Answered ask_human" in answered.stdout, answered.stderr
    assert answered.heavy() == [] and "managed_tools.tools.framework.definitions.custom" in answered.loaded


async def test_a_selection_that_hides_a_tool_hides_its_request(tmp_path: Path, state: State) -> None:
    workspace, data_dir, db = state
    hidden, shown = await ask(db, tool="bash"), await ask(db, tool="memory_write")
    await db.close()
    listed = run(tmp_path, "pending", "--toolsets", "memory", *place(workspace, data_dir))
    assert listed.returncode == 0 and shown in listed.stdout and hidden not in listed.stdout, listed.stderr
    refused = run(tmp_path, "approve", hidden, "--toolsets", "memory", *place(workspace, data_dir))
    assert refused.returncode == 1 and f"No permission request {hidden} exists." in refused.stderr


async def test_pending_lists_first_what_a_client_waits_on_and_marks_the_rest(tmp_path: Path, state: State) -> None:
    workspace, data_dir, db = state
    gone = await ask(db, wake="closed")  # its client disconnected
    killed = await ask(db, wake="dead")  # its server was killed: the wake was never closed
    waiting = await ask(db, wake="open")  # newest, but a client is attached (this test process is its server)
    await db.close()
    listed = json.loads(run(tmp_path, "pending", "--json", *place(workspace, data_dir)).stdout)["requests"]
    assert [(r["id"], r["clientAttached"]) for r in listed] == [(waiting, True), (gone, False), (killed, False)]
    assert all(r["lastActivityAt"] for r in listed)
    text = run(tmp_path, "pending", *place(workspace, data_dir)).stdout
    assert text.index(waiting) < text.index(gone) < text.index(killed)
    blocks = {block.split()[0]: block for block in text.split("\n\n")[1:]}
    assert "no client attached" not in blocks[waiting]
    assert "no client attached (session idle for " in blocks[gone] and "no client attached" in blocks[killed]


def test_secret_loads_the_configuration_but_not_the_sdk(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    listed = run(tmp_path, "secret", "list", "--workspace", str(workspace), "--data-dir", str(tmp_path / "data"))
    assert listed.returncode == 0, listed.stderr
    assert "managed_tools.server.config.serve_config" in listed.loaded and listed.heavy() == []


def test_where_says_where_everything_is_without_the_sdk(tmp_path: Path, state_home: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    shown = run(tmp_path, "where", "--workspace", str(workspace), "--json")
    assert shown.returncode == 0 and shown.heavy() == [], shown.stderr
    report = json.loads(shown.stdout)
    data_dir = Path(report["dataDir"]["path"])
    assert data_dir.is_relative_to(state_home) and not report["dataDir"]["exists"]  # nothing was created
    assert report["config"] == {"path": str(data_dir / "config.json"), "exists": False}
    assert report["userConfig"]["path"] == str(state_home / "config" / "managed-tools" / "config.json")
    assert report["state"] == {"engine": "sqlite", "path": str(data_dir / "state.db"), "exists": False}
    assert report["attachments"]["path"] == str(data_dir / "attachments")
    assert report["vaultKey"]["kind"] == "own" and report["vaultKey"]["keyring"] is None  # the tests' fail keyring
    assert report["vaultKey"]["file"]["path"].startswith(str(state_home / "config" / "managed-tools" / "vault-keys"))
    assert [s["kind"] for s in report["skills"]] == ["workspace-agents", "workspace-claude", "agent-substrate", "user"]
    assert report["caches"]["dir"]
    # every layer, probed on this system: CI's kernel holds them all (sandbox/layers.py says why one is missing)
    assert {layer["layer"] for layer in report["sandbox"]} >= {"files", "view", "processes", "network", "limits"}
    assert all(layer["inForce"] for layer in report["sandbox"]), report["sandbox"]
    text = run(tmp_path, "where", "--workspace", str(workspace)).stdout
    assert f"data dir        {data_dir}  (not there yet)" in text and "user config" in text
    assert "sandbox layers" in text and "processes: in force" in text


def test_where_hides_the_database_password_and_reports_a_broken_config(tmp_path: Path) -> None:
    workspace, data_dir = tmp_path / "workspace", tmp_path / "data"
    workspace.mkdir()
    data_dir.mkdir()
    (data_dir / "config.json").write_text('{"polcy": {}}')
    url = "postgresql://tools:hunter2-secret@db.internal:5432/tools"
    shown = run(tmp_path, "where", *place(workspace, data_dir), "--database", url)
    assert shown.returncode == 0 and "hunter2" not in shown.stdout + shown.stderr
    assert "state database  postgresql://tools:***@db.internal:5432/tools" in shown.stdout
    assert "problem: " in shown.stdout and "unknown key 'polcy' (did you mean 'policy'?)" in shown.stdout


def test_a_workspace_of_slash_is_named_as_the_mistake(tmp_path: Path) -> None:
    for argv in (("serve",), ("serve", "--workspace", "."), ("pending",), ("where",)):
        out = run(tmp_path, *argv, cwd=Path("/"))
        assert out.returncode == 2 and "Traceback" not in out.stderr, (argv, out.stderr)
        assert "The workspace is /," in out.stderr and "pass --workspace DIR" in out.stderr, (argv, out.stderr)
        assert "data dir" not in out.stderr


def test_a_usage_error_is_one_usage_line_and_the_error(tmp_path: Path) -> None:
    for argv, error in (
        (("serve", "--bogus"), "unrecognized arguments: --bogus"),
        (("approve",), "the following arguments are required: ID"),
        (("serve", "--transport", "pigeon"), "argument --transport: invalid choice"),
    ):
        out = run(tmp_path, *argv)
        lines = out.stderr.splitlines()
        assert out.returncode == 2 and len(lines) == 2, out.stderr
        assert lines[0].startswith(f"usage: managed-tools {argv[0]} [options]") and error in lines[1]


def test_each_command_helps_with_its_own_arguments_first_and_an_example(tmp_path: Path) -> None:
    commands = ("serve", "tools", "pending", "approve", "deny", "respond", "interrupt", "where", "migrate", "adopt")
    for command in commands:
        helped = run(tmp_path, command, "--help")
        assert helped.returncode == 0 and "Example:\n  managed-tools " + command in helped.stdout, command
    for command, own in (("approve", "--note"), ("deny", "--note"), ("respond", "--json OBJECT")):
        text = run(tmp_path, command, "--help").stdout
        assert text.index(own) < text.index("--workspace") < text.index("--toolsets"), command
    secret = run(tmp_path, "secret", "set", "--help").stdout
    assert "Example:" in secret and "managed-tools secret set" in secret


def test_serve_in_a_terminal_says_what_it_waits_for(tmp_path: Path) -> None:
    import pty

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    controller, terminal = pty.openpty()
    server = subprocess.Popen(
        [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)],
        stdin=terminal, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stderr is not None
        said, _, _ = select.select([server.stderr], [], [], 60)  # bounded: a silent server fails, never hangs
        line = server.stderr.readline() if said else ""
    finally:
        server.terminate()
        server.wait(timeout=30)
        os.close(controller)
        os.close(terminal)
    assert line.startswith("managed-tools: waiting for an MCP client on stdin (workspace ")
    assert str(workspace) in line and "state.db" in line and "managed-tools where" in line and "README" in line
    piped = subprocess.run(
        [sys.executable, "-m", "managed_tools.server", "serve", "--workspace", str(workspace)],
        input="", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "waiting for an MCP client" not in piped.stderr  # a client's pipe: nothing to say


def test_tools_says_what_its_counts_mean(tmp_path: Path) -> None:
    out = run(tmp_path, "tools", "--toolsets", "files", "--exclude-tools", "write")
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert "tools served" in rows["toolset"]
    assert " 4 of 5 " in rows["files"] and " 0 of 4 " in rows["environment"] and " 0 listed " in rows["mcp"]


def test_an_unknown_config_key_is_named_with_a_near_one(tmp_path: Path) -> None:
    workspace, data_dir = tmp_path / "workspace", tmp_path / "data"
    workspace.mkdir()
    data_dir.mkdir()
    for document, said in (
        ({"mcpServers": {"git": {"comand": "npx"}}}, "mcpServers.git: unknown key 'comand' (did you mean 'command'?)"),
        ({"mcpServers": {"git": {"command": "npx", "arg": []}}}, "unknown key 'arg' (did you mean 'args'?)"),
        ({"skills": {"enabeld": False}}, "skills.enabeld: unknown key 'enabeld' (did you mean 'enabled'?)"),
        ({"polcy": {}}, "unknown key 'polcy' (did you mean 'policy'?)"),
    ):
        (data_dir / "config.json").write_text(json.dumps(document))
        out = run(tmp_path, "tools", *place(workspace, data_dir))
        assert out.returncode == 2 and str(data_dir / "config.json") in out.stderr and said in out.stderr, out.stderr
    (data_dir / "config.json").write_text(json.dumps({"policy": {"bsh": "always_ask"}}))
    out = run(tmp_path, "tools", *place(workspace, data_dir))
    assert out.returncode == 2 and "policy names tools that do not exist: bsh (did you mean 'bash'?)" in out.stderr


def test_the_uvicorn_start_lines_are_not_called_errors(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = subprocess.Popen(
        [sys.executable, "-m", "managed_tools.server", "serve", "--transport", "http", "--port", "0",
         "--workspace", str(workspace), "--log-level", "info"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert server.stderr is not None
        for line in server.stderr:
            lines.append(line)
            if "Uvicorn running" in line or "Application startup complete" in line or len(lines) > 200:
                break
    finally:
        server.terminate()
        server.wait(timeout=30)
    started = [line for line in lines if "startup complete" in line or "Uvicorn running" in line]
    assert started and all(" uvicorn: " in line for line in started), lines
    assert not any("uvicorn.error" in line for line in lines), lines


async def test_wakes_lists_scheduled_wakes_without_the_sdk(tmp_path: Path, state: State) -> None:
    workspace, data_dir, db = state
    async with db.write() as tx:
        session = await sessions.create_session(tx, "default", owner=sessions.LOCAL_OWNER)
        soon = await wake_requests.schedule(
            tx, session.id, reason="Check CI\x1b[2J", due_at="2999-01-01T00:00:00.000Z", priority="high",
            requested_in=None,
        )  # fmt: skip
        done = await wake_requests.schedule(
            tx, session.id, reason="Old", due_at="2000-01-01T00:00:00.000Z", priority="low", requested_in=None
        )
        await wake_requests.cancel(tx, done.id)
    await db.close()
    listed = run(tmp_path, "wakes", *place(workspace, data_dir))
    assert listed.returncode == 0, listed.stderr
    assert soon.id in listed.stdout and done.id not in listed.stdout and "queued" in listed.stdout
    assert "Check CI\\u001b[2J" in listed.stdout and "\x1b" not in listed.stdout  # a control character, escaped
    every = run(tmp_path, "wakes", "--all", "--json", *place(workspace, data_dir))
    shown = json.loads(every.stdout)["wakes"]
    assert [(w["id"], w["status"]) for w in shown] == [(done.id, "cancelled"), (soon.id, "queued")]
    assert listed.heavy() == [] and every.heavy() == []
    nowhere = run(tmp_path, "wakes", "--workspace", str(workspace), "--data-dir", str(tmp_path / "none"))
    assert nowhere.returncode == 1 and "No state database" in nowhere.stderr
