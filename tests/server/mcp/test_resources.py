"""Memory stores and the outcome evaluation as MCP resources, with updated notifications in both eras."""

from __future__ import annotations

import json
import warnings
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, Connect, data
from mcp import MCPError
from test_permissions import answer

from managed_tools.stores import sessions
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.substrate.defaults import DEFAULT_FILES

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


def text_of(result: types.ReadResourceResult) -> str:
    content = result.contents[0]
    assert isinstance(content, types.TextResourceContents)
    return content.text


@pytest.mark.parametrize("mode", ERAS)
async def test_list_read_and_templates(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with runtime.db.write() as tx:
        stranger = await sessions.create_session(tx, "beta")
    async with connect(runtime, mode) as client:
        session_id = data(await client.call_tool("memory_write", {"target": "session_state", "content": "hello"}))[
            "sessionId"
        ]
        listed = {r.name: r for r in (await client.list_resources()).resources}
        state = await client.read_resource(listed["session_state"].uri)
        evaluation = json.loads(text_of(await client.read_resource(listed["outcome_evaluation"].uri)))
        notes = await client.read_resource("managed-tools://agent/memory/workspace_memory_notes")
        templates = (await client.list_resource_templates()).resource_templates
        with pytest.raises(MCPError, match="is not available to agent default"):
            await client.read_resource(f"managed-tools://sessions/{stranger.id}/memory/session_state")
        with pytest.raises(MCPError, match="No resource"):
            await client.read_resource("managed-tools://agent/memory/secrets")
        with pytest.raises(MCPError, match="Unknown resource: file:///etc/passwd"):  # not ours, nor an extension's
            await client.read_resource("file:///etc/passwd")
    assert set(listed) == {
        "session_state", "working_buffer", "checkpoint", "shell_state", "workspace_memory",
        "workspace_memory_notes", "outcome_evaluation", "outcome_history", "permission_posture", "shell_history",
        "shell_last_output", "staging_manifest", "agent_setup", "children", "wake_requests",
        *(f"/workspace/agent/{name}" for name in DEFAULT_FILES),  # a new agent's substrate files
    }  # fmt: skip
    assert listed["session_state"].uri == f"managed-tools://sessions/{session_id}/memory/session_state"
    assert text_of(state) == "hello\n" and listed["checkpoint"].mime_type == "application/json"
    assert evaluation["activeOutcome"] is None and evaluation["promotionReady"] is False
    assert text_of(notes) == ""
    assert [t.name for t in templates] == [
        "workspace_file", "substrate_file", "session_memory", "session_outcome_evaluation",
        "session_outcome_history", "session_permission_posture", "session_shell_history",
        "session_shell_last_output", "session_staging_manifest", "session_agent_setup", "session_children",
        "session_wake_requests", "attachment",
    ]  # fmt: skip


async def test_handshake_era_subscription_gets_updates(runtime: Runtime, connect: Connect) -> None:
    seen: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            seen.append(message.params.uri)
            arrived.set()

    async with connect(runtime, "legacy", message_handler=on_message) as client:
        uri = next(r.uri for r in (await client.list_resources()).resources if r.name == "session_state")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated for 2026-07-28
            await client.subscribe_resource(uri)
            with pytest.raises(MCPError, match="No resource"):
                await client.subscribe_resource("managed-tools://nowhere")
        await client.call_tool("memory_write", {"target": "working_buffer", "content": "not watched"})
        await client.call_tool("memory_write", {"target": "session_state", "content": "watched"})
        with anyio.fail_after(5):
            await arrived.wait()
    assert seen == [uri]


async def test_modern_listen_gets_updates_for_agent_memory(runtime: Runtime, connect: Connect) -> None:
    # promoting a learning into the shared MEMORY.md asks a person (F9)
    async with connect(runtime, elicitation_callback=answer("accept", {"approve": True})) as client:
        uri = "managed-tools://agent/memory/workspace_memory"
        events: list[Any] = []
        async with client.listen(resource_subscriptions=[uri]) as subscription:
            await client.call_tool(
                "learning_record",
                {"kind": "lesson", "title": "Read first", "detail": "then write", "promoteToMemory": True},
            )
            with anyio.fail_after(5):
                async for event in subscription:
                    events.append(event)
                    break
        memory_md = text_of(await client.read_resource(uri))
    assert [getattr(e, "uri", None) for e in events] == [uri]
    assert "Read first" in memory_md


async def test_files_as_resources(runtime: Runtime, connect: Connect) -> None:
    workspace = runtime.environment.workspace
    (workspace / "notes.md").write_text("# Notes\n")
    (workspace / "img.bin").write_bytes(b"\x00\x01\x02")
    substrate = next(m.root for m in runtime.guard.mounts if m.kind == "agent_substrate")
    (substrate / "SOUL.md").write_text("be kind\n")
    async with connect(runtime) as client:
        listed = [r.uri for r in (await client.list_resources()).resources]
        notes = await client.read_resource("managed-tools://files/workspace/notes.md")
        soul = await client.read_resource("managed-tools://files/agent/SOUL.md")
        binary = (await client.read_resource("managed-tools://files/workspace/img.bin")).contents[0]
        for bad in ("managed-tools://files/workspace/../../etc/passwd", "managed-tools://files/workspace/%2e%2e/x",
                    "managed-tools://files/workspace/.managed-tools/state.db"):  # fmt: skip
            with pytest.raises(MCPError):
                await client.read_resource(bad)
    assert "managed-tools://files/workspace/notes.md" in listed and "managed-tools://files/agent/SOUL.md" in listed
    assert not [u for u in listed if ".managed-tools" in u]
    assert text_of(notes) == "# Notes\n" and text_of(soul) == "be kind\n"
    assert isinstance(binary, types.BlobResourceContents) and binary.blob == "AAEC"


async def test_file_changes_on_disk_are_notified(runtime: Runtime, connect: Connect) -> None:
    workspace = runtime.environment.workspace
    (workspace / "watched.txt").write_text("v1\n")
    uri = "managed-tools://files/workspace/watched.txt"
    seen: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification) and message.params.uri == uri:
            seen.append(message.params.uri)
            arrived.set()

    async with connect(runtime, "legacy", message_handler=on_message) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.subscribe_resource(uri)
        await anyio.sleep(0.5)  # the watcher starts on the first subscription to a file
        await anyio.Path(workspace / "watched.txt").write_text("v2, written outside the tools\n")
        with anyio.fail_after(10):
            await arrived.wait()
        arrived = anyio.Event()
        data(await client.call_tool("write", {"path": "watched.txt", "content": "v3"}))
        with anyio.fail_after(10):
            await arrived.wait()
    assert len(seen) >= 2
