"""Planning strategies (seed 002 "Planning Strategies"): one guidance text, three mindsets.

Every strategy renders the same markdown (how to use the planning tools); only the mindset paragraphs differ. The
server publishes each as an MCP prompt; this module holds only the text, so it stays free of MCP types.
"""

from __future__ import annotations

from typing import Literal

Strategy = Literal["REACT", "PLAN_ACT_REFLECT", "GOAL_DECOMPOSE_ROUTE_SYNTHESISE"]
PlanChoice = Literal["new", "continue"]
PLAN_CHOICES: tuple[PlanChoice, ...] = ("new", "continue")
# The tools the guidance tells a model to call: a server that hides any of them does not offer the guidance.
GUIDED_TOOLS = ("planning_setup_plan", "planning_read_plan", "planning_add_step", "planning_update_step")

TITLES: dict[Strategy, str] = {
    "REACT": "Plan with ReAct",
    "PLAN_ACT_REFLECT": "Plan, act, reflect",
    "GOAL_DECOMPOSE_ROUTE_SYNTHESISE": "Goal, decompose, route, synthesise",
}
SUMMARIES: dict[Strategy, str] = {
    "REACT": "Alternate short reasoning, one tool call and its observation; keep the plan as a running log.",
    "PLAN_ACT_REFLECT": "Outline the whole plan first, then execute step by step, reflecting after each.",
    "GOAL_DECOMPOSE_ROUTE_SYNTHESISE": "Restate the goal, decompose it, route each part to a tool, synthesise.",
}
MINDSETS: dict[Strategy, tuple[str, ...]] = {
    "REACT": (
        "Work in a tight loop: think briefly about what you know and what you need next, make one tool call, "
        "and read its result before deciding anything else. Let each observation change the next step.",
        "Keep the plan short and current rather than complete: add a step when an observation shows it is "
        "needed, and mark steps done as soon as the evidence says so.",
    ),
    "PLAN_ACT_REFLECT": (
        "Before acting, outline the whole path to the objective as ordered steps, each small enough to check. "
        "Then work through them in order, one in progress at a time.",
        "After each step, reflect: did the result match what you expected, and does the rest of the plan still "
        "hold? Rename, add or reorder steps when it does not, before moving on.",
    ),
    "GOAL_DECOMPOSE_ROUTE_SYNTHESISE": (
        "Start by restating the goal in your own words, with what done looks like. Decompose it into "
        "independent sub-problems, one step each.",
        "Route each sub-problem to the tool or source best suited to it, and record what each returned. "
        "Finish by synthesising the parts into one answer that addresses the restated goal, checking that "
        "no sub-problem was dropped.",
    ),
}


def render_guidance(strategy: Strategy, objective: str | None = None, plan: PlanChoice = "new") -> str:
    """The planning guidance for `strategy`: the mindset paragraphs, then how to use the planning tools."""
    if plan == "continue":
        start = (
            "- Call `planning_read_plan` first and continue the session's plan: it keeps its step ids. Do not "
            "call `planning_setup_plan`, which would replace it."
        )
    else:
        start = "- Start with `planning_setup_plan` to set the objective and initial steps (it replaces any plan)."
    if objective:
        start += f"\n- The objective: {objective.strip()}"
    lines = [
        f"# Planning: {TITLES[strategy]}",
        "",
        *[line for paragraph in MINDSETS[strategy] for line in (paragraph, "")],
        "## Using the planning tools",
        "",
        "Use a plan for multi-step or stateful work; skip it for a single quick action.",
        start,
        "- Keep step titles short and concrete (at most 500 characters); add steps with `planning_add_step`.",
        "- Mark a step `in_progress` when you start it and `done` when it is finished, with "
        "`planning_update_step`; when every step is done the plan is completed.",
        "- Call `planning_read_plan` to review the plan before deciding what to do next.",
    ]
    return "\n".join(lines)
