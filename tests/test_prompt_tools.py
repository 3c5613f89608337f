"""Prompts callable as tools (config.json `promptTools`, seed 000 §4): a real config file, a real runtime, a real
client; the model provider is a small in-test one (the providers themselves are issue 26's), plugged into the
runtime's port as a configured one would be."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Connect, data, error_text

from managed_tools.server.config import ServeConfig
from managed_tools.server.data_dir import ConfigError
from managed_tools.server.runtime import open_runtime
from managed_tools.tools.framework.budget import Budgets
from managed_tools.tools.framework.ports import Completion, ModelProviderError, ModelRequest

pytestmark = pytest.mark.anyio

REVIEW = {
    "name": "review_prompt",
    "description": "A review checklist for one file, in the team's words.",
    "template": "Review {{path}} for {{focus}}. Be strict: {{strict}}. At most {{limit}} findings.",
    "arguments": {
        "path": {"description": "The file to review."},
        "focus": {"enum": ["security", "style"], "default": "security"},
        "strict": {"type": "boolean", "default": False},
        "limit": {"type": "integer", "required": False},
    },
}
ANSWER = {
    "name": "answer_as_support",
    "description": "Answer a customer's question as our support team would.",
    "template": "You are {{team}}'s support. Answer briefly.",
    "arguments": {"team": {}, "question": {}},
    "initUserMessageProperty": "question",
    "maxTokens": 300,
}


class Provider:
    """A model provider as the port sees one: it records each request, answers, and reports what it spent."""

    def __init__(self, *, fail: bool = False, spent: int = 40) -> None:
        self.requests: list[ModelRequest] = []
        self.fail = fail
        self.spent = spent

    async def complete(self, request: ModelRequest) -> Completion:
        self.requests.append(request)
        if self.fail:
            raise ModelProviderError("the provider answered 503 (overloaded)")
        return Completion(text=f"answer to: {request.prompt[:40]}", model="test-model", input_tokens=self.spent,
                          output_tokens=10)  # fmt: skip


def configured(workspace: Path, config: ServeConfig, document: dict[str, Any]) -> ServeConfig:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    (config.data_dir / "config.json").write_text(json.dumps(document))
    return ServeConfig.build(workspace=workspace, data_dir=config.data_dir)


@pytest.fixture
def prompts(workspace: Path, config: ServeConfig) -> ServeConfig:
    return configured(workspace, config, {"promptTools": [REVIEW, ANSWER, {**REVIEW, "name": "text_only",
                                                                           "run": "never"}]})  # fmt: skip


async def test_a_prompt_is_a_tool_that_renders_its_template(prompts: ServeConfig, connect: Connect) -> None:
    async with open_runtime(prompts) as runtime, connect(runtime) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        rendered = data(await client.call_tool("review_prompt", {"path": "src/app.py", "limit": 3}))
        strict = data(await client.call_tool("review_prompt", {"path": "a.py", "focus": "style", "strict": True}))
    schema = listed["review_prompt"].input_schema
    assert schema["properties"]["strict"] == {"type": "boolean", "default": False}
    assert schema["properties"]["focus"]["enum"] == ["security", "style"] and schema["required"] == ["path"]
    assert rendered == {"prompt": "Review src/app.py for security. Be strict: false. At most 3 findings.",
                        "ran": False, "model": None, "response": None, "error": None, "modelTokens": None}  # fmt: skip
    assert strict["prompt"] == "Review a.py for style. Be strict: true. At most  findings."


async def test_arguments_are_typed(prompts: ServeConfig, connect: Connect) -> None:
    async with open_runtime(prompts) as runtime, connect(runtime) as client:
        wrong_type = await client.call_tool("review_prompt", {"path": "a.py", "limit": "three"})
        missing = await client.call_tool("review_prompt", {})
        extra = await client.call_tool("review_prompt", {"path": "a.py", "tone": "kind"})
        not_listed = await client.call_tool("review_prompt", {"path": "a.py", "focus": "speed"})
    assert "limit: 'three' is not of type 'integer'" in error_text(wrong_type)
    assert "'path' is a required property" in error_text(missing)
    assert "'tone' was unexpected" in error_text(extra)
    assert "'speed' is not one of ['security', 'style']" in error_text(not_listed)


async def test_with_a_provider_the_prompt_runs_and_its_tokens_count(prompts: ServeConfig, connect: Connect) -> None:
    provider = Provider()
    async with open_runtime(prompts) as opened:
        runtime = dataclasses.replace(opened, model_provider=provider)
        async with connect(runtime) as client:
            ran = data(await client.call_tool("review_prompt", {"path": "src/app.py"}))
            support = data(await client.call_tool("answer_as_support", {"team": "Acme", "question": "Refunds?"}))
            assert support["ran"] and support["response"] == "answer to: Refunds?"
            text_only = data(await client.call_tool("text_only", {"path": "x.py"}))
            budget = data(await client.call_tool("session_get_snapshot", {"fields": ["budget"]}))["budget"]
    assert ran["ran"] and ran["model"] == "test-model" and ran["modelTokens"] == 50
    assert ran["response"] == "answer to: Review src/app.py for security. Be stric"
    first, second = provider.requests
    assert first.system is None and first.max_tokens == 1024
    assert second.system == "You are Acme's support. Answer briefly." and second.prompt == "Refunds?"
    assert second.max_tokens == 300
    assert not text_only["ran"] and len(provider.requests) == 2
    assert budget["used"]["tokens"] > 100  # the two runs' 50 tokens each, and the calls' own text


async def test_the_budget_caps_and_refuses_a_run(prompts: ServeConfig, connect: Connect) -> None:
    provider = Provider(spent=400)
    async with open_runtime(prompts) as opened:
        runtime = dataclasses.replace(
            opened, model_provider=provider, budgets=Budgets.model_validate({"perCall": {"tokens": 300}})
        )
        async with connect(runtime) as client:
            over = await client.call_tool("review_prompt", {"path": "src/app.py"})
    assert provider.requests[0].max_tokens == 300  # capped to what the call may spend
    assert "a model spent 410 tokens for this call, 110 over its budget" in error_text(over)
    assert (over.meta or {})["managed-tools/error"] == {"kind": "budget", "status": "blocked"}


async def test_a_provider_failure(workspace: Path, config: ServeConfig, connect: Connect) -> None:
    document = {"promptTools": [REVIEW, {**REVIEW, "name": "review_soft", "includeErrors": True,
                                         "includeTextResponse": False}]}  # fmt: skip
    async with open_runtime(configured(workspace, config, document)) as opened:
        runtime = dataclasses.replace(opened, model_provider=Provider(fail=True))
        async with connect(runtime) as client:
            failed = await client.call_tool("review_prompt", {"path": "a.py"})
            soft = data(await client.call_tool("review_soft", {"path": "a.py"}))
    assert (
        error_text(failed) == "The model provider could not run review_prompt: the provider answered 503 (overloaded)"
    )
    assert soft["error"] == "the provider answered 503 (overloaded)" and not soft["ran"] and soft["response"] is None


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({**REVIEW, "template": "Review {{path}} and {{pathz}}"}, "the template uses pathz, which are not among"),
        ({**REVIEW, "includeToolCalls": True}, "includeToolCalls is not supported here"),
        ({**ANSWER, "initUserMessageProperty": "nobody"}, "initUserMessageProperty 'nobody' must name one of"),
        ({**REVIEW, "arguments": {"path": {"type": "object"}}}, "promptTools.0.arguments.path.type"),
    ],
)
async def test_a_bad_prompt_is_a_clear_startup_error(
    workspace: Path, config: ServeConfig, entry: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        configured(workspace, config, {"promptTools": [entry]})
