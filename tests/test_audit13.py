"""Regressions for the bugs issue 13's audit found, each reproduced the way a user met it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from conftest import Connect, data, error_text
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types import RequestParamsMeta
from test_permissions import answer

from managed_tools.sandbox.mounts import Mount, substrate_dir
from managed_tools.sandbox.paths import PathGuard
from managed_tools.server.config import ServeConfig
from managed_tools.server.runtime import open_runtime
from managed_tools.stores import outcomes, sessions
from managed_tools.tools.framework.context import Runtime
from managed_tools.tools.framework.errors import ToolError
from managed_tools.tools.shell.virtual_paths import map_virtual_paths

pytestmark = pytest.mark.anyio

BAD_NAME_MODULE = """
from managed_tools.tools.framework.definition import ToolDefinition
from managed_tools.tools.framework.models import Arguments, WireModel


class Args(Arguments):
    x: int = 1


class Out(WireModel):
    y: int


async def echo(ctx, args):
    return Out(y=args.x)


TOOLS = (
    ToolDefinition(
        name="Bad.Name", title="Bad", description="A user tool with a dotted name.",
        input_model=Args, output_model=Out, handler=echo,
    ),
)
"""


async def test_a_user_tool_with_an_off_pattern_name_only_warns(
    workspace: Path, tmp_path: Path, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    module = tmp_path / "bad_name_tools.py"
    module.write_text(BAD_NAME_MODULE)
    config = ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=(str(module),))
    with caplog.at_level(logging.WARNING):
        async with open_runtime(config) as runtime, connect(runtime) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            result = data(await client.call_tool("Bad.Name", {"x": 3}))
    assert "Bad.Name" in names and result == {"y": 3}
    assert "published anyway because it is a user tool" in caplog.text


# ---- memory_search ------------------------------------------------------------------------------------------


async def test_memory_search_hits_carry_the_sessions_promotion_readiness(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await client.call_tool("outcome_define", {"title": "Ship", "successCriteria": ["heron verified"]})
        await client.call_tool("memory_write", {"target": "session_state", "content": "heron verified today"})
        evaluation = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        found = data(await client.call_tool("memory_search", {"query": "heron"}))
    assert evaluation["status"] == "pass"
    session_hits = [h for h in found["hits"] if h["sessionId"] is not None]
    assert session_hits and all(h["promotionReady"] is True for h in session_hits)
    assert all(h["outcomeStatus"] == "pass" and h["outcomeTrend"] == "first_iteration" for h in session_hits)


async def test_memory_search_drops_texts_that_name_no_query_word(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        await client.call_tool("memory_write", {"target": "working_buffer", "content": "lunch at the café"})
        folded = data(await client.call_tool("memory_search", {"query": "cafe"}))
        exact = data(await client.call_tool("memory_search", {"query": "café"}))
    assert folded["count"] == 0  # the index folds accents, but the text holds no "cafe"
    assert [h["source"] for h in exact["hits"]] == ["working_buffer"]


async def test_memory_search_finds_another_sessions_shell_commands_and_checkpoint(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    (workspace / "osprey_report.txt").write_text("x")
    async with connect(runtime) as first:
        listed = data(await first.call_tool("bash", {"command": "ls"}))
        mine = data(await first.call_tool("session_get_snapshot", {}))["sessionId"]
        checkpoint = data(await first.call_tool("memory_search", {"query": "bash success"}))
    async with connect(runtime) as second:
        found = data(await second.call_tool("memory_search", {"query": "osprey_report.txt"}))
    assert "osprey_report.txt" in listed["stdout"]
    assert [(h["source"], h["sessionId"]) for h in checkpoint["hits"]] == [("checkpoint", mine)]
    assert "source:checkpoint+1" in checkpoint["hits"][0]["reasons"]
    shell_hits = [h for h in found["hits"] if h["source"] == "shell_state"]
    assert [h["sessionId"] for h in shell_hits] == [mine]
    assert "osprey_report.txt" in shell_hits[0]["snippet"]
    assert shell_hits[0]["expansion"] == {
        "tool": "memory_read",
        "args": {"target": "shell_state", "sessionId": mine},
        "rationale": "Read the whole store this snippet comes from.",
    }


# ---- glob -------------------------------------------------------------------------------------------------


async def test_glob_lists_empty_directories_but_not_ignored_ones(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "build" / "cache").mkdir(parents=True)
    (workspace / "build" / "out.o").write_text("x")
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("x")
    (workspace / "src" / "empty").mkdir()
    async with connect(runtime) as client:
        data(await client.call_tool("sandbox_execute", {"name": "mkdir", "input": {"path": "d1/d2"}}))
        d2 = data(await client.call_tool("glob", {"pattern": "d2", "kind": "directory"}))
        every = data(await client.call_tool("glob", {"pattern": "**", "kind": "directory"}))
        both = data(await client.call_tool("glob", {"pattern": "*"}))
        only_files = data(await client.call_tool("glob", {"pattern": "**", "kind": "file"}))
    assert d2["matches"] == ["/workspace/d1/d2"]
    assert every["matches"] == ["/workspace/d1", "/workspace/d1/d2", "/workspace/src", "/workspace/src/empty"]
    assert "/workspace/d1" in both["matches"] and "/workspace/.gitignore" in both["matches"]
    assert only_files["matches"] == ["/workspace/.gitignore", "/workspace/src/a.py"]


# ---- resources_compare_with_substrate -------------------------------------------------------------------------


async def test_a_one_line_diff_preview_shows_a_change(
    runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path
) -> None:
    (substrate_dir(config.data_dir, config.agent) / "SOUL.md").write_text("# Soul\nbe kind\nbe brave\n")
    async with connect(runtime) as client:
        data(await client.call_tool("resources_stage_from_substrate", {"sourcePath": "SOUL.md"}))
        (workspace / "SOUL.md").write_text("# Soul\nbe kind and brief\nbe brave\n")
        one = data(
            await client.call_tool("resources_compare_with_substrate", {"sessionPath": "SOUL.md", "maxPreviewLines": 1})
        )
        whole = data(await client.call_tool("resources_compare_with_substrate", {"sessionPath": "SOUL.md"}))
    assert one["preview"] == ["--- /workspace/agent/SOUL.md", "+++ /workspace/SOUL.md", "@@ -2 +2 @@", "-be kind"]
    assert one["previewTruncated"] and not whole["previewTruncated"]
    assert whole["preview"][3:] == [" # Soul", "-be kind", "+be kind and brief", " be brave"]


# ---- the shell ---------------------------------------------------------------------------------------------------

YES = answer("accept", {"approve": True})


async def test_shell_close_refuses_while_a_command_runs_and_restart_records_it_killed(
    runtime: Runtime, connect: Connect
) -> None:
    async with connect(runtime, "legacy", elicitation_callback=YES) as client:
        started = data(await client.call_tool("shell_exec", {"command": "sleep 20", "waitMs": 100}))
        refused = await client.call_tool("shell_close", {})
        still = data(await client.call_tool("shell_read_command", {"commandId": started["commandId"]}))
        data(await client.call_tool("shell_restart", {}))
        killed = data(await client.call_tool("shell_read_command", {"commandId": started["commandId"]}))
        closed = data(await client.call_tool("shell_close", {}))
    assert started["status"] == "running"
    message = error_text(refused)
    assert f"running command {started['commandId']}" in message and "shell_wait" in message
    assert "shell_restart" in message
    assert still["status"] == "running"
    assert killed["status"] == "killed" and killed["exitCode"] is None and not killed["ok"]
    assert closed["persistentShell"]["status"] == "closed"


async def test_a_shell_wait_cut_short_by_the_clients_deadline_answers_running(
    runtime: Runtime, connect: Connect
) -> None:
    short: RequestParamsMeta = {"managed-tools/timeoutMs": 1500}  # type: ignore[typeddict-unknown-key]
    async with connect(runtime, "legacy", elicitation_callback=YES) as client:
        started = data(
            await client.call_tool("shell_exec", {"command": "sleep 3; echo done", "waitMs": 30_000}, meta=short)
        )
        waited = await client.call_tool(
            "shell_wait", {"commandId": started["commandId"], "timeoutMs": 10_000}, meta=short
        )
        finished = data(await client.call_tool("shell_wait", {"commandId": started["commandId"], "timeoutMs": 10_000}))
    answer_ = data(waited)
    assert started["status"] == "running" and started["nextStep"]["tool"] == "shell_wait"  # a handle, not a kill
    assert answer_["state"] == "running" and answer_["command"]["commandId"] == started["commandId"]
    assert finished["state"] == "completed" and finished["command"]["stdout"] == "done\n"


# ---- outcome_evaluate ------------------------------------------------------------------------------------------


async def test_an_early_stumble_does_not_fail_the_whole_connection(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    (workspace / "notes.md").write_text("old\n")
    async with connect(runtime) as client:
        await client.call_tool("outcome_define", {"title": "Notes", "successCriteria": ["notes rewritten"]})
        assert (await client.call_tool("read", {"path": "nope.txt"})).is_error
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "notes rewritten"}))
        after_stumble = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        data(await client.call_tool("glob", {"pattern": "*.md"}))  # newer work on the workspace
        moved_on = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        assert (await client.call_tool("edit", {"path": "gone.md", "oldText": "a", "newText": "b"})).is_error
        data(await client.call_tool("grep", {"query": "old"}))  # a read does not make up for a failed write
        write_open = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
        data(await client.call_tool("write", {"path": "notes.md", "content": "new\n"}))
        written = data(await client.call_tool("outcome_evaluate", {}))["evaluation"]
    assert after_stumble["status"] == "fail"  # nothing was done on the workspace since
    assert "read" in after_stumble["summary"]
    assert moved_on["status"] == "pass" and moved_on["promotionReady"] is True
    assert write_open["status"] == "fail" and "edit" in write_open["summary"]
    assert written["status"] == "pass"


async def test_virtual_paths_in_shell_commands_are_mapped_through_the_guard(
    runtime: Runtime, connect: Connect, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "docs").mkdir()
    (workspace / "docs" / "guide.md").write_text("hello\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (workspace / "out").symlink_to(outside)
    asked: list[str] = []
    async with connect(runtime, "legacy", elicitation_callback=answer("accept", {"approve": True}, asked)) as client:
        pwd = data(await client.call_tool("shell_run", {"command": "pwd"}))
        listed = data(await client.call_tool("shell_run", {"command": "cd /workspace/docs && ls && pwd"}))
        exec_ = data(
            await client.call_tool("shell_exec", {"command": 'cat "/workspace/docs/guide.md"; cd /workspace/docs'})
        )
        moved = data(await client.call_tool("shell_exec", {"command": "pwd"}))
        look_alike = data(
            await client.call_tool("shell_run", {"command": "echo /workspacefoo '~/workspace' x/workspace"})
        )
        asked_before = len(asked)
        climbing = await client.call_tool("shell_run", {"command": "cat /workspace/../outside/secret.txt"})
        through_link = await client.call_tool("shell_exec", {"command": "cat /workspace/out/secret.txt"})
    assert pwd["stdout"] == "/workspace\n"
    assert listed["stdout"] == "guide.md\n/workspace/docs\n" and listed["exitCode"] == 0
    assert listed["command"] == "cd /workspace/docs && ls && pwd"  # shown as written, never the real path
    assert exec_["stdout"] == "hello\n" and moved["stdout"] == "/workspace/docs\n"
    assert look_alike["stdout"] == "/workspacefoo ~/workspace x/workspace\n"  # not paths of a mount: left alone
    assert "climbs out with '..'" in error_text(climbing) and "Nothing ran" in error_text(climbing)
    assert "resolves outside /workspace" in error_text(through_link)
    assert len(asked) == asked_before  # refused before a person was asked
    assert all(str(workspace) not in text for text in asked)


def _guard(root: Path) -> PathGuard:
    mount = Mount(kind="workspace", mount_path="/workspace", root=root, access="read_write", scope="agent", prompt="")
    return PathGuard([mount], [])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("/workspace.~$ '\"=:;|&()x\n")), max_size=60))
def test_mapping_only_ever_swaps_a_mount_prefix(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    root = tmp_path_factory.getbasetemp() / "mapped-root"
    root.mkdir(exist_ok=True)
    try:
        mapped = map_virtual_paths(_guard(root), text)
    except ToolError as exc:
        assert "Nothing ran" in str(exc)
        return
    assert mapped.replace(str(root.resolve()), "/workspace") == text


def test_a_mount_whose_real_path_a_shell_would_misread_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "my ws"
    root.mkdir()
    with pytest.raises(ToolError, match="cannot be mapped into the command text"):
        map_virtual_paths(_guard(root), "ls /workspace")
    assert map_virtual_paths(_guard(root), "ls docs") == "ls docs"  # nothing to map: runs as written


# ---- session_list --------------------------------------------------------------------------------------------


async def test_session_list_filters_and_sorts_by_outcome(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as passed:
        await passed.call_tool("outcome_define", {"title": "Ship", "successCriteria": ["kestrel landed"]})
        await passed.call_tool("memory_write", {"target": "session_state", "content": "kestrel landed"})
        a = data(await passed.call_tool("outcome_evaluate", {}))["sessionId"]
    async with connect(runtime) as other:
        await other.call_tool("outcome_define", {"title": "Other", "successCriteria": ["x"]})
        b = data(await other.call_tool("outcome_evaluate", {}))["sessionId"]
    async with connect(runtime) as plain:
        c = data(await plain.call_tool("session_get_snapshot", {}))["sessionId"]
    async with connect(runtime) as client:
        await client.call_tool("outcome_define", {"title": "ship", "successCriteria": ["y"]})

        async def listed(**filters: object) -> list[str]:
            found = data(await client.call_tool("session_list", {"includeCurrent": False, **filters}))
            return [s["sessionId"] for s in found["sessions"]]

        everything = data(await client.call_tool("session_list", {"includeCurrent": False}))
        with_outcome = await listed(hasOutcome=True)
        without = await listed(hasOutcome=False)
        ready = await listed(promotionReady=True)
        not_ready = await listed(outcomeStatus="not_ready")
        first = await listed(outcomeTrend="first_iteration")
        recent = await listed(activeMinutes=5)
    by_id = {s["sessionId"]: s for s in everything["sessions"]}
    assert by_id[a]["activeOutcomeTitle"] == "Ship" and by_id[a]["outcomeStatus"] == "pass"
    assert by_id[a]["promotionReady"] is True and by_id[a]["outcomeMatchesCurrent"] is True
    assert by_id[a]["outcomeEvaluatedAt"] is not None
    assert by_id[b]["outcomeStatus"] == "not_ready" and by_id[b]["outcomeMatchesCurrent"] is False
    assert by_id[c]["activeOutcomeTitle"] is None and by_id[c]["promotionReady"] is False
    assert everything["sessions"][0]["sessionId"] == a  # the same outcome as the current one first
    assert sorted(with_outcome) == sorted([a, b]) and without == [c]
    assert ready == [a] and not_ready == [b] and sorted(first) == sorted([a, b])
    assert sorted(recent) == sorted([a, b, c])


# ---- outcome_define ---------------------------------------------------------------------------------------------


async def test_outcome_define_takes_a_session_of_the_same_agent(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        current = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
        async with runtime.db.write() as tx:
            child = await sessions.create_session(tx, "default", parent_id=current)
            stranger = await sessions.create_session(tx, "beta")
        defined = data(
            await client.call_tool(
                "outcome_define", {"sessionId": child.id, "title": "Child work", "successCriteria": ["done"]}
            )
        )
        read = data(await client.call_tool("outcome_read", {"sessionId": child.id}))
        mine = data(await client.call_tool("outcome_read", {}))
        events = data(await client.call_tool("session_get_events", {"sessionId": child.id}))
        refused = await client.call_tool("outcome_define", {"sessionId": stranger.id, "title": "Not mine"})
    assert defined["sessionId"] == child.id and read["activeOutcome"]["title"] == "Child work"
    assert mine["activeOutcome"] is None
    assert [(e["type"], e["wakeId"]) for e in events["events"]] == [("user.define_outcome", None)]
    assert "not available" in error_text(refused)
    async with runtime.db.read() as tx:
        assert await outcomes.active(tx, stranger.id) is None


# ---- permissions_check ------------------------------------------------------------------------------------------


async def test_shell_read_first_alternatives_are_the_references_menu(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("one\n")
    async with connect(runtime) as client:

        async def menu(tool: str, args: dict[str, object] | None = None) -> list[tuple[str, dict[str, object]]]:
            check = data(await client.call_tool("permissions_check", {"toolName": tool, "toolArgs": args}))
            return [(s["tool"], s["args"]) for s in check["shellReadFirstAlternatives"]]

        cat = await menu("shell_run", {"command": "cat notes.txt"})
        set_env = await menu("shell_set_env", {"key": "A", "value": "b"})
        read = await menu("read", {"path": "notes.txt"})
        data(await client.call_tool("bash", {"command": "ls"}))
        after = await menu("shell_close")
        described = data(await client.call_tool("permissions_describe", {}))
    pwd = ("bash", {"command": "pwd", "cwd": "/workspace"})
    assert cat == [("read", {"path": "/workspace/notes.txt"}), ("shell_describe", {}), pwd]
    assert set_env == [("shell_describe", {}), pwd] and read == []
    assert after == [("shell_describe", {}), pwd, ("shell_read_last_output", {})]
    assert [s["tool"] for s in described["shellReadFirstAlternatives"]] == [
        "shell_describe",
        "bash",
        "shell_read_last_output",
    ]
