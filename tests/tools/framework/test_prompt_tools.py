"""Prompts callable as tools (config.json `promptTools`, seed 000 §4): a real config file, a real runtime, a real
client; where a model runs them, it is config.json `models`' own client talking to a real HTTP server that speaks
the API from a script (tests/support/scripted_model.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Connect, data, error_text
from support.scripted_model import ScriptedModel, Step, say, scripted_model

from managed_tools.server.config.data_dir import ConfigError
from managed_tools.server.config.provider_spec import ModelProviderSpec
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.framework.context.budget import Budgets

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
                        "ran": False, "response": None, "error": None, "modelTokens": None}  # fmt: skip
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


def with_model(config: ServeConfig, model: ScriptedModel) -> ServeConfig:
    """The configured model (config.json `models`) pointing at the scripted one, a key-less local server."""
    spec = ModelProviderSpec(api=model.api, url=model.url, model="scripted-1", key=None)
    return config.model_copy(update={"model": spec})


def messages(model: ScriptedModel, n: int) -> list[dict[str, Any]]:
    return list(model.requests[n]["body"]["messages"])


async def test_with_a_model_the_prompt_runs_and_its_tokens_count(prompts: ServeConfig, connect: Connect) -> None:
    script = [say("Two findings."), say("Refunds take 5 days.")]
    async with (
        scripted_model("openai", script) as model,
        open_runtime(with_model(prompts, model)) as runtime,
        connect(runtime) as client,
    ):
        ran = data(await client.call_tool("review_prompt", {"path": "src/app.py"}))
        support = data(await client.call_tool("answer_as_support", {"team": "Acme", "question": "Refunds?"}))
        text_only = data(await client.call_tool("text_only", {"path": "x.py"}))
        budget = data(await client.call_tool("session_get_snapshot", {"fields": ["budget"]}))["budget"]
    assert ran == {"prompt": "Review src/app.py for security. Be strict: false. At most  findings.", "ran": True,
                   "response": "Two findings.", "error": None, "modelTokens": 120}  # fmt: skip
    assert support["response"] == "Refunds take 5 days." and support["modelTokens"] == 120
    assert messages(model, 0)[1] == {"role": "user", "content": ran["prompt"]}
    assert model.requests[0]["body"]["max_tokens"] == 1024 and "tools" not in model.requests[0]["body"]
    assert messages(model, 1) == [{"role": "system", "content": "You are Acme's support. Answer briefly."},
                                  {"role": "user", "content": "Refunds?"}]  # fmt: skip
    assert model.requests[1]["body"]["max_tokens"] == 300
    assert not text_only["ran"] and len(model.requests) == 2
    assert budget["used"]["tokens"] > 240  # the two runs' 120 tokens each, and the calls' own text


async def test_the_budget_caps_and_refuses_a_run(prompts: ServeConfig, connect: Connect) -> None:
    limited = prompts.model_copy(update={"budgets": Budgets.model_validate({"perCall": {"tokens": 100}})})
    async with (
        scripted_model("anthropic", [say("Fine.")]) as model,
        open_runtime(with_model(limited, model)) as runtime,
        connect(runtime) as client,
    ):
        over = await client.call_tool("review_prompt", {"path": "src/app.py"})
    assert model.requests[0]["body"]["max_tokens"] == 100  # capped to what the call may spend
    assert "a model spent 120 tokens for this call, 20 over its budget" in error_text(over)
    assert (over.meta or {})["managed-tools/error"] == {"kind": "budget", "status": "blocked"}


async def test_a_model_failure(workspace: Path, config: ServeConfig, connect: Connect) -> None:
    document = {"promptTools": [REVIEW, {**REVIEW, "name": "review_soft", "includeErrors": True}]}
    failing = [Step(status=503, error="overloaded"), Step(status=503, error="overloaded")]
    async with (
        scripted_model("openai", failing) as model,
        open_runtime(with_model(configured(workspace, config, document), model)) as runtime,
        connect(runtime) as client,
    ):
        failed = await client.call_tool("review_prompt", {"path": "a.py"})
        soft = data(await client.call_tool("review_soft", {"path": "a.py"}))
    said = "the model provider answered HTTP 503: overloaded"
    assert error_text(failed) == f"The model could not run review_prompt: {said}"
    assert soft["error"] == said and not soft["ran"] and soft["response"] is None


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
