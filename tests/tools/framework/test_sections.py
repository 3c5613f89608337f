"""Asking the heavy reads for part of their answer (issue 27's finding, issue 29 item 3): agent_describe_setup
{sections}, session_get_snapshot {fields}, environment_describe {sections}, through a real client that checks
each partial answer against the published output schema."""

from __future__ import annotations

import json

import pytest
from conftest import ERAS, Connect, data, error_text

from managed_tools.tools.environment.setup import SECTIONS
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.sessions.tools import SessionSnapshot

pytestmark = pytest.mark.anyio


def size(result: object) -> int:
    return len(json.dumps(result, separators=(",", ":")))


@pytest.mark.parametrize("mode", ERAS)
async def test_one_setup_section_is_a_fraction_of_the_whole(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        whole = data(await client.call_tool("agent_describe_setup", {}))
        policy = data(await client.call_tool("agent_describe_setup", {"sections": ["policy", "policy"]}))
        two = data(await client.call_tool("agent_describe_setup", {"sections": ["resource_contract", "vaults"]}))
    assert set(whole["agentSetup"]) == {"fingerprint", "tools", "policy", "skills", "environment",
                                        "resourceContract", "vaults"}  # fmt: skip
    assert set(policy["agentSetup"]) == {"fingerprint", "policy"}
    assert policy["agentSetup"]["policy"] == whole["agentSetup"]["policy"]
    assert policy["agentSetup"]["fingerprint"] == whole["agentSetup"]["fingerprint"] == whole["fingerprint"]
    assert set(two["agentSetup"]) == {"fingerprint", "resourceContract", "vaults"}
    assert size(policy) * 10 < size(whole)


async def test_an_unknown_section_is_one_error_naming_the_valid_ones(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        setup = await client.call_tool("agent_describe_setup", {"sections": ["tools", "toolz", "polcy"]})
        env = await client.call_tool("environment_describe", {"sections": ["mounts"]})
        snap = await client.call_tool("session_get_snapshot", {"fields": ["outcome"]})
    text = error_text(setup)
    assert setup.is_error and text.count("unknown section") == 1
    assert "'toolz', 'polcy'" in text and ", ".join(SECTIONS) in text
    assert env.is_error and "unknown section 'mounts'" in error_text(env) and "mountedResources" in error_text(env)
    assert snap.is_error and "unknown field 'outcome'" in error_text(snap)
    assert "activeOutcome" in error_text(snap) and "shellState" in error_text(snap)
    assert "Traceback" not in text


@pytest.mark.parametrize("mode", ERAS)
async def test_snapshot_fields(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode) as client:
        whole = data(await client.call_tool("session_get_snapshot", {}))
        some = data(await client.call_tool("session_get_snapshot", {"fields": ["turns", "eventCursor"]}))
        least = data(await client.call_tool("session_get_snapshot", {"fields": []}))
    assert set(whole) == {field.alias for field in SessionSnapshot.model_fields.values()}
    assert set(some) == {"sessionId", "status", "turns", "eventCursor"}
    assert some["sessionId"] == whole["sessionId"] and some["turns"] == whole["turns"] + 1
    assert least == {"sessionId": whole["sessionId"], "status": whole["status"]}


async def test_environment_sections(runtime: Runtime, connect: Connect) -> None:
    async with connect(runtime) as client:
        whole = data(await client.call_tool("environment_describe", {}))
        confinement = data(await client.call_tool("environment_describe", {"sections": ["confinement"]}))
    assert set(confinement) == {"id", "agentId", "fingerprint", "confinement"}
    assert confinement["confinement"] == whole["confinement"] and "mountedResources" in whole
