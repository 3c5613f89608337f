"""The planning strategies (seed 002) as MCP prompts, served beside any an extension publishes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

import mcp_types as types
from mcp import MCPError

from managed_tools.server.runtime.extensions import Prompt, PromptArgument, PromptMessage
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.wire.content import TextBlock
from managed_tools.tools.planning.strategies import (
    GUIDED_TOOLS,
    PLAN_CHOICES,
    SUMMARIES,
    TITLES,
    Strategy,
    render_guidance,
)


def _prompt(strategy: Strategy) -> Prompt:
    async def render(arguments: dict[str, str]) -> Sequence[PromptMessage]:
        plan = arguments.get("plan") or "new"
        if plan not in PLAN_CHOICES:
            raise MCPError(code=types.INVALID_PARAMS, message=f"plan must be one of: {', '.join(PLAN_CHOICES)}.")
        text = render_guidance(strategy, arguments.get("objective"), "continue" if plan == "continue" else "new")
        return [PromptMessage(role="user", content=TextBlock(text=text))]

    return Prompt(
        name=strategy,
        title=TITLES[strategy],
        description=SUMMARIES[strategy],
        arguments=(
            PromptArgument(name="objective", description="What the plan is for (optional).", required=False),
            PromptArgument(
                name="plan",
                description="new: set up a new plan; continue: keep working the session's plan.",
                required=False,
                choices=PLAN_CHOICES,
            ),
        ),
        render=render,
    )


PLANNING_PROMPTS: tuple[Prompt, ...] = tuple(_prompt(strategy) for strategy in get_args(Strategy))


def planning_prompts(registry: Registry) -> tuple[Prompt, ...]:
    """The strategies, where the planning tools their guidance names are all served."""
    return PLANNING_PROMPTS if all(name in registry for name in GUIDED_TOOLS) else ()
