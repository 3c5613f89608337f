"""permissions_check and permissions_describe report the posture from our state and never change it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Connect, data
from test_permissions import cli, client_for, config, event_types, rt

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]
__all__ = ["config", "rt"]  # fixtures shared with test_permissions


async def test_describe_lists_the_posture(rt: Runtime) -> None:
    async with client_for(rt) as client:
        described = data(await client.call_tool("permissions_describe", {}))
    asking = {t["name"]: t for t in described["alwaysAskTools"]}
    assert set(asking) == {"memory_promote_note", "memory_correct", "resources_promote_to_substrate",
                           "resources_restore_version", "probe_danger", "shell_run", "shell_exec"}  # fmt: skip
    assert asking["probe_danger"]["effects"] == ["session_write"]
    assert described["pendingToolConfirmationRequest"] is None and described["openRequests"] == []
    gated = described["outcomeGatedTools"]
    assert [t["name"] for t in gated] == ["memory_promote_note", "resources_promote_to_substrate",
                                          "resources_restore_version"]  # fmt: skip
    assert all(t["requiresOutcomePass"] for t in gated)
    for field in ("outcomeEvaluation", "nextOutcomeStep", "contextPressure", "readOnlyAlternative", "nextShellStep"):
        assert described[field] is None
    assert described["shellMutationPosture"]["persistentShell"] is None
    assert "managed-tools approve" in described["howToApprove"]


async def test_check_follows_a_request_from_none_to_approved(rt: Runtime, config: ServeConfig) -> None:
    args = {"toolName": "probe_danger", "toolArgs": {"label": "x"}}
    async with client_for(rt) as client:
        before = data(await client.call_tool("permissions_check", args))
        blocked = await client.call_tool("probe_danger", {"label": "x"})
        request_id = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
        pending = data(await client.call_tool("permissions_check", args))
        assert (await cli(config, "approve", request_id)).returncode == 0
        approved = data(await client.call_tool("permissions_check", args))
        other = data(
            await client.call_tool("permissions_check", {"toolName": "probe_danger", "toolArgs": {"label": "y"}})
        )
    assert before["requiresConfirmation"] is True and before["argsValid"] is True
    assert before["approvalState"] == "none" and before["nextStep"]["tool"] == "permissions_describe"
    assert before["argsDigest"] == (blocked.meta or {})["managed-tools/requiresAction"]["argsDigest"]
    assert (
        pending["approvalState"] == "pending" and pending["pendingToolConfirmationRequest"]["requestId"] == request_id
    )
    assert approved["approvalState"] == "approved"
    assert approved["nextStep"] == {
        "tool": "probe_danger",
        "args": {"label": "x"},
        "rationale": f"Request {request_id} is approved: call it with exactly these arguments; it runs once.",
    }
    assert other["approvalState"] == "none"


async def test_check_reports_bad_arguments_and_unknown_tools(rt: Runtime) -> None:
    async with client_for(rt) as client:
        invalid = data(
            await client.call_tool("permissions_check", {"toolName": "probe_danger", "toolArgs": {"label": 1}})
        )
        unknown = data(await client.call_tool("permissions_check", {"toolName": "probe_dangr"}))
        plain = data(await client.call_tool("permissions_check", {"toolName": "session_list"}))
    assert invalid["argsValid"] is False and "field 'label'" in invalid["argumentErrors"]
    assert unknown["exists"] is False and unknown["nearNames"][0] == "probe_danger"
    assert plain["permissionPolicy"] == "always_allow" and plain["nextStep"] is None
    assert plain["readOnly"] is True and plain["interruptBehavior"] == "block"
    assert await event_types(rt) == []  # checking never creates a request


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
