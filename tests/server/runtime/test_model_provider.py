"""Children, wakes and latent tools run by the operator's model (config.json `models`), whatever the client offers:
a real HTTP server that speaks each API answers from a script (tests/support/scripted_model.py); the client that talks
to it is the server's own. Every tool call goes through the executor in the child's session."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import ERAS, Connect, data, runtime_with
from mcp.client import ClientRequestContext
from pydantic import SecretStr
from support.scripted_model import ScriptedModel, Step, call, say, scripted_model
from test_delegation import LAUNCH, child_events
from test_http import client as http_client
from test_http import serving
from test_stdio import stdio_client
from test_wakes import until_status

from managed_tools.server.config.data_dir import locate_data_dir, workspace_root
from managed_tools.server.config.provider_spec import ModelLimits, ModelProviderSpec
from managed_tools.server.config.serve_config import ConfigError, ServeConfig
from managed_tools.server.runtime.headless import ModelHeadless, NoModelConfigured, run_session_headless
from managed_tools.stores import approvals, sessions, vault
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.definitions.latent import LatentToolSpec

pytestmark = pytest.mark.anyio

APIS = ("openai", "anthropic")
KEY = "sk-test-5f1e9c0d2b7a4e8f"  # a value to look for everywhere it must not be


def spec(model: ScriptedModel, **limits: Any) -> ModelProviderSpec:
    return ModelProviderSpec(
        api=model.api,
        url=model.url,
        model="scripted-1",
        key="${vault:MODEL_KEY}",
        limits=ModelLimits(**limits),
    )


async def with_key(rt: Runtime) -> Runtime:
    assert rt.variables.vault is not None
    async with rt.db.write() as tx:
        await vault.set_secret(tx, rt.variables.vault, rt.environment.agent_id, "MODEL_KEY", SecretStr(KEY))
    return rt


async def delegate(client: Any, task: str = "Plan the release") -> str:
    made = data(
        await client.call_tool("session_delegate", {"name": "planner", "task": task, "title": "Release planned"})
    )
    return str(made["childSession"]["sessionId"])


def texts(model: ScriptedModel) -> str:
    return json.dumps(model.requests)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ERAS)
async def test_a_child_runs_headless_with_a_tool_call_in_every_era(
    config: ServeConfig, connect: Connect, api: str, mode: str
) -> None:
    script = [call("planning_setup_plan", {"objective": "release", "initialSteps": ["tag"]}), say("Planned: tag.")]
    async with (
        scripted_model(api, script) as model,
        runtime_with(config.model_copy(update={"model": spec(model)}), LAUNCH) as rt,
    ):
        await with_key(rt)
        async with connect(rt, mode) as client:
            child = await delegate(client)
            ran = data(await client.call_tool("session_run_child", {"sessionId": child}))
        assert ran["mode"] == "model" and ran["loopStopReason"] == "idle", ran
        assert ran["response"] == "Planned: tag." and ran["executedCycles"] == 2
        assert [c["toolName"] for c in ran["toolCalls"]] == ["planning_setup_plan"]
        assert ran["toolCalls"][0]["status"] == "success" and ran["howToWork"] is None
        found = await child_events(rt, child)
        types = [e["type"] for e in found]
        assert "span.completed" in types and types.count("agent.message") == 1
        answer = next(json.loads(e["payload"]) for e in found if e["type"] == "agent.message")
        assert answer["text"] == "Planned: tag."
        async with rt.db.read() as tx:
            tool_spans = await tx.fetchall(
                "SELECT payload FROM events WHERE session_id = ? AND type = 'span.completed'", (child,)
            )
        assert any("planning_setup_plan" in row["payload"] for row in tool_spans)
    first, second = model.requests
    auth = first["headers"].get("authorization") if api == "openai" else first["headers"].get("x-api-key")
    assert auth == (f"Bearer {KEY}" if api == "openai" else KEY)
    assert first["body"]["model"] == "scripted-1"
    assert "Plan the release" in json.dumps(first["body"]["messages"])
    tool_names = [t["function"]["name"] if api == "openai" else t["name"] for t in first["body"]["tools"]]
    assert "planning_setup_plan" in tool_names and "session_delegate" not in tool_names
    assert "planSteps" in json.dumps(second["body"]["messages"]) or "tag" in json.dumps(second["body"]["messages"])


@pytest.mark.parametrize("api", APIS)
async def test_an_always_ask_call_pauses_until_a_person_approves(
    config: ServeConfig, connect: Connect, api: str
) -> None:
    script = [call("launch_probe", {}), call("launch_probe", {}), say("Launched.")]
    async with (
        scripted_model(api, script) as model,
        runtime_with(config.model_copy(update={"model": spec(model)}), LAUNCH) as rt,
    ):
        await with_key(rt)
        async with connect(rt) as client:
            child = await delegate(client, "Launch the probe")
            paused = data(await client.call_tool("session_run_child", {"sessionId": child}))
            assert paused["loopStopReason"] == "requires_action", paused
            request = paused["toolCalls"][0]["requestId"]
            assert request and paused["toolCalls"][0]["status"] == "blocked"
            assert "probe.launched" not in [e["type"] for e in await child_events(rt, child)]
            async with rt.db.write() as tx:
                record = await approvals.get(tx, request)
                assert record.session_id == child and record.channel == "out_of_band"
                await approvals.decide(tx, request, approved=True, by="test", wake_id=None)
            ran = data(await client.call_tool("session_run_child", {"sessionId": child}))
        assert ran["loopStopReason"] == "idle" and ran["response"] == "Launched.", ran
        assert "probe.launched" in [e["type"] for e in await child_events(rt, child)]


@pytest.mark.parametrize("api", APIS)
async def test_a_refusal_stops_the_run_and_is_the_answer(config: ServeConfig, connect: Connect, api: str) -> None:
    async with (
        scripted_model(api, [Step(text="I will not do that.", refusal=True)]) as model,
        runtime_with(config.model_copy(update={"model": spec(model)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt, "legacy") as client:
            child = await delegate(client)
            ran = data(await client.call_tool("session_run_child", {"sessionId": child}))
    assert ran["loopStopReason"] == "refused" and ran["response"] == "I will not do that."
    assert ran["toolCalls"] == []


@pytest.mark.parametrize("api", APIS)
async def test_a_provider_error_is_said_without_the_key(
    config: ServeConfig, connect: Connect, api: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    failing = Step(status=401, error=f"invalid x-api-key {KEY} for this account")
    async with (
        scripted_model(api, [failing]) as model,
        runtime_with(config.model_copy(update={"model": spec(model)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt) as client:
            child = await delegate(client)
            result = await client.call_tool("session_run_child", {"sessionId": child})
            ran = data(result)
            assert ran["loopStopReason"] == "model_error"
            assert "HTTP 401" in ran["response"] and "[secret redacted]" in ran["response"]
            parent = data(await client.call_tool("session_get_events", {"limit": 50}))
            theirs = data(await client.call_tool("session_get_events", {"sessionId": child, "limit": 50}))
        async with rt.db.read() as tx:
            rows = await tx.fetchall("SELECT payload, summary FROM events")
    recorded = json.dumps([dict(r) for r in rows]) + json.dumps(result.model_dump()) + json.dumps([parent, theirs])
    assert KEY not in recorded and KEY not in caplog.text


async def test_a_provider_that_does_not_answer_in_time_stops_the_run(config: ServeConfig, connect: Connect) -> None:
    async with (
        scripted_model("openai", [Step(text="late", delay=5)]) as model,
        runtime_with(config.model_copy(update={"model": spec(model, wallSeconds=1)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt) as client:
            child = await delegate(client)
            ran = data(await client.call_tool("session_run_child", {"sessionId": child}))
    assert ran["loopStopReason"] == "model_error" and "did not answer within 1 s" in ran["response"]


async def test_the_limits_end_a_run_that_keeps_calling(config: ServeConfig, connect: Connect) -> None:
    looping = [call("session_get_snapshot", {}) for _ in range(5)]
    async with (
        scripted_model("anthropic", looping) as model,
        runtime_with(config.model_copy(update={"model": spec(model, turns=2)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt) as client:
            child = await delegate(client)
            ran = data(await client.call_tool("session_run_child", {"sessionId": child, "cycles": 10}))
    assert ran["loopStopReason"] == "model_error" and "limit of 2 model turns" in ran["response"]
    assert ran["executedCycles"] == 2 and len(model.requests) == 2


async def test_the_token_limit_ends_a_run_once_spent(config: ServeConfig, connect: Connect) -> None:
    looping = [call("session_get_snapshot", {}) for _ in range(3)]  # each reply counts 120 tokens
    async with (
        scripted_model("openai", looping) as model,
        runtime_with(config.model_copy(update={"model": spec(model, tokens=200)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt) as client:
            child = await delegate(client)
            ran = data(await client.call_tool("session_run_child", {"sessionId": child, "cycles": 10}))
    assert ran["loopStopReason"] == "model_error" and "spent its 200 tokens (240 counted)" in ran["response"]
    assert len(model.requests) == 2


async def test_a_missing_key_says_how_to_set_it(config: ServeConfig, connect: Connect) -> None:
    async with (
        scripted_model("openai", [say("never")]) as model,
        runtime_with(config.model_copy(update={"model": spec(model)})) as rt,
        connect(rt) as client,
    ):
        child = await delegate(client)
        ran = data(await client.call_tool("session_run_child", {"sessionId": child}))
    assert ran["loopStopReason"] == "model_error" and "managed-tools secret set MODEL_KEY" in ran["response"]
    assert model.requests == []


@pytest.mark.parametrize("api", APIS)
async def test_a_session_runs_headless_with_nobody_attached(config: ServeConfig, api: str) -> None:
    async with (
        scripted_model(api, [call("launch_probe", {}), call("launch_probe", {}), say("Done.")]) as model,
        runtime_with(config.model_copy(update={"model": spec(model)}), LAUNCH) as rt,
    ):
        await with_key(rt)
        async with rt.db.write() as tx:
            session = await sessions.create_session(tx, rt.environment.agent_id)
        paused = await run_session_headless(rt, session.id, "Launch it")
        assert paused.stop == "requires_action" and paused.calls[0].request_id is not None
        async with rt.db.write() as tx:
            await approvals.decide(tx, paused.calls[0].request_id, approved=True, by="test", wake_id=None)
        ran = await run_session_headless(rt, session.id, None)
        assert ran.stop == "idle" and ran.response == "Done."
        found = [e["type"] for e in await child_events(rt, session.id)]
    assert found.count("probe.launched") == 1 and found[-2:] == ["agent.message", "span.completed"]
    assert "Launch it" in texts(model)


async def test_without_a_model_a_headless_run_is_refused(runtime: Runtime) -> None:
    async with runtime.db.write() as tx:
        session = await sessions.create_session(tx, runtime.environment.agent_id)
    with pytest.raises(NoModelConfigured, match=r"config\.json `models`"):
        await run_session_headless(runtime, session.id, "hello")


@pytest.mark.parametrize("mode", ERAS)
async def test_a_latent_tool_is_fulfilled_by_the_configured_model(
    config: ServeConfig, connect: Connect, mode: str
) -> None:
    latent = LatentToolSpec.model_validate(
        {"name": "sentiment", "description": "Rate the sentiment of a text.",
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
         "outputSchema": {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}}
    )  # fmt: skip
    configured = config.model_copy(update={"latent_tools": (latent,)})
    async with (
        scripted_model("anthropic", [say('{"score": 0.9}')]) as model,
        runtime_with(configured.model_copy(update={"model": spec(model)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt, mode) as client:
            result = await client.call_tool("sentiment", {"text": "lovely"})
    assert data(result) == {"score": 0.9}
    assert "lovely" in texts(model)


def test_config_json_takes_a_model_with_its_key_in_the_vault(workspace: Path) -> None:
    place = locate_data_dir(workspace_root(workspace), None)
    place.mkdir(parents=True, exist_ok=True)
    entry = {"api": "openai", "url": "https://api.openai.com/v1/chat/completions", "model": "gpt-4.1",
             "key": "${vault:OPENAI_API_KEY}", "limits": {"turns": 5, "wallSeconds": 60}}  # fmt: skip
    (place / "config.json").write_text(json.dumps({"models": {"default": entry}}))
    built = ServeConfig.build(workspace=workspace, data_dir=None)
    assert built.model is not None and built.model.limits.turns == 5 and built.model.key == entry["key"]
    for wrong, said in (
        ({"default": {**entry, "key": KEY}}, "models.default.key"),
        ({"default": {**entry, "url": "http://example.com/v1"}}, "https"),
        ({"a": entry, "b": entry}, "name the entry that runs 'default'"),
        ({"default": {**entry, "api": "gemini"}}, "models.default.api"),
    ):
        (place / "config.json").write_text(json.dumps({"models": wrong}))
        with pytest.raises(ConfigError, match=said) as caught:
            ServeConfig.build(workspace=workspace, data_dir=None)
        assert KEY not in str(caught.value)


async def test_no_model_and_no_sampling_keeps_the_hand_off(rt_plain: Runtime, connect: Connect) -> None:
    async with connect(rt_plain) as client:
        child = await delegate(client)
        ran = data(await client.call_tool("session_run_child", {"sessionId": child, "waitSeconds": 0}))
    assert ran["mode"] == "handoff" and ran["howToWork"] is not None


@pytest.fixture
async def rt_plain(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with runtime_with(config) as runtime:
        yield runtime


@pytest.mark.parametrize("mode", ERAS)
async def test_a_child_runs_headless_for_a_client_over_http(config: ServeConfig, mode: str) -> None:
    async with (
        scripted_model("openai", [call("session_get_snapshot", {}), say("Seen over HTTP.")]) as model,
        serving(config.model_copy(update={"model": spec(model)})) as served,
    ):
        await with_key(served.runtime)
        async with http_client(served, mode) as client:
            child = await delegate(client)
            ran = data(await client.call_tool("session_run_child", {"sessionId": child}))
    assert ran["mode"] == "model" and ran["response"] == "Seen over HTTP."
    assert [(c["toolName"], c["status"]) for c in ran["toolCalls"]] == [("session_get_snapshot", "success")]


async def test_a_child_runs_headless_for_a_client_over_stdio(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real command with a real config.json: the key reaches the server through the environment
    (`variables.MODEL_KEY: {"env": ...}`), the vault reference resolving through config.json's variables."""
    async with scripted_model("anthropic", [say("Seen over stdio.")]) as model:
        place = locate_data_dir(workspace_root(workspace), None)
        place.mkdir(parents=True, exist_ok=True)
        entry = spec(model).model_dump(mode="json", by_alias=True)
        document = {"models": {"default": entry}, "variables": {"MODEL_KEY": {"env": "TEST_MODEL_KEY"}}}
        (place / "config.json").write_text(json.dumps(document))
        monkeypatch.setenv("TEST_MODEL_KEY", KEY)
        async with stdio_client(workspace, mode="auto") as client:
            child = await delegate(client)
            ran = data(await client.call_tool("session_run_child", {"sessionId": child}))
    assert ran["mode"] == "model" and ran["response"] == "Seen over stdio."
    assert model.requests[0]["headers"]["x-api-key"] == KEY


async def test_a_handshake_client_that_elicits_approves_the_childs_call_on_its_stream(
    config: ServeConfig, connect: Connect
) -> None:
    asked: list[str] = []

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with (
        scripted_model("openai", [call("launch_probe", {}), say("Launched.")]) as model,
        runtime_with(config.model_copy(update={"model": spec(model)}), LAUNCH) as rt,
    ):
        await with_key(rt)
        async with connect(rt, "legacy", elicitation_callback=person) as client:
            child = await delegate(client)
            ran = data(await client.call_tool("session_run_child", {"sessionId": child}))
        assert ran["mode"] == "model" and ran["loopStopReason"] == "idle" and ran["response"] == "Launched."
        assert len(asked) == 1 and "launch_probe" in asked[0]
        assert "probe.launched" in [e["type"] for e in await child_events(rt, child)]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_due_wake_runs_the_session_through_the_configured_model(
    config: ServeConfig, connect: Connect, mode: str
) -> None:
    script = [call("session_get_snapshot", {}), say("CI is green.")]
    async with (
        scripted_model("anthropic", script) as model,
        runtime_with(config.model_copy(update={"model": spec(model)})) as rt,
    ):
        assert isinstance(rt.headless, ModelHeadless)
        await with_key(rt)
        async with connect(rt, mode) as client:
            await client.call_tool("session_schedule_wake", {"reason": "Check CI", "inSeconds": 1})
            fired = await until_status(client, "fired")
            found = data(await client.call_tool("session_get_events", {"types": ["agent.message", "wake.fired"]}))
    assert fired["result"] == "CI is green."
    assert [e["type"] for e in found["events"]] == ["agent.message", "wake.fired"]
    assert "Scheduled wake: Check CI" in json.dumps(model.requests[0]["body"]["messages"])


async def test_a_wake_whose_model_fails_records_why_without_the_key(config: ServeConfig, connect: Connect) -> None:
    async with (
        scripted_model("openai", [Step(status=503, error=f"overloaded for {KEY}")]) as model,
        runtime_with(config.model_copy(update={"model": spec(model)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt) as client:
            await client.call_tool("session_schedule_wake", {"reason": "Check CI", "inSeconds": 1})
            failed = await until_status(client, "failed")
    assert "HTTP 503" in failed["result"] and KEY not in failed["result"]
