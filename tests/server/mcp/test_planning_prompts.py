"""The planning strategies (seed 002) as MCP prompts: listed, rendered with their mindset, completed."""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
import pytest
from conftest import ERAS, Connect, data
from mcp import MCPError

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import StartupError, startup_extensions
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.planning.strategies import MINDSETS

pytestmark = pytest.mark.anyio
STRATEGIES = ["REACT", "PLAN_ACT_REFLECT", "GOAL_DECOMPOSE_ROUTE_SYNTHESISE"]


def text_of(result: types.GetPromptResult) -> str:
    (message,) = result.messages
    assert message.role == "user" and message.content.type == "text"
    return message.content.text


@pytest.mark.parametrize("mode", ERAS)
async def test_each_strategy_is_a_prompt_with_its_own_mindset(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode=mode) as client:
        listed = {p.name: p for p in (await client.list_prompts()).prompts}
        rendered = {name: text_of(await client.get_prompt(name, {})) for name in STRATEGIES}
    assert set(STRATEGIES) <= set(listed)
    for name in STRATEGIES:
        assert [(a.name, a.required) for a in listed[name].arguments or []] == [("objective", False), ("plan", False)]
        text = rendered[name]
        assert all(paragraph in text for paragraph in MINDSETS[name])  # type: ignore[index]
        others = [p for other in STRATEGIES if other != name for p in MINDSETS[other]]  # type: ignore[index]
        assert not any(paragraph in text for paragraph in others)
        for tool in ("planning_setup_plan", "planning_add_step", "planning_update_step", "planning_read_plan"):
            assert f"`{tool}`" in text
    # Only the mindset varies: the tool guidance is the same text in every strategy.
    tails = {text.split("## Using the planning tools")[1] for text in rendered.values()}
    assert len(tails) == 1


@pytest.mark.parametrize("mode", ERAS)
async def test_arguments_shape_the_guidance_and_are_completed(runtime: Runtime, connect: Connect, mode: str) -> None:
    async with connect(runtime, mode=mode) as client:
        new = text_of(await client.get_prompt("REACT", {"objective": "Ship the fix", "plan": "new"}))
        cont = text_of(await client.get_prompt("PLAN_ACT_REFLECT", {"plan": "continue"}))
        with pytest.raises(MCPError, match="plan must be one of: new, continue"):
            await client.get_prompt("REACT", {"plan": "sideways"})
        ref = types.PromptReference(name="GOAL_DECOMPOSE_ROUTE_SYNTHESISE")
        everything = await client.complete(ref, {"name": "plan", "value": ""})
        typed = await client.complete(ref, {"name": "plan", "value": "CO"})
        free = await client.complete(ref, {"name": "objective", "value": "c"})
        with pytest.raises(MCPError, match="Unknown prompt"):
            await client.complete(types.PromptReference(name="REACTOR"), {"name": "plan", "value": ""})
    assert "The objective: Ship the fix" in new and "`planning_setup_plan` to set the objective" in new
    assert "Do not call `planning_setup_plan`" in cont
    assert everything.completion.values == ["new", "continue"]
    assert typed.completion.values == ["continue"]
    assert free.completion.values == []


async def test_the_rendered_guidance_drives_the_planning_tools(runtime: Runtime, connect: Connect) -> None:
    """The tools the prompt names are the catalogue's: following the guidance works."""
    async with connect(runtime) as client:
        text = text_of(await client.get_prompt("PLAN_ACT_REFLECT", {"objective": "Ship"}))
        assert "planning_setup_plan" in text
        plan = data(await client.call_tool("planning_setup_plan", {"objective": "Ship", "initialSteps": ["a"]}))
    assert plan["plan"]["objective"] == "Ship"


def test_an_extension_cannot_take_a_strategy_name(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "ext_react.py").write_text(
        "from managed_tools.server.runtime.extensions import Prompt, PromptMessage\n"
        "from managed_tools.tools.framework.wire.content import TextBlock\n"
        "async def render(arguments):\n"
        "    return [PromptMessage(role='user', content=TextBlock(text='mine'))]\n"
        "PROMPTS = [Prompt(name='REACT', description='taken', render=render)]\n"
    )
    config = ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=(str(tmp_path / "ext_react.py"),))
    with pytest.raises(StartupError, match="Each prompt must be published once; registered twice: REACT"):
        startup_extensions(config)
