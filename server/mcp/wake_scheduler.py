"""The scheduler of a running server: it fires the wake requests that fall due (tools/sessions/wakes.py).

With a model provider configured (`Runtime.headless`), a due wake runs its session headless, its reason as the
turn; the answer is recorded on the request and as a `wake.fired` event. Without one, the wake becomes `due`: its
session's wake resource is updated (subscribers hear it), snapshots list it, and the next client that attaches to
the session is offered it (server/connection/attach.py). Each request is taken by one conditional update, so of several
server processes sharing the store exactly one fires it.
"""

from __future__ import annotations

import logging

import anyio
from anyio.abc import TaskGroup

from managed_tools.server.mcp.resources import Notifier
from managed_tools.stores import events, sessions, wake_requests
from managed_tools.stores.errors import StoreError
from managed_tools.stores.wake_requests import WakeRequest
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.context.ports import HeadlessRun
from managed_tools.tools.framework.context.uris import view_uri

POLL_SECONDS = 1.0
log = logging.getLogger("managed_tools.wakes")


async def run_wakes(runtime: Runtime, notifier: Notifier, *, poll_seconds: float = POLL_SECONDS) -> None:
    """Fire due wakes until cancelled; a headless run goes on beside the polling, so one long run delays no other."""
    async with anyio.create_task_group() as runs:
        while True:
            try:
                await fire_due(runtime, notifier, runs)
            except StoreError as exc:  # a locked or unreachable store: the next poll tries again
                log.warning("wake scheduler: %s", exc)
            await anyio.sleep(poll_seconds)


async def fire_due(runtime: Runtime, notifier: Notifier, runs: TaskGroup) -> list[WakeRequest]:
    """Take every wake due now: start its headless run in `runs`, or mark it due for a client. Returns those taken."""
    async with runtime.db.read() as tx:
        found = await wake_requests.due_now(tx, runtime.environment.agent_id)
    if not found:
        return []
    run = runtime.headless
    taken: list[tuple[WakeRequest, str]] = []
    async with runtime.db.write() as tx:
        for record in found:
            if not await wake_requests.take(tx, record.id, "running" if run is not None else "due"):
                continue  # another process took it
            owner = (await sessions.get_session(tx, record.session_id)).owner
            await events.append_event(
                tx,
                record.session_id,
                None,
                "wake.running" if run is not None else "wake.due",
                {"wakeRequestId": record.id, "reason": record.reason, "dueAt": record.due_at},
                summary=f"Scheduled wake {'runs' if run is not None else 'is due'}: {record.reason}",
            )
            taken.append((record, owner))
    await notifier.updated({view_uri("wake_requests", record.session_id) for record, _ in taken})
    if run is not None:
        for record, owner in taken:
            runs.start_soon(_run, runtime, notifier, run, record, owner)
    return [record for record, _ in taken]


async def _run(runtime: Runtime, notifier: Notifier, run: HeadlessRun, record: WakeRequest, owner: str) -> None:
    try:
        answer, ok = await run(record.session_id, owner, f"Scheduled wake: {record.reason}"), True
    except Exception as exc:  # the provider's error is the wake's result; the scheduler goes on
        answer, ok = f"{type(exc).__name__}: {exc}", False
    with anyio.CancelScope(shield=True):  # a stopping server still records how the run ended
        async with runtime.db.write() as tx:
            await wake_requests.finish(tx, record.id, ok=ok, result=answer)
            await events.append_event(
                tx,
                record.session_id,
                None,
                "wake.fired",
                {
                    "wakeRequestId": record.id,
                    "result": "success" if ok else "error",
                    "answer": answer[: wake_requests.MAX_RESULT_CHARS],
                },
                summary=f"Scheduled wake {'ran' if ok else 'failed'}: {record.reason}",
            )
        await notifier.updated([view_uri("wake_requests", record.session_id)])
