"""Proactive wakes: a session schedules a wake; it is listed, graded `sleeping`, and a running server fires it,
headless through a model provider or offered to the next client that attaches."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, Connect, data, error_text
from mcp import Client

from managed_tools.stores import events, sessions, wake_requests
from managed_tools.tools.framework.context.context import Runtime

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

OUTCOME = {"title": "Ship the report", "successCriteria": ["the report is published"]}


def wakes_uri(session_id: str) -> str:
    return f"managed-tools://sessions/{session_id}/wakes/queued"


@asynccontextmanager
async def updates_of(client: Client, mode: str, uri: str) -> AsyncIterator[anyio.Event]:
    """An event set when `uri` is next updated: `resources/subscribe` in the handshake era, `subscriptions/listen`
    in 2026-07-28."""
    heard = anyio.Event()
    if mode == "legacy":
        client_updates.append((uri, heard))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.subscribe_resource(uri)
        yield heard
        return
    async with client.listen(resource_subscriptions=[uri]) as subscription, anyio.create_task_group() as tg:

        async def hear() -> None:
            async for event in subscription:
                if getattr(event, "uri", None) == uri:
                    heard.set()

        tg.start_soon(hear)
        yield heard
        tg.cancel_scope.cancel()


client_updates: list[tuple[str, anyio.Event]] = []


async def on_message(message: Any) -> None:
    if isinstance(message, types.ResourceUpdatedNotification):
        for uri, heard in client_updates:
            if uri == message.params.uri:
                heard.set()


async def grade(client: Client) -> dict[str, Any]:
    return data(await client.call_tool("outcome_grade", {}))


async def until_status(client: Client, wanted: str, seconds: float = 15) -> dict[str, Any]:
    with anyio.fail_after(seconds):
        while True:
            listed = data(await client.call_tool("session_list_wakes", {"includeDone": True}))
            if listed["wakes"] and listed["wakes"][0]["status"] == wanted:
                return dict(listed["wakes"][0])
            await anyio.sleep(0.2)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_wake_is_listed_graded_sleeping_fires_and_is_offered_to_the_next_client(
    runtime: Runtime, connect: Connect, mode: str
) -> None:
    """No model provider: the wake falls due, subscribers hear it, and the next client attaching is offered it."""
    async with connect(runtime, mode, message_handler=on_message) as client:
        await client.call_tool("outcome_define", OUTCOME)
        scheduled = data(
            await client.call_tool("session_schedule_wake", {"reason": "Check the CI run", "inSeconds": 2})
        )
        wake = scheduled["wake"]
        session_id = wake["sessionId"]
        assert (wake["status"], wake["priority"], scheduled["queuedCount"]) == ("queued", "normal", 1)
        listed = data(await client.call_tool("session_list_wakes", {}))
        assert [w["wakeRequestId"] for w in listed["wakes"]] == [wake["wakeRequestId"]]
        assert listed["nextWakeAt"] == wake["dueAt"]
        graded = await grade(client)
        assert graded["grade"]["status"] == "sleeping"
        assert "Check the CI run" in graded["grade"]["summary"]
        snapshot = data(await client.call_tool("session_get_snapshot", {}))
        assert snapshot["nextWakeAt"] == wake["dueAt"]
        assert [w["status"] for w in snapshot["queuedWakes"]] == ["queued"]
        assert snapshot["outcomeGrade"] == "sleeping" and snapshot["outcomeStatus"] == "not_ready"
        async with updates_of(client, mode, wakes_uri(session_id)) as heard:
            with anyio.fail_after(15):
                await heard.wait()
        due = await until_status(client, "due")
        assert due["wakeRequestId"] == wake["wakeRequestId"]
        shown = data(await client.call_tool("session_get_snapshot", {}))
        assert [w["status"] for w in shown["queuedWakes"]] == ["due"] and shown["nextWakeAt"] is None
        assert (await grade(client))["grade"]["status"] == "sleeping"  # still waiting, for a client now
        resource = await client.read_resource(wakes_uri(session_id))
        assert wake["wakeRequestId"] in resource.contents[0].text  # type: ignore[union-attr]

    async with connect(runtime, mode, session_id=session_id) as later:
        snapshot = data(await later.call_tool("session_get_snapshot", {}))
        (offered,) = snapshot["queuedWakes"]
        assert offered["status"] == "offered" and offered["offeredToWakeId"] == snapshot["lastWakeId"]
        trace = data(
            await later.call_tool("session_get_trace", {"wakeId": snapshot["lastWakeId"], "types": ["wake.offered"]})
        )
        assert [e["payload"]["reason"] for e in trace["events"]] == ["Check the CI run"]
        assert (await grade(later))["grade"]["status"] != "sleeping"
    async with connect(runtime, mode, session_id=session_id) as third:  # offered once, to one connection
        assert data(await third.call_tool("session_get_snapshot", {}))["queuedWakes"] == []


class Provider:
    """The headless port as a configured model provider fills it: it runs the session and answers."""

    def __init__(self, runtime: Runtime, *, fail: bool = False) -> None:
        self.runtime, self.fail = runtime, fail
        self.runs: list[tuple[str, str, str]] = []

    async def __call__(self, session_id: str, owner: str, message: str) -> str:
        self.runs.append((session_id, owner, message))
        if self.fail:
            raise RuntimeError("the provider answered 503")
        async with self.runtime.db.write() as tx:
            await events.append_event(tx, session_id, None, "agent.message", {"text": "CI is green"})
        return "CI is green"


@pytest.mark.parametrize("mode", ERAS)
async def test_with_a_model_provider_a_due_wake_runs_the_session_headless(
    runtime: Runtime, connect: Connect, mode: str
) -> None:
    provider = Provider(runtime)
    headless = dataclasses.replace(runtime, headless=provider)
    async with connect(headless, mode) as client:
        await client.call_tool("outcome_define", OUTCOME)
        wake = data(await client.call_tool("session_schedule_wake", {"reason": "Check CI", "inSeconds": 2}))["wake"]
        assert (await grade(client))["grade"]["status"] == "sleeping"
        fired = await until_status(client, "fired")
        assert fired["result"] == "CI is green"
        assert provider.runs == [(wake["sessionId"], sessions.LOCAL_OWNER, "Scheduled wake: Check CI")]
        kinds = data(await client.call_tool("session_get_events", {"types": ["wake.running", "wake.fired"]}))
        assert [e["type"] for e in kinds["events"]] == ["wake.running", "wake.fired"]
        assert kinds["events"][1]["payload"]["result"] == "success"
        assert (await grade(client))["grade"]["status"] != "sleeping"


async def test_a_provider_error_is_the_wakes_result(runtime: Runtime, connect: Connect) -> None:
    async with connect(dataclasses.replace(runtime, headless=Provider(runtime, fail=True))) as client:
        await client.call_tool("session_schedule_wake", {"reason": "Check CI", "inSeconds": 1})
        failed = await until_status(client, "failed")
        assert failed["result"] == "RuntimeError: the provider answered 503"


async def test_bad_times_and_too_many_wakes_are_refused_with_one_message(runtime: Runtime, connect: Connect) -> None:
    now = datetime.now(UTC)
    async with connect(runtime) as client:
        cases: dict[str, dict[str, Any]] = {
            "give exactly one of dueAt and inSeconds": {"reason": "x"},
            "exactly one": {"reason": "x", "inSeconds": 5, "dueAt": (now + timedelta(minutes=1)).isoformat()},
            "has passed": {"reason": "x", "dueAt": (now - timedelta(minutes=1)).isoformat()},
            "more than 24 hours away": {"reason": "x", "dueAt": (now + timedelta(hours=25)).isoformat()},
            "timezone": {"reason": "x", "dueAt": "2030-01-01T10:00:00"},
            "less than or equal to 86400": {"reason": "x", "inSeconds": 86_401},
        }
        for message, args in cases.items():
            assert message in error_text(await client.call_tool("session_schedule_wake", args)), args
        later = now + timedelta(hours=2)
        at = later.astimezone(timezone(timedelta(hours=2))).isoformat()  # another offset, the same instant
        first = data(await client.call_tool("session_schedule_wake", {"reason": "a", "dueAt": at}))["wake"]
        assert first["dueAt"].startswith(later.strftime("%Y-%m-%dT%H:%M"))
        for reason in ("b", "c"):
            await client.call_tool("session_schedule_wake", {"reason": reason, "inSeconds": 600, "priority": "high"})
        full = error_text(await client.call_tool("session_schedule_wake", {"reason": "d", "inSeconds": 60}))
        assert "already has 3 queued wakes" in full
        listed = data(await client.call_tool("session_list_wakes", {}))
        assert [w["reason"] for w in listed["wakes"]] == ["b", "c", "a"]  # soonest first
        cancelled = data(await client.call_tool("session_cancel_wake", {"wakeRequestId": first["wakeRequestId"]}))
        assert cancelled["wake"]["status"] == "cancelled"
        again = error_text(await client.call_tool("session_cancel_wake", {"wakeRequestId": first["wakeRequestId"]}))
        assert "is cancelled; only a queued or due wake can be cancelled" in again
        assert data(await client.call_tool("session_schedule_wake", {"reason": "d", "inSeconds": 60}))


async def test_a_wake_belongs_to_its_sessions_principal(runtime: Runtime, connect: Connect) -> None:
    due = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    async with runtime.db.write() as tx:
        theirs = await sessions.create_session(tx, runtime.environment.agent_id, owner="oauth:someone-else")
        stranger = await wake_requests.schedule(
            tx, theirs.id, reason="their secret plan", due_at=due, priority="normal", requested_in=None
        )
    async with connect(runtime) as client:
        for tool, args in (
            ("session_cancel_wake", {"wakeRequestId": stranger.id}),
            ("session_cancel_wake", {"wakeRequestId": "0192f0c4-0000-7000-8000-000000000000"}),
            ("session_list_wakes", {"sessionId": theirs.id}),
        ):
            text = error_text(await client.call_tool(tool, args))
            assert "not available" in text and "secret plan" not in text
        with pytest.raises(Exception, match="not available"):
            await client.read_resource(wakes_uri(theirs.id))
    async with runtime.db.read() as tx:
        kept = await wake_requests.get_owned(tx, stranger.id, runtime.environment.agent_id, owner="oauth:someone-else")
    assert kept.status == "queued"
