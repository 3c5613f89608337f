"""Latent tools (seed 003): fulfilled by a model, sampled where the client offers it, handed back otherwise."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import ERAS, Connect, data, error_text, runtime_with
from mcp.client import ClientRequestContext
from pydantic import Field

from managed_tools.server.config.data_dir import default_data_dir
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.publishing.publish import ACTION_META_KEY, ERROR_META_KEY
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.catalogue import build_registry
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.definitions.latent import LatentToolSpec, latent_tool
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.wire.errors import RegistryError
from managed_tools.tools.framework.wire.models import Arguments, WireModel

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

SUMMARISE: dict[str, Any] = {
    "name": "summarise_risks",
    "title": "Summarise risks",
    "description": "Read a change description and list its risks.",
    "instructions": "Name at most three risks, most serious first.",
    "inputSchema": {"type": "object", "properties": {"change": {"type": "string"}}, "required": ["change"]},
    "outputSchema": {
        "type": "object",
        "properties": {"risks": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
        "required": ["risks"],
        "additionalProperties": False,
    },
}
GOOD = {"risks": ["data loss", "downtime"]}
Answers = Callable[[ClientRequestContext, types.CreateMessageRequestParams], Any]


@pytest.fixture
def config(workspace: Path, database_option: str | None) -> ServeConfig:
    data_dir = default_data_dir(workspace.resolve())
    data_dir.mkdir(parents=True)
    (data_dir / "config.json").write_text(json.dumps({"latentTools": [SUMMARISE]}))
    return ServeConfig.build(workspace=workspace, data_dir=None, database=database_option)


@pytest.fixture
async def rt(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with open_runtime(config) as runtime:
        yield runtime


def scripted(answers: list[str], prompts: list[str]) -> Answers:
    """A client model that answers with `answers` in turn and keeps the prompts it was given."""

    async def on_sample(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        prompt = params.messages[0].content
        assert isinstance(prompt, types.TextContent)
        prompts.append(prompt.text)
        text = types.TextContent(type="text", text=answers[len(prompts) - 1])
        return types.CreateMessageResult(role="assistant", content=text, model="scripted")

    return on_sample


async def test_published_as_latent_with_the_submission_tool(rt: Runtime, connect: Connect) -> None:
    async with connect(rt) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    meta = (tools["summarise_risks"].meta or {})["managed-tools/tool"]
    assert meta["ownership"] == "latent"
    assert meta["latent"] == {"fulfilledBy": "model", "submitWith": "latent_submit"}
    assert tools["summarise_risks"].output_schema == SUMMARISE["outputSchema"]  # as written (portable-schemas.md)
    assert "latent_submit" in tools
    assert build_registry().get("latent_submit") is None  # no latent tool, no submission tool


async def test_sampled_output_is_the_result(rt: Runtime, connect: Connect) -> None:
    prompts: list[str] = []
    fenced = "```json\n" + json.dumps(GOOD) + "\n```"
    async with connect(rt, "legacy", sampling_callback=scripted([fenced], prompts)) as client:
        result = data(await client.call_tool("summarise_risks", {"change": "drop the users table"}))
    assert result == GOOD
    (prompt,) = prompts
    assert "Name at most three risks" in prompt and "drop the users table" in prompt and '"maxItems": 3' in prompt


async def test_invalid_sampled_output_is_retried_once_with_the_error(rt: Runtime, connect: Connect) -> None:
    prompts: list[str] = []
    answers = [json.dumps({"risks": "all of them"}), json.dumps(GOOD)]
    async with connect(rt, "legacy", sampling_callback=scripted(answers, prompts)) as client:
        result = data(await client.call_tool("summarise_risks", {"change": "x"}))
    assert result == GOOD
    assert len(prompts) == 2
    assert "Your previous answer was refused: risks: 'all of them' is not of type 'array'" in prompts[1]


async def test_invalid_output_twice_is_refused_with_the_schema_error(rt: Runtime, connect: Connect) -> None:
    prompts: list[str] = []
    answers = ["not json", json.dumps({"risks": ["a", "b", "c", "d"]})]
    async with connect(rt, "legacy", sampling_callback=scripted(answers, prompts)) as client:
        result = await client.call_tool("summarise_risks", {"change": "x"})
    assert "the answer is not a JSON object" in prompts[1]
    assert error_text(result) == (
        "The model's answer for summarise_risks does not match its output schema, even after a retry that showed "
        "it the error: risks: ['a', 'b', 'c', 'd'] is too long."
    )


async def handed_back(client: Any) -> tuple[str, str]:
    result = await client.call_tool("summarise_risks", {"change": "rename a column"})
    assert result.is_error
    meta = result.meta or {}
    assert meta[ERROR_META_KEY] == {"kind": "handed_back", "status": "blocked"}
    action = meta[ACTION_META_KEY]
    assert action["toolName"] == "summarise_risks" and action["submitWith"] == "latent_submit"
    return action["callId"], error_text(result)


@pytest.mark.parametrize("mode", ERAS)
async def test_without_sampling_the_calling_model_answers(rt: Runtime, connect: Connect, mode: str) -> None:
    async with connect(rt, mode) as client:
        call_id, text = await handed_back(client)
        bad = await client.call_tool("latent_submit", {"callId": call_id, "output": {"risks": [1]}})
        good = data(await client.call_tool("latent_submit", {"callId": call_id, "output": GOOD}))
        again = await client.call_tool("latent_submit", {"callId": call_id, "output": GOOD})
    assert "Name at most three risks" in text and '"maxItems": 3' in text and call_id in text
    assert error_text(bad) == (
        "The output for summarise_risks does not match its output schema: risks.0: 1 is not of type 'string'. "
        "Nothing was recorded; the call still waits for a valid answer."
    )
    assert good == {"callId": call_id, "toolName": "summarise_risks", "output": GOOD}
    assert error_text(again) == f"Latent call {call_id} already has its answer; it is recorded once."
    async with rt.db.read() as tx:
        row = await tx.fetchone("SELECT output, span_id FROM latent_calls WHERE call_id = ?", (call_id,))
        assert row is not None
        span = await tx.scalar(
            f"SELECT {tx.dialect.json_text('payload', 'result')} FROM events WHERE type = 'span.completed' "
            f"AND {tx.dialect.json_text('payload', 'spanId')} = ?",
            (row["span_id"],),
        )
    assert json.loads(row["output"]) == GOOD and span == "blocked"


async def test_another_session_cannot_answer(rt: Runtime, connect: Connect) -> None:
    async with connect(rt) as owner:
        call_id, _ = await handed_back(owner)
        async with connect(rt) as other:
            stolen = await other.call_tool("latent_submit", {"callId": call_id, "output": GOOD})
            unknown = await other.call_tool("latent_submit", {"callId": "nope", "output": GOOD})
        mine = data(await owner.call_tool("latent_submit", {"callId": call_id, "output": GOOD}))
    # Another session's call reads exactly like one that does not exist: ids cannot be probed.
    assert error_text(stolen) == f"No latent call '{call_id}' waits in this session."
    assert error_text(unknown) == "No latent call 'nope' waits in this session."
    assert mine["output"] == GOOD


class Topic(Arguments):
    topic: str


class Haiku(WireModel):
    lines: list[str] = Field(min_length=3, max_length=3)


HAIKU = ToolDefinition(
    name="write_haiku",
    title="Write a haiku",
    description="Write a haiku about a topic.",
    input_model=Topic,
    output_model=Haiku,
    handler=None,
    ownership="latent",
)


async def test_a_tools_module_declares_one_with_models(config: ServeConfig, connect: Connect) -> None:
    prompts: list[str] = []
    answers = [json.dumps({"lines": ["one"]}), json.dumps({"lines": ["a", "b", "c"]})]
    sample = scripted(answers, prompts)
    async with runtime_with(config, HAIKU) as runtime, connect(runtime, "legacy", sampling_callback=sample) as client:
        result = data(await client.call_tool("write_haiku", {"topic": "rain"}))
    assert result == {"lines": ["a", "b", "c"]}
    assert "lines: List should have at least 3 items" in prompts[1]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_defined_without_a_handler_is_latent(config: ServeConfig, connect: Connect, mode: str) -> None:
    """Seed 003's zero-configuration rule (issue 38 item 4): no activity means latent, not "has no
    implementation". Sampled where the client offers it (legacy), handed back to the calling model otherwise."""
    bare = HAIKU.model_copy(update={"name": "write_senryu", "ownership": "managed"})
    sample = scripted([json.dumps({"lines": ["a", "b", "c"]})], [])
    async with runtime_with(config, bare) as runtime, connect(runtime, mode, sampling_callback=sample) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("write_senryu", {"topic": "rain"})
        if mode == "legacy":
            answered = data(result)
        else:
            action = (result.meta or {})[ACTION_META_KEY]
            out = {"callId": action["callId"], "output": {"lines": ["x", "y", "z"]}}
            answered = data(await client.call_tool("latent_submit", out))["output"]
    assert runtime.registry.get("write_senryu").ownership == "latent"  # type: ignore[union-attr]
    assert "latent_submit" in listed and "write_senryu" in listed
    assert "no implementation" not in str(result.content)
    assert answered == ({"lines": ["a", "b", "c"]} if mode == "legacy" else {"lines": ["x", "y", "z"]})


def test_a_latent_tool_has_no_handler() -> None:
    async def handler(ctx: Any, args: Any) -> Haiku:
        return Haiku(lines=["a", "b", "c"])

    with pytest.raises(RegistryError, match="is latent: a model fulfils it, so it cannot have a handler"):
        Registry([HAIKU.model_copy(update={"handler": handler})])
    spec = LatentToolSpec.model_validate(SUMMARISE)
    assert latent_tool(spec).instructions == SUMMARISE["instructions"]


async def test_a_2026_client_with_a_sampling_callback_is_handed_the_task(rt: Runtime, connect: Connect) -> None:
    """2026-07-28 has no back-channel for sampling: the call is handed back, never left waiting on it."""
    prompts: list[str] = []
    async with connect(rt, "auto", sampling_callback=scripted([json.dumps(GOOD)], prompts)) as client:
        call_id, _ = await handed_back(client)
        answered = data(await client.call_tool("latent_submit", {"callId": call_id, "output": GOOD}))
    assert prompts == [] and answered["output"] == GOOD
