"""An approval binds what it runs (issue 34, item 4, M1): a remembered yes to `python3 run.py` is a yes to run.py as
it was. A `write` to it asks again, in both protocol eras and from a headless wake, and the new question names the
file; an unchanged file keeps the approval; `-m` modules and build files are bound the same way; a path out of the
workspace (`..`, a symbolic link) binds nothing of what lies outside and never crashes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ERAS, data, runtime_with
from mcp import Client
from support.scripted_model import call, say, scripted_model
from test_model_provider import spec, with_key
from test_permissions import answer, client_for
from test_wakes import until_status

from managed_tools.sandbox import landlock, layers
from managed_tools.sandbox.confine import FORCE_ENV
from managed_tools.sandbox.mounts import default_mounts
from managed_tools.sandbox.paths import PathGuard
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.stores import approvals
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.shell.binds import binds

pytestmark = pytest.mark.anyio
needs_landlock = pytest.mark.skipif(landlock.abi() == 0, reason="this kernel offers no Landlock")
SESSION = {"approve": True, "remember": "session"}
RUN = "python3 run.py"
ONE = "print('one')\n"
TWO = "open('ran-two', 'w').write('the model wrote this')\nprint('two')\n"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def run(client: Client, command: str) -> dict[str, Any]:
    return data(await client.call_tool("shell_run", {"command": command}))


async def write(client: Client, path: str, content: str) -> None:
    data(await client.call_tool("write", {"path": path, "content": content}))


async def unasked(rt: Runtime) -> list[dict[str, Any]]:
    async with rt.db.read() as tx:
        found = await tx.fetchall("SELECT payload FROM events WHERE type = 'permission.unasked' ORDER BY seq")
    return [json.loads(row[0]) for row in found]


@needs_landlock
@pytest.mark.parametrize("mode", ERAS)
async def test_a_remembered_run_asks_again_after_write_and_names_the_file(
    runtime: Runtime, workspace: Path, mode: str
) -> None:
    (workspace / "run.py").write_text(ONE)
    seen: list[str] = []
    async with client_for(runtime, mode, elicitation_callback=answer("accept", SESSION, seen)) as client:
        first, unchanged = [await run(client, RUN) for _ in range(2)]
        await write(client, "run.py", TWO)
        rewritten, again = [await run(client, RUN) for _ in range(2)]
    assert [r["stdout"] for r in (first, unchanged, rewritten, again)] == ["one\n", "one\n", "two\n", "two\n"]
    assert len(seen) == 2, seen
    asked, asked_again = seen
    assert f"/workspace/run.py (sha256 {sha(ONE)})" in asked and "what they import, source or read" in asked
    assert "Asked again" not in asked
    assert f"/workspace/run.py (sha256 {sha(TWO)})" in asked_again
    assert "Asked again: this command was approved for the session, and since then /workspace/run.py changed." in (
        asked_again
    )
    audited = await unasked(runtime)
    assert [a["why"] for a in audited] == ["remembered", "remembered"]
    assert [a["binds"][0]["sha256"] for a in audited] == [sha(ONE), sha(TWO)]


@needs_landlock
async def test_a_module_and_a_makefile_are_bound(runtime: Runtime, workspace: Path) -> None:
    (workspace / "pkg" / "mod").mkdir(parents=True)
    (workspace / "pkg" / "__init__.py").write_text("")
    (workspace / "pkg" / "mod" / "__main__.py").write_text("print('module one')\n")
    (workspace / "Makefile").write_text("all:\n\t@echo made one\n")
    seen: list[str] = []
    module, make = "python3 -m pkg.mod", "make"
    async with client_for(runtime, elicitation_callback=answer("accept", SESSION, seen)) as client:
        ran = [await run(client, command) for command in (module, module, make, make)]
        await write(client, "pkg/mod/__main__.py", "print('module two, rewritten')\n")
        await write(client, "Makefile", "all:\n\t@echo made two\n")
        after = [await run(client, command) for command in (module, make)]
        await write(client, "GNUmakefile", "all:\n\t@echo made three\n")  # bound as absent: make would read it first
        created = await run(client, make)
    assert [r["stdout"] for r in ran] == ["module one\n", "module one\n", "made one\n", "made one\n"]
    assert [r["stdout"] for r in (*after, created)] == ["module two, rewritten\n", "made two\n", "made three\n"]
    assert len(seen) == 5, seen
    assert "/workspace/pkg/mod/__main__.py (sha256" in seen[0] and "/workspace/pkg/__init__.py (sha256" in seen[0]
    assert "/workspace/pkg/mod.py (absent: creating it asks again)" in seen[0]
    assert "/workspace/Makefile (sha256" in seen[1] and "/workspace/GNUmakefile (absent" in seen[1]
    assert "since then /workspace/pkg/mod/__main__.py changed." in seen[2]
    assert "since then /workspace/Makefile changed." in seen[3]
    assert "since then /workspace/GNUmakefile changed." in seen[4]


@needs_landlock
async def test_a_path_out_of_the_workspace_binds_nothing_outside(
    runtime: Runtime, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("print('outside')\n")
    (workspace / "link.py").symlink_to(outside)
    seen: list[str] = []
    async with client_for(runtime, elicitation_callback=answer("accept", SESSION, seen)) as client:
        for command in ("python3 ../outside.py", "python3 link.py", f"python3 {outside}"):
            await run(client, command)
            await run(client, command)
        outside.write_text("print('changed outside')\n")
        await run(client, "python3 link.py")
    assert len(seen) == 3, seen  # each asked once; a change outside is not what the approval binds
    not_bound = "(outside the workspace or not a regular file: not bound)"
    assert f"/outside.py {not_bound}" in seen[0] and f"/workspace/link.py {not_bound}" in seen[1]
    assert f"{outside} {not_bound}" in seen[2]
    async with runtime.db.read() as tx:
        bound = [json.loads(row[0]) for row in await tx.fetchall("SELECT binds FROM approvals ORDER BY requested_at")]
    assert [[b["state"] for b in each] for each in bound] == [["outside"]] * 3
    assert all(b.get("sha256") is None for each in bound for b in each)


async def test_a_wake_that_rewrites_a_remembered_script_is_asked_not_run(config: ServeConfig, workspace: Path) -> None:
    """M1 as the issue found it: a scheduled wake, run headless on the configured model, rewrites run.py and runs
    the remembered command. It asks (out of band: nobody is there) and the new code does not run."""
    (workspace / "run.py").write_text(ONE)
    script = [call("write", {"path": "run.py", "content": TWO}), call("shell_run", {"command": RUN}), say("Done.")]
    async with (
        scripted_model("anthropic", script) as model,
        runtime_with(config.model_copy(update={"model": spec(model)})) as rt,
    ):
        await with_key(rt)
        async with client_for(rt, elicitation_callback=answer("accept", SESSION)) as person:
            assert (await run(person, RUN))["stdout"] == "one\n"
            session_id = data(await person.call_tool("session_get_snapshot", {}))["sessionId"]
        async with client_for(rt, session_id=session_id) as later:  # no elicitation: nobody to ask
            await later.call_tool("session_schedule_wake", {"reason": "Tidy up", "inSeconds": 1})
            fired = await until_status(later, "fired")
        async with rt.db.read() as tx:
            waiting = await approvals.list_open(tx, session_id)
    assert not (workspace / "ran-two").exists() and (workspace / "run.py").read_text() == TWO
    (request,) = waiting
    assert fired["result"].startswith(f"Waiting for a person's approval (request {request.id})")
    assert request.status == "pending" and request.tool_name == "shell_run"
    assert "since then /workspace/run.py changed." in request.question
    assert len(model.requests) == 2  # the run stopped at the question: the model was not asked to go on


def test_the_forms_that_name_files_to_run(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "package.json").write_text("{}")
    (workspace / "run.py").write_text(ONE)
    guard = PathGuard(default_mounts(workspace, tmp_path / "data", "agent", {}), private=[tmp_path / "data"])

    def named(command: str, cwd: str = "/workspace") -> tuple[list[str], bool]:
        found, whole = binds(guard, command, cwd)
        return [f"{b.path}:{b.state}" for b in found], whole

    assert named("X=1 time python3 -u -W error run.py --flag | tee out") == (["/workspace/run.py:file"], True)
    assert named(f"python3 {workspace}/run.py") == (["/workspace/run.py:file"], True)  # a host path typed in
    assert named("./run.sh && bin/tool -x") == (["/workspace/run.sh:absent", "/workspace/bin/tool:absent"], True)
    assert named("cd sub && npm test") == (["/workspace/sub/package.json:absent", "/workspace/package.json:file"], True)
    assert named("npm run build", "/workspace/sub")[0][-1] == "/workspace/package.json:file"
    assert named("node --inspect x.js; deno run -A --allow-net=a.b main.ts; bun run y.ts") == (
        ["/workspace/x.js:absent", "/workspace/main.ts:absent", "/workspace/y.ts:absent"],
        True,
    )
    assert named("bash -eu x.sh; sh y.sh; perl -w z.pl; ruby -w w.rb")[0] == [
        "/workspace/x.sh:absent", "/workspace/y.sh:absent", "/workspace/z.pl:absent", "/workspace/w.rb:absent"
    ]  # fmt: skip
    assert named("make -C sub -f build.mk all")[0] == ["/workspace/sub/build.mk:absent"]
    assert named("just test")[0] == ["/workspace/justfile:absent", "/workspace/Justfile:absent",
                                     "/workspace/.justfile:absent"]  # fmt: skip
    assert named("ls -la && git status") == ([], True)  # runs no workspace file by name
    for unread in ("python3 -c 'import run'", "bash -c ./run.sh", "echo $(./x)", "python3 run.py > out",
                   "python3 --weird run.py", "make --eval=x", "python3 'run.py"):  # fmt: skip
        assert named(unread)[1] is False, unread
    assert named("python3 run.py; echo `x`") == ([], False)  # shell syntax anywhere: nothing read
    assert named("python3 ../../etc/passwd") == (["/etc/passwd:outside"], True)
    tool = workspace / ".venv" / "bin" / "tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho tool\n")
    tool.chmod(0o755)
    on_path = f"{tool.parent}:/usr/bin:/bin"
    assert binds(guard, "tool --fast && ls", "/workspace", on_path)[0][0].path == "/workspace/.venv/bin/tool"
    assert len(binds(guard, "tool --fast && ls", "/workspace", on_path)[0]) == 1  # ls is the system's: not bound


@needs_landlock
@pytest.mark.parametrize("forced", ["landlock-only", None])
async def test_under_auto_sandboxed_a_changed_file_is_no_longer_remembered(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forced: str | None
) -> None:
    """Where the sandbox falls short, only the remembered approval ran it: a changed file asks again. Where it
    holds, --auto-sandboxed runs it unasked as it runs any contained command, audited as that (not as the
    remembered approval) with the content that ran."""
    if forced is not None:
        monkeypatch.setenv(FORCE_ENV, forced)
    elif layers.missing(layers.describe()):
        pytest.skip("a sandbox layer is missing on this system (CI has them all)")
    (workspace / "run.py").write_text(ONE)
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data", auto_sandboxed=True)
    seen: list[str] = []
    async with (
        runtime_with(config.model_copy(update={"shell_network": False})) as rt,
        client_for(rt, elicitation_callback=answer("accept", SESSION, seen)) as client,
    ):
        if forced is not None:
            await run(client, RUN)
            await run(client, RUN)
        await write(client, "run.py", TWO)
        ran = await run(client, RUN)
        audited = await unasked(rt)
    assert ran["stdout"] == "two\n"
    if forced is not None:
        assert len(seen) == 2 and "since then /workspace/run.py changed." in seen[1]
        assert [a["why"] for a in audited] == ["remembered"]
    else:
        assert seen == [] and [a["why"] for a in audited] == ["auto_sandboxed"]
        assert audited[0]["binds"] == [{"path": "/workspace/run.py", "state": "file", "sha256": sha(TWO)}]
