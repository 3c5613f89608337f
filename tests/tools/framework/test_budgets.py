"""Budgets (config.json `budgets`, tools/framework/context/budget.py): tokens, time and calls per call and per session,
recorded for every session, enforced where configured, each refusal one clear `budget` result that is not failed
work. Real runtimes and stores, a real client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import ERAS, Connect, data, error_text, runtime_with
from mcp_types import CallToolResult
from support.scripted_model import call, say, scripted_model
from test_model_provider import spec, with_key

from managed_tools.server.config.data_dir import ConfigError
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.stores import usage
from managed_tools.tools.framework.context.budget import Budgets
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.models import Arguments, WireModel

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


def budgeted(config: ServeConfig, **budgets: Any) -> ServeConfig:
    return config.model_copy(update={"budgets": Budgets.model_validate(budgets)})


def refused_for_budget(result: CallToolResult) -> str:
    assert (result.meta or {})["managed-tools/error"] == {"kind": "budget", "status": "blocked"}
    return error_text(result)


class Spent(WireModel):
    spent: int


class SpendInput(Arguments):
    tokens: int = 0
    sleep: float = 0.0


async def spend(ctx: ToolContext, args: SpendInput) -> Spent:
    """As a prompt run on a model provider does: charge the tokens the model spent; and take some time."""
    await anyio.sleep(args.sleep)
    ctx.budget.charge(args.tokens)
    return Spent(spent=args.tokens)


SPEND = ToolDefinition(
    name="probe_spend",
    title="Probe spend",
    description="Test tool: a model spends tokens for the call.",
    input_model=SpendInput,
    output_model=Spent,
    handler=spend,
)


async def test_every_session_shows_its_use_without_limits(config: ServeConfig, connect: Connect) -> None:
    async with runtime_with(config) as runtime, connect(runtime) as client:
        first = data(await client.call_tool("session_get_snapshot", {"fields": ["budget"]}))["budget"]
        await client.call_tool("environment_describe", {})
        await client.call_tool("no_such_tool", {})
        second = data(await client.call_tool("session_get_snapshot", {"fields": ["budget"]}))["budget"]
    assert first["used"] == {"calls": 0, "tokens": 0, "seconds": 0.0}
    assert first["perSession"] == {"calls": None, "tokens": None, "seconds": None} and first["over"] is None
    assert second["used"]["calls"] == 3  # the first snapshot, environment_describe, the unknown tool
    assert second["used"]["tokens"] > 300 and second["used"]["seconds"] > 0


async def test_a_session_over_its_calls_is_refused_and_another_session_is_not(
    config: ServeConfig, connect: Connect
) -> None:
    async with runtime_with(budgeted(config, perSession={"calls": 2})) as runtime:
        async with connect(runtime) as client:
            session = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
            await client.call_tool("environment_describe", {})
            refused = await client.call_tool("environment_describe", {})
            again = await client.call_tool("session_get_snapshot", {})
        async with connect(runtime, session_id=session) as client:  # a new connection to the same session
            resumed = await client.call_tool("vault_list", {})
        async with connect(runtime) as client:
            fresh = data(await client.call_tool("session_get_snapshot", {"fields": ["budget"]}))
        async with runtime.db.read() as tx:
            rows = await tx.fetchall(
                "SELECT payload FROM events WHERE session_id = ? AND type = 'span.completed' ORDER BY seq", (session,)
            )
    text = refused_for_budget(refused)
    assert "This session has used its budget (calls 2 of 2), so environment_describe was not run" in text
    assert "budgets.perSession" in text and "Traceback" not in text
    assert "vault_list was not run" in refused_for_budget(resumed)
    refused_for_budget(again)
    assert fresh["budget"]["used"]["calls"] == 0 and fresh["budget"]["perSession"]["calls"] == 2
    payloads = [json.loads(r["payload"]) if isinstance(r["payload"], str) else r["payload"] for r in rows]
    assert [(p["toolName"], p["result"], p.get("errorKind")) for p in payloads if "toolName" in p] == [
        ("session_get_snapshot", "success", None), ("environment_describe", "success", None),
        ("environment_describe", "blocked", "budget"), ("session_get_snapshot", "blocked", "budget"),
        ("vault_list", "blocked", "budget"),
    ]  # fmt: skip


@pytest.mark.parametrize("mode", ERAS)
async def test_a_child_spends_its_parents_budget(config: ServeConfig, connect: Connect, mode: str) -> None:
    """Issue 34, L1: `perSession.calls = 4` let a parent and its child make 7 calls. A child's calls count against
    its parent's budget, so together they make 4."""
    async with runtime_with(budgeted(config, perSession={"calls": 4})) as runtime:
        async with connect(runtime, mode) as parent:
            parent_id = data(await parent.call_tool("session_get_snapshot", {}))["sessionId"]
            made = data(await parent.call_tool("session_delegate", {"name": "worker", "task": "Count"}))
            child = made["childSession"]["sessionId"]
            async with connect(runtime, mode, session_id=child) as worker:
                ran = [await worker.call_tool("environment_describe", {}) for _ in range(3)]
                shown = await parent.call_tool("session_get_snapshot", {"fields": ["budget"]})
            after = await parent.call_tool("environment_describe", {})
        async with runtime.db.read() as tx:
            counted = (await usage.read(tx, parent_id)).calls, (await usage.read(tx, child)).calls
    assert [r.is_error for r in ran] == [False, False, True]
    assert "This session and the sessions it was delegated from share one budget, and have used it (calls 4 of 4)" in (
        refused_for_budget(ran[2])
    )
    assert "This session has used its budget (calls 4 of 4)" in refused_for_budget(after)
    refused_for_budget(shown)  # the parent's own next call is refused too
    assert counted == (4, 2)  # the parent's use holds its child's


async def test_a_childs_wake_spends_its_parents_budget(config: ServeConfig, connect: Connect) -> None:
    """A wake of the child, run headless on the configured model, spends the same budget: its third call is
    refused, and the parent has used all of it."""
    script = [call("environment_describe", {}), call("environment_describe", {}), call("environment_describe", {})]
    async with (
        scripted_model("openai", [*script, say("Done.")]) as model,
        runtime_with(budgeted(config, perSession={"calls": 4}).model_copy(update={"model": spec(model)})) as rt,
    ):
        await with_key(rt)
        async with connect(rt) as parent:
            made = data(await parent.call_tool("session_delegate", {"name": "worker", "task": "Count"}))
            child = made["childSession"]["sessionId"]
            parent_id = data(await parent.call_tool("session_get_snapshot", {}))["sessionId"]
        async with connect(rt, session_id=child) as worker:
            await worker.call_tool("session_schedule_wake", {"reason": "Count later", "inSeconds": 1})
            with anyio.fail_after(20):
                while True:
                    async with rt.db.read() as tx:
                        used = await usage.read(tx, parent_id)
                        status = await tx.scalar("SELECT status FROM wake_requests WHERE session_id = ?", (child,))
                    if status in ("fired", "failed"):
                        break
                    await anyio.sleep(0.2)
    assert used.calls == 4  # delegate, snapshot, the child's schedule_wake, one of the wake's three
    assert "share one budget" in json.dumps(model.requests[-1]["body"]["messages"])


async def test_a_result_over_the_per_call_tokens_is_refused_and_undone(config: ServeConfig, connect: Connect) -> None:
    async with runtime_with(budgeted(config, perCall={"tokens": 600})) as runtime, connect(runtime) as client:
        whole = await client.call_tool("agent_describe_setup", {})
        policy = await client.call_tool("agent_describe_setup", {"sections": ["policy"]})
        write = await client.call_tool("memory_write", {"target": "working_buffer", "content": "x " * 1500})
        kept = data(await client.call_tool("memory_read", {"target": "working_buffer"}))
        snapshot = data(await client.call_tool("session_get_snapshot", {"fields": ["budget"]}))["budget"]
    text = refused_for_budget(whole)
    assert "agent_describe_setup was refused: its result would take about" in text
    assert "over the per-call limit of 600" in text and "section" in text
    assert not policy.is_error
    assert "memory_write was refused" in refused_for_budget(write) and "nothing it started was kept" in text
    assert kept["versionId"] is None  # the write was rolled back with the refusal
    assert snapshot["perCall"] == {"tokens": 600, "seconds": None}
    assert snapshot["used"]["calls"] == 2  # the two refusals are not counted


async def test_a_model_spending_over_the_call_budget_is_refused(config: ServeConfig, connect: Connect) -> None:
    async with runtime_with(budgeted(config, perCall={"tokens": 500}), SPEND) as runtime, connect(runtime) as client:
        fits = data(await client.call_tool("probe_spend", {"tokens": 300}))
        over = await client.call_tool("probe_spend", {"tokens": 501})
        used = data(await client.call_tool("session_get_snapshot", {"fields": ["budget"]}))["budget"]["used"]
    assert fits == {"spent": 300}
    assert "a model spent 501 tokens for this call, 1 over its budget" in refused_for_budget(over)
    assert 300 < used["tokens"] < 400 and used["calls"] == 1


async def test_the_session_tokens_are_checked_as_a_model_spends_and_before_each_call(
    config: ServeConfig, connect: Connect
) -> None:
    async with runtime_with(budgeted(config, perSession={"tokens": 1000}), SPEND) as runtime, connect(runtime) as c:
        await c.call_tool("probe_spend", {"tokens": 600})
        spending = await c.call_tool("probe_spend", {"tokens": 600})
        crossing = await c.call_tool("environment_describe", {})  # begun under the limit, it finishes
        after = await c.call_tool("probe_spend", {"tokens": 0})
    assert "a model spent 600 tokens for this call" in refused_for_budget(spending)
    assert not crossing.is_error
    text = refused_for_budget(after)
    assert "This session has used its budget (tokens " in text and " of 1000)" in text


async def test_the_per_call_time_budget_stops_a_call(config: ServeConfig, connect: Connect) -> None:
    async with runtime_with(budgeted(config, perCall={"seconds": 0.3}), SPEND) as runtime, connect(runtime) as c:
        stopped = await c.call_tool("probe_spend", {"sleep": 5})
        quick = await c.call_tool("probe_spend", {"sleep": 0})
    assert "stopped at its per-call time budget of 0.3 s" in refused_for_budget(stopped)
    assert not quick.is_error


async def test_a_budget_refusal_is_not_failed_work(config: ServeConfig, connect: Connect) -> None:
    async with runtime_with(budgeted(config, perCall={"tokens": 400})) as runtime, connect(runtime) as client:
        await client.call_tool("outcome_define", {"title": "Budget", "successCriteria": ["budget respected"]})
        await client.call_tool("memory_write", {"target": "session_state", "content": "budget respected"})
        refused_for_budget(await client.call_tool("agent_describe_setup", {}))
        graded = data(await client.call_tool("outcome_evaluate", {}))
    assert graded["evaluation"]["status"] == "pass", graded["evaluation"]


async def test_config_json_budgets_are_checked(workspace: Path, config: ServeConfig) -> None:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    file = config.data_dir / "config.json"
    file.write_text(json.dumps({"budgets": {"perSession": {"calls": 10}, "perCall": {"seconds": 30}}}))
    built = ServeConfig.build(workspace=workspace, data_dir=config.data_dir, database=config.database)
    assert built.budgets.per_session.calls == 10 and built.budgets.per_call.seconds == 30
    file.write_text(json.dumps({"budgets": {"perCall": {"tokenz": 5}}}))
    with pytest.raises(ConfigError, match=r"budgets.perCall.tokenz: unknown key 'tokenz' \(did you mean 'tokens'\?\)"):
        ServeConfig.build(workspace=workspace, data_dir=config.data_dir, database=config.database)
    file.write_text(json.dumps({"budgets": {"perSession": {"calls": 0}}}))
    with pytest.raises(ConfigError, match=r"budgets\.perSession\.calls"):
        ServeConfig.build(workspace=workspace, data_dir=config.data_dir, database=config.database)
