"""The setup contract recorded at attach (agent_describe_setup, agent_compare_setup), vault_list, and
session_describe_context: real runtimes on one data dir, a real server process, a real MCP client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ERAS, Connect, data, error_text
from test_stdio import stdio_client

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import sessions
from managed_tools.tools.environment.setup import SECTIONS
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]
SECRET = "vault-secret-3f9a1c"


@pytest.mark.parametrize("mode", ERAS)
async def test_the_setup_is_recorded_at_attach(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        described = data(await client.call_tool("agent_describe_setup", {}))
        env = data(await client.call_tool("environment_describe", {}))
        same = data(await client.call_tool("agent_compare_setup", {}))
    async with runtime.db.read() as tx:
        stored = await tx.fetchall("SELECT agent_id, fingerprint FROM agent_setups")
    setup = described["agentSetup"]
    assert described["available"] and described["reason"] is None
    assert described["fingerprint"] == setup["fingerprint"] == env["agentSetupFingerprint"]
    assert [(r["agent_id"], r["fingerprint"]) for r in stored] == [("default", setup["fingerprint"])]
    assert setup["resourceContract"]["fingerprint"] == env["resourceContractFingerprint"]
    assert setup["skills"] == {"fingerprint": setup["skills"]["fingerprint"], "count": 0, "skills": []}
    assert len(setup["skills"]["fingerprint"]) == 64
    assert setup["environment"]["serverVersion"] == env["serverVersion"]
    assert "shell_run" in setup["policy"]["alwaysAsk"] and "read" not in setup["policy"]["alwaysAsk"]
    assert setup["tools"]["count"] == len(setup["tools"]["tools"]) == len(runtime.registry.names())
    assert {"agent_describe_setup", "session_describe_context", "vault_list"} <= {
        t["name"] for t in setup["tools"]["tools"]
    }
    assert described["resourceUri"] == f"managed-tools://sessions/{described['sessionId']}/agent/setup"
    assert same["sameSetup"] and same["changedSections"] == [] and same["changedTools"] == []


async def test_a_policy_change_between_sessions_shows_as_drift(workspace: Path, connect: Connect) -> None:
    # The first session runs in a real server process, the second in-process with `write` gated: one data dir.
    async with stdio_client(workspace, "--ask", "write") as client:
        first = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
    config = ServeConfig.build(workspace=workspace, data_dir=None)
    async with open_runtime(config) as runtime, connect(runtime) as client:
        compared = data(await client.call_tool("agent_compare_setup", {"sessionId": first}))
        listed = data(await client.call_tool("session_list", {}))
        theirs = data(await client.call_tool("agent_describe_setup", {"sessionId": first}))
    assert compared["targetSessionId"] == first and not compared["sameSetup"]
    assert compared["changedSections"] == ["policy"]
    assert compared["changedTools"] == ["write"]
    assert compared["currentFingerprint"] != compared["targetFingerprint"] == theirs["fingerprint"]
    assert "write" in theirs["agentSetup"]["policy"]["alwaysAsk"]
    assert {s["sessionId"]: s["setupMatchesCurrent"] for s in listed["sessions"]}[first] is False


async def test_a_vault_change_names_its_sections(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=None)) as runtime, connect(runtime) as c:
        first = data(await c.call_tool("session_get_snapshot", {}))["sessionId"]
    config = ServeConfig.build(workspace=workspace, data_dir=None, vaults={"keys": vault})
    async with open_runtime(config) as runtime, connect(runtime) as client:
        compared = data(await client.call_tool("agent_compare_setup", {"sessionId": first}))
    assert compared["changedSections"] == ["resource_contract", "vaults"] and compared["changedTools"] == []


async def test_another_agents_session_is_refused_and_never_leaked(runtime: Runtime, connect: Connect) -> None:
    async with runtime.db.write() as tx:
        stranger = await sessions.create_session(tx, "beta")
        wake = await sessions.open_wake(tx, stranger.id, transport="memory", setup_fingerprint="f" * 64)
    async with connect(runtime) as client:
        refusals = [
            error_text(await client.call_tool(tool, {"sessionId": session_id}))
            for tool in ("agent_describe_setup", "agent_compare_setup", "session_describe_context")
            for session_id in (stranger.id, "no-such-session")
        ]
    for message, session_id in zip(refusals, [stranger.id, "no-such-session"] * 3, strict=True):
        assert message == f"Session {session_id} is not available to agent default."
        assert "f" * 64 not in message and wake.id not in message


async def test_an_unrecorded_setup_is_reported_not_invented(runtime: Runtime, connect: Connect) -> None:
    async with runtime.db.write() as tx:
        old = await sessions.create_session(tx, "default")
        await sessions.open_wake(tx, old.id, transport="memory", setup_fingerprint="e" * 64)
        never = await sessions.create_session(tx, "default")
    async with connect(runtime) as client:
        described = data(await client.call_tool("agent_describe_setup", {"sessionId": old.id}))
        compared = data(await client.call_tool("agent_compare_setup", {"sessionId": old.id}))
        unconnected = data(await client.call_tool("session_describe_context", {"sessionId": never.id}))
    assert not described["available"] and described["agentSetup"] is None
    assert described["fingerprint"] == "e" * 64 and "predates" in described["reason"]
    assert compared["changedSections"] == list(SECTIONS) and not compared["sameSetup"]
    assert not unconnected["available"] and unconnected["contextBudget"] is None
    assert "never been connected" in unconnected["reason"]


async def test_vault_list_never_returns_contents(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    vault = tmp_path / "vault"
    (vault / "deep").mkdir(parents=True)
    (vault / "token.txt").write_text(SECRET)
    (vault / "deep" / "more.txt").write_text(SECRET)
    config = ServeConfig.build(workspace=workspace, data_dir=None, vaults={"keys": vault})
    async with open_runtime(config) as runtime, connect(runtime) as client:
        listed = await client.call_tool("vault_list", {})
        setup = await client.call_tool("agent_describe_setup", {})
    shown = json.dumps([listed.model_dump(mode="json"), setup.model_dump(mode="json")])
    assert data(listed) == {
        "count": 1,
        "vaults": [
            {
                "vaultName": "keys",
                "mountPath": "/vaults/keys",
                "access": "read_only",
                "scope": "user",
                "prompt": "A read-only vault: only its listing is visible.",
            }
        ],
        "secrets": [],
    }
    assert SECRET not in shown and "token.txt" not in shown and str(vault) not in shown


def _budget(result: Any) -> dict[str, Any]:
    described: dict[str, Any] = data(result)
    assert described["available"]
    return described


@pytest.mark.parametrize("mode", ERAS)
async def test_context_pressure_rises_with_large_results(runtime: Runtime, connect: Connect, mode: str) -> None:
    (runtime.environment.workspace / "big.txt").write_text(("x" * 99 + "\n") * 2000)  # 200,000 characters
    async with connect(runtime, mode) as client:
        before = _budget(await client.call_tool("session_describe_context", {}))
        data(await client.call_tool("read", {"path": "big.txt", "maxChars": 200_000}))
        after_one = _budget(await client.call_tool("session_describe_context", {}))
        data(await client.call_tool("read", {"path": "big.txt", "maxChars": 200_000}))
        after_two = _budget(await client.call_tool("session_describe_context", {}))
        first_session = after_two["sessionId"]
    async with connect(runtime, mode) as client:
        fresh = _budget(await client.call_tool("session_describe_context", {}))
        recorded = _budget(await client.call_tool("session_describe_context", {"sessionId": first_session}))
    start, one, two = before["contextBudget"], after_one["contextBudget"], after_two["contextBudget"]
    catalogue = start["catalogue"]
    assert catalogue["toolCount"] == len(runtime.registry.names()) and 20_000 < catalogue["chars"] < 80_000
    assert catalogue["estimatedTokens"] == -(-catalogue["chars"] // 4) and len(catalogue["topSchemas"]) == 5
    assert start["results"]["count"] == 0 and before["pressure"]["level"] == "low"
    assert one["results"]["count"] == 2  # the read, and the first describe
    assert one["results"]["chars"] > 200_000 and one["results"]["largest"][0]["toolName"] == "read"
    assert after_one["pressure"]["level"] == "moderate"
    assert any(r.startswith("large_result:read:") for r in after_one["pressure"]["reasons"])
    assert "grep" in after_one["pressure"]["recommendedTools"]  # find the lines before reading them
    assert two["results"]["chars"] > 400_000 and after_two["pressure"]["level"] == "high"
    assert any(r.startswith("high_usage:") for r in after_two["pressure"]["reasons"])
    assert "memory_search" in after_two["pressure"]["recommendedTools"]
    assert set(after_two["pressure"]["recommendedTools"]) <= set(runtime.registry.names())  # only tools it has
    assert fresh["contextBudget"]["results"]["count"] == 0 and fresh["pressure"]["level"] == "low"
    assert recorded["contextBudget"]["wakeId"] == two["wakeId"]
    assert recorded["contextBudget"]["results"]["count"] == 5  # two reads and three describes
    assert recorded["pressure"]["level"] == "high"
