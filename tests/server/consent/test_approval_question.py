"""A person sees exactly what runs (issue 10, item 5; F6, F7): the whole command made visible, its cwd and env,
bound into the approval, the same text in the client and in `managed-tools pending` / `approve` (a real CLI
process), with no host path and no shell_set_env value shown to the model.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import ERAS, data, error_text
from mcp.client import ClientRequestContext
from test_permissions import ElicitFn, answer, cli, client_for

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import approvals
from managed_tools.stores import shell as shell_store
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.context.what_runs import MAX_SHOWN_COMMAND_CHARS, WhatRuns, secret_looking, visible

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

PAYLOAD = "echo building" + " " * 4200 + "; touch X"
SECRET = "sekrit-value-123"


@pytest.fixture
async def rt(config: ServeConfig, workspace: Path) -> AsyncIterator[Runtime]:
    (workspace / "evil").mkdir()
    (workspace / "evil" / "sitecustomize.py").write_text("import pathlib\npathlib.Path('PLANTED').write_text('x')\n")
    async with open_runtime(config) as runtime:
        yield runtime


def action(result: types.CallToolResult) -> dict[str, Any]:
    found: dict[str, Any] = (result.meta or {})["managed-tools/requiresAction"]
    return found


def changes_env_then(rt: Runtime, reply: ElicitFn) -> ElicitFn:
    """A person who answers while the model's env changes under the question (a real store write)."""

    async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        async with rt.db.write() as tx:
            session = await tx.scalar("SELECT id FROM sessions ORDER BY created_at DESC LIMIT 1")
            state = await shell_store.get_state(tx, session)
            await shell_store.put_state(tx, session, state.model_copy(update={"env": {"PYTHONPATH": "evil"}}))
        return await reply(context, params)

    return on_elicit


# ---- the rendering ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\u202eb", "a⟨U+202E⟩b"),  # bidi override
        ("\u2066x\u2069", "⟨U+2066⟩x⟨U+2069⟩"),  # bidi isolates
        ("a\u200bb\u200dc\u2060d\ufeff", "a⟨U+200B⟩b⟨U+200D⟩c⟨U+2060⟩d⟨U+FEFF⟩"),  # zero-width
        ("a\x00b\x07c\x7f", "a⟨U+0000⟩b⟨U+0007⟩c⟨U+007F⟩"),  # control
        ("a\tb\rc\x1b[2J", "a⟨TAB⟩b⟨CR⟩c⟨ESC⟩[2J"),
        ("a\u2028b\u2029c", "a⟨U+2028⟩b⟨U+2029⟩c"),  # line / paragraph separators
        ("a\u00a0b\u3000c", "a⟨U+00A0⟩b⟨U+3000⟩c"),  # spaces that look like one
        ("x\ufe0fy\U000e0041z\u3164", "x⟨U+FE0F⟩y⟨U+E0041⟩z⟨U+3164⟩"),  # selectors, tags, fillers
        ("say ⟨4 spaces⟩ ⏎", "say ⟨U+27E8⟩4 spaces⟨U+27E9⟩ ⟨U+23CE⟩"),  # our own marks cannot be forged
        ("a" + " " * 4200 + "; touch X", "a⟨4200 spaces⟩; touch X"),
        ("a       b", "a       b"),  # short runs stay as they are
        ("one\ntwo", "one⏎\n  two"),
        ("a\n\n\n\n\nb", "a⟨5 line breaks⟩⏎\n  b"),
        ("naïve café — ok", "naïve café — ok"),
    ],
)
def test_visible_accounts_for_every_character(text: str, shown: str) -> None:
    assert visible(text, "  ") == shown


@pytest.mark.parametrize(
    ("name", "secret"),
    [("API_TOKEN", True), ("GITHUBTOKEN", True), ("DB_PASSWORD", True), ("aws_secret_access_key", True),
     ("SESSION_COOKIE", True), ("PYTHONPATH", False), ("GIT_ASKPASS", False), ("COLOR", False)],
)  # fmt: skip
def test_secret_looking_names(name: str, secret: bool) -> None:
    assert secret_looking(name) is secret


def test_render_refuses_what_cannot_be_shown_whole() -> None:
    what = WhatRuns(runner="once", command="\u202e" * 600, cwd="/workspace", env={})
    with pytest.raises(ValueError, match=f"at most {MAX_SHOWN_COMMAND_CHARS}"):
        what.render()


# ---- F6: the env in the question, and bound by the approval ----------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_f6_question_shows_the_env_and_the_digest_binds_it(rt: Runtime, workspace: Path, mode: str) -> None:
    seen: list[str] = []
    command = {"command": "python3 -c 'print(1+1)'"}
    async with client_for(rt, mode, elicitation_callback=answer("accept", {"approve": True}, seen)) as client:
        data(await client.call_tool("shell_set_env", {"key": "PYTHONPATH", "value": "evil"}))
        data(await client.call_tool("shell_set_env", {"key": "API_TOKEN", "value": SECRET}))
        ran = data(await client.call_tool("shell_run", command))
        checked = data(await client.call_tool("permissions_check", {"toolName": "shell_run", "toolArgs": command}))
        data(await client.call_tool("shell_set_env", {"key": "PYTHONPATH", "value": "elsewhere"}))
        moved = data(await client.call_tool("permissions_check", {"toolName": "shell_run", "toolArgs": command}))
    assert ran["stdout"] == "2\n" and (workspace / "PLANTED").exists()  # the person was shown why
    question = seen[0]
    assert "python3 -c 'print(1+1)'" in question and "Working directory: /workspace" in question
    assert "PYTHONPATH=evil" in question
    assert "API_TOKEN (value not shown" in question and SECRET not in question
    assert checked["argsDigest"] != moved["argsDigest"]  # the digest covers the env


@pytest.mark.sqlite_only(reason="CLI approval, covered on PostgreSQL by test_permissions")
async def test_f6_an_env_change_after_the_approval_needs_a_new_yes(
    rt: Runtime, config: ServeConfig, workspace: Path
) -> None:
    command = {"command": "python3 -c 'print(1+1)'"}
    async with client_for(rt) as client:
        await client.call_tool("shell_set_env", {"key": "PYTHONPATH", "value": "evil"})
        blocked = await client.call_tool("shell_run", command)
        first = action(blocked)
        listed = await cli(config, "pending")
        approved = await cli(config, "approve", first["requestId"])
        await client.call_tool("shell_set_env", {"key": "PYTHONPATH", "value": "elsewhere"})
        drifted = await client.call_tool("shell_run", command)
        await client.call_tool("shell_set_cwd", {"path": "evil"})
        await client.call_tool("shell_set_env", {"key": "PYTHONPATH", "value": "evil"})
        moved = await client.call_tool("shell_run", command)
        await client.call_tool("shell_set_cwd", {"path": "/workspace"})
        ran = data(await client.call_tool("shell_run", command))  # back to exactly what was approved: it runs
    assert "PYTHONPATH=evil" in listed.stdout and "PYTHONPATH=evil" in approved.stdout
    assert action(drifted)["requestId"] != first["requestId"] and action(drifted)["argsDigest"] != first["argsDigest"]
    assert action(moved)["argsDigest"] not in (first["argsDigest"], action(drifted)["argsDigest"])
    assert ran["stdout"] == "2\n"
    async with rt.db.read() as tx:
        consumed = await approvals.get(tx, first["requestId"])
    assert consumed.status == "consumed"


@pytest.mark.parametrize("mode", ERAS)
async def test_an_env_change_while_the_person_is_asked_runs_nothing(rt: Runtime, workspace: Path, mode: str) -> None:
    yes = changes_env_then(rt, answer("accept", {"approve": True}))
    async with client_for(rt, mode, elicitation_callback=yes) as client:
        refused = error_text(await client.call_tool("shell_run", {"command": "python3 -c 'print(1+1)'"}))
    assert not (workspace / "PLANTED").exists()
    assert "changed after the person approved it" in refused or "for another call" in refused


# ---- F7 and invisible characters: the same visible text in the client and the CLI ------------------------------


@pytest.mark.sqlite_only(reason="how the question is shown; no store path of its own")
@pytest.mark.parametrize("mode", ERAS)
async def test_f7_a_payload_behind_spaces_is_visible(
    rt: Runtime, config: ServeConfig, workspace: Path, mode: str
) -> None:
    seen: list[str] = []
    async with client_for(rt, mode, elicitation_callback=answer("decline", None, seen)) as client:
        await client.call_tool("shell_run", {"command": PAYLOAD})
    async with client_for(rt, mode) as client:
        request_id = action(await client.call_tool("shell_run", {"command": PAYLOAD}))["requestId"]
    listed = await cli(config, "pending")
    listed_json = await cli(config, "pending", "--json")
    denied = await cli(config, "deny", request_id)
    assert "echo building⟨4200 spaces⟩; touch X" in seen[0]
    assert "echo building⟨4200 spaces⟩; touch X" in listed.stdout, listed.stdout
    assert "echo building⟨4200 spaces⟩; touch X" in denied.stdout
    assert json.loads(listed_json.stdout)["requests"][0]["arguments"]["command"] == PAYLOAD  # whole, not cut
    assert not (workspace / "X").exists()


@pytest.mark.sqlite_only(reason="how the question is shown; no store path of its own")
@pytest.mark.parametrize("mode", ERAS)
async def test_bidi_and_zero_width_characters_are_escaped(rt: Runtime, config: ServeConfig, mode: str) -> None:
    command = "echo 'safe \u202erm -rf ~\u202c' \u200b\u2066# ok\u2069"
    seen: list[str] = []
    async with client_for(rt, mode, elicitation_callback=answer("decline", None, seen)) as client:
        await client.call_tool("shell_exec", {"command": command})
    async with client_for(rt, mode) as client:
        await client.call_tool("shell_exec", {"command": command})
    listed = await cli(config, "pending")
    listed_json = await cli(config, "pending", "--json")
    for text in (seen[0], listed.stdout, listed_json.stdout):
        assert not any(c in text for c in "\u202e\u202c\u200b\u2066\u2069"), text
    shown = "echo 'safe ⟨U+202E⟩rm -rf ~⟨U+202C⟩' ⟨U+200B⟩⟨U+2066⟩# ok⟨U+2069⟩"
    assert shown in seen[0] and shown in listed.stdout
    assert json.loads(listed_json.stdout)["requests"][0]["arguments"]["command"] == command


@pytest.mark.parametrize("mode", ERAS)
async def test_a_command_too_long_to_show_is_refused_before_asking(rt: Runtime, mode: str) -> None:
    seen: list[str] = []
    async with client_for(rt, mode, elicitation_callback=answer("accept", {"approve": True}, seen)) as client:
        long = error_text(await client.call_tool("shell_run", {"command": "echo " + "a" * MAX_SHOWN_COMMAND_CHARS}))
        hidden = error_text(await client.call_tool("shell_exec", {"command": "echo " + "\u200b" * 600}))
    assert seen == []
    assert f"a permission question shows at most {MAX_SHOWN_COMMAND_CHARS}" in long and "Nobody was asked" in long
    assert "as shown to a person" in hidden
    async with rt.db.read() as tx:
        assert await approvals.list_open(tx) == []


# ---- what the model sees ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_no_host_path_in_the_approval_flow(rt: Runtime, config: ServeConfig, workspace: Path, mode: str) -> None:
    hosts = {str(workspace), str(config.data_dir), str(workspace.parent)}
    texts: list[str] = []
    async with client_for(rt, mode) as client:  # out of band: the model relays the instructions
        blocked = await client.call_tool("shell_run", {"command": "touch made", "cwd": "evil"})
        texts += [error_text(blocked), json.dumps(blocked.meta)]
        for tool, args in [
            ("permissions_describe", {}),
            ("permissions_check", {"toolName": "shell_run", "toolArgs": {"command": "touch made", "cwd": "evil"}}),
        ]:
            texts.append(json.dumps(data(await client.call_tool(tool, args))))
    seen: list[str] = []
    async with client_for(rt, mode, elicitation_callback=answer("decline", None, seen)) as client:
        texts.append(error_text(await client.call_tool("shell_exec", {"command": "touch made", "cwd": "evil"})))
    texts += seen
    assert "managed-tools approve" in texts[0] and len(seen) == 1
    for text in texts:
        assert not any(host in text for host in hosts), text


async def test_set_env_values_are_never_shown(rt: Runtime) -> None:
    async with client_for(rt, elicitation_callback=answer("accept", {"approve": True})) as client:
        data(await client.call_tool("shell_open", {}))
        data(await client.call_tool("shell_set_env", {"key": "API_TOKEN", "value": SECRET}))
        data(await client.call_tool("shell_set_env", {"key": "COLOR", "value": "blue-" + SECRET}))
        data(await client.call_tool("shell_exec", {"command": "true"}))
        too_long = error_text(await client.call_tool("shell_set_env", {"key": "X", "value": SECRET * 600}))
        texts = [too_long]
        reads: list[tuple[str, dict[str, Any]]] = [
            ("shell_history", {"limit": 10}),
            ("shell_describe", {}),
            ("shell_read_last_output", {}),
            ("session_get_events", {"limit": 100}),
            ("session_get_snapshot", {}),
            ("memory_read", {"target": "shell_state"}),
            ("permissions_describe", {}),
        ]
        for tool, args in reads:
            texts.append(json.dumps(data(await client.call_tool(tool, args))))
    for text in texts:
        assert SECRET not in text, text
    assert "API_TOKEN" in texts[2] and "COLOR" in texts[2]  # names are shown
    async with rt.db.read() as tx:
        payloads = [row["payload"] for row in await tx.fetchall("SELECT payload FROM events")]
    assert payloads and not any(SECRET in payload for payload in payloads)
