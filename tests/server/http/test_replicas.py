"""Two `serve --transport http` replicas on one store behind a real nginx running deploy/nginx.conf.

The replicas start once for the module per engine: on one SQLite data dir, then with `--database` on one
PostgreSQL database (the test server of tests/support/postgres_server.py), where notices cross by LISTEN/NOTIFY. Each
response names the replica that answered (`X-Managed-Tools-Replica`,
from `--replica`), recorded per client by an httpx hook: that is how a test knows a call crossed replicas.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from conftest import BACKENDS, _psql, data, error_text
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from support.postgres_server import TEMPLATE, database_url
from support.replica_cluster import NGINX, Cluster, cluster
from test_permissions import answer

from managed_tools.stores.db import Database, Row

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not Path(NGINX).exists() and not os.environ.get("CI"), reason="nginx is not installed (.ci/run installs it)"
    ),
]

REPLICA_HEADER = "x-managed-tools-replica"
SESSION_HEADER = "mcp-managed-session"
PROBE_TOOLS = str(Path(__file__).resolve().parents[2] / "support" / "probe_tools.py")
TRIES = 4  # round-robin alternates, so a retry crosses at the first or second try; a few more for slack


@dataclass(frozen=True)
class Deployment:
    cluster: Cluster
    workspace: Path
    data_dir: Path
    env: dict[str, str]
    database: str | None  # `--database`; None: SQLite in the data dir

    @property
    def args(self) -> list[str]:
        return [] if self.database is None else ["--database", self.database]


@pytest.fixture(scope="module", params=BACKENDS)
def deployment(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Deployment]:
    database: str | None = None
    if request.param == "postgresql":
        server: str = request.getfixturevalue("postgres_server")
        _psql(server, f"CREATE DATABASE replicas TEMPLATE {TEMPLATE}")
        database = database_url(server, "replicas")
    root = tmp_path_factory.mktemp("replicas")
    workspace, data_dir, home = root / "workspace", root / "data", root / "home"
    for directory in (workspace, data_dir, home):
        directory.mkdir()
    keys = data_dir / "request-state.keys"
    keys.write_text(secrets.token_hex(32) + "\n")
    keys.chmod(0o600)
    (data_dir / "config.json").write_text(json.dumps({"requestStateKeys": {"file": keys.name}}))
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
    }
    serve_args = ("--tools-module", PROBE_TOOLS, *([] if database is None else ["--database", database]))
    with cluster(workspace, data_dir, root, serve_args=serve_args, env=env) as running:
        yield Deployment(running, workspace, data_dir, env, database)


@asynccontextmanager
async def client(
    url: str, mode: str, *, session: str | None = None, trace: list[str] | None = None, **kwargs: Any
) -> AsyncIterator[Client]:
    """A real MCP client; `trace` collects the replica that answered each POST."""

    async def record(response: httpx2.Response) -> None:
        if trace is not None and response.request.method == "POST":
            trace.append(response.headers.get(REPLICA_HEADER, "?"))

    headers = {SESSION_HEADER: session} if session is not None else None
    async with (
        httpx2.AsyncClient(headers=headers, event_hooks={"response": [record]}) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, **kwargs) as mcp_client,
    ):
        yield mcp_client


async def new_session(deployment: Deployment) -> str:
    async with client(deployment.cluster.url, "auto") as mcp_client:
        session_id: str = data(await mcp_client.call_tool("session_get_snapshot", {}))["sessionId"]
    return session_id


async def fetch(deployment: Deployment, sql: str, params: tuple[str, ...]) -> list[Row]:
    """Read the deployment's store directly, whichever engine holds it."""
    db = await Database.open(deployment.database or deployment.data_dir / "state.db", local_dir=deployment.data_dir)
    try:
        async with db.read() as tx:
            return await tx.fetchall(sql.format(tool=tx.dialect.json_text("e.payload", "toolName")), params)
    finally:
        await db.close()


async def probe_rows(deployment: Deployment, label: str) -> int:
    rows = await fetch(deployment, "SELECT COUNT(*) FROM probe WHERE label = ?", (label,))
    return int(rows[0][0])


async def tool_pids(deployment: Deployment, session_id: str, tool: str) -> set[int]:
    """The processes whose wakes recorded this session's completed calls of `tool`."""
    rows = await fetch(
        deployment,
        "SELECT DISTINCT w.pid FROM events e JOIN wakes w ON w.id = e.wake_id WHERE e.session_id = ? "
        "AND e.type = 'span.completed' AND {tool} = ?",
        (session_id, tool),
    )
    return {int(row[0]) for row in rows}


# ---- 2026-07-28: stateless, round-robin ------------------------------------------------------------------------


async def test_the_calls_of_one_session_spread_over_both_replicas(deployment: Deployment) -> None:
    session_id = await new_session(deployment)
    trace: list[str] = []
    async with client(deployment.cluster.url, "auto", session=session_id, trace=trace) as mcp_client:
        for _ in range(4):
            data(await mcp_client.call_tool("probe_plain", {"label": "spread"}))
    assert set(trace) == {"r1", "r2"}
    assert await tool_pids(deployment, session_id, "probe_plain") == {r.pid for r in deployment.cluster.replicas}
    assert await probe_rows(deployment, "spread") == 4


async def test_a_request_state_retry_is_honoured_by_the_other_replica(deployment: Deployment) -> None:
    # The question is sealed by one replica; the answer's retry, round-robin, reaches the other, which can only
    # unseal it with the shared key ring.
    session_id = await new_session(deployment)
    approve = answer("accept", {"approve": True})
    crossed = 0
    for attempt in range(TRIES):
        trace: list[str] = []
        label = f"sealed-{attempt}"
        async with client(
            deployment.cluster.url, "auto", session=session_id, trace=trace, elicitation_callback=approve
        ) as mcp_client:
            assert data(await mcp_client.call_tool("probe_danger", {"label": label}))["rows"] >= 1
        assert await probe_rows(deployment, label) == 1
        asked, retried = trace[-2:]
        crossed += asked != retried
        if crossed:
            break
    assert crossed


async def test_an_approval_from_the_command_line_unblocks_the_call_on_the_other_replica(
    deployment: Deployment,
) -> None:
    session_id = await new_session(deployment)
    crossed = False
    for attempt in range(TRIES):
        trace: list[str] = []
        label = f"out-of-band-{attempt}"
        async with client(deployment.cluster.url, "auto", session=session_id, trace=trace) as mcp_client:
            blocked = await mcp_client.call_tool("probe_danger", {"label": label})
            request_id = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
            approved = _approve(deployment, request_id)
            assert approved.returncode == 0, approved.stderr
            ran = data(await mcp_client.call_tool("probe_danger", {"label": label}))
        assert "managed-tools approve" in error_text(blocked) and ran["rows"] >= 1
        crossed = trace[-2] != trace[-1]
        if crossed:
            break
    assert crossed


def _approve(deployment: Deployment, request_id: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "managed_tools.server", "approve", request_id, "--data-dir", str(deployment.data_dir)]
    argv += ["--workspace", str(deployment.workspace), *deployment.args]
    return subprocess.run(argv, env=deployment.env, capture_output=True, text=True, check=False)


async def test_memory_written_through_one_replica_is_found_through_the_other(deployment: Deployment) -> None:
    session_id = await new_session(deployment)
    trace: list[str] = []
    async with client(deployment.cluster.url, "auto", session=session_id, trace=trace) as mcp_client:
        content = "The balancer keeps quokka sessions sticky."
        data(await mcp_client.call_tool("memory_write", {"target": "session_state", "content": content}))
        written_by = trace[-1]
        for _ in range(TRIES):
            found = data(await mcp_client.call_tool("memory_search", {"query": "quokka"}))
            if trace[-1] != written_by:
                break
    assert trace[-1] != written_by
    assert "quokka" in json.dumps(found["hits"])


# ---- resource notifications cross replicas, both eras ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_subscriber_on_one_replica_hears_of_a_write_through_the_other(
    deployment: Deployment, mode: str
) -> None:
    session_id = await new_session(deployment)
    uri = f"managed-tools://sessions/{session_id}/memory/session_state"
    heard: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(message.params.uri)
            arrived.set()

    async def write_through(replica: str) -> None:
        url = deployment.cluster.replica(replica).url
        async with client(url, "auto", session=session_id) as writer:
            data(await writer.call_tool("memory_write", {"target": "session_state", "content": f"via {replica}"}))

    trace: list[str] = []
    cluster_url = deployment.cluster.url
    async with client(cluster_url, mode, session=session_id, trace=trace, message_handler=on_message) as listener:
        if mode == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated for 2026-07-28
                await listener.subscribe_resource(uri)
            other = "r2" if trace[-1] == "r1" else "r1"
            await write_through(other)
            with anyio.fail_after(10):
                await arrived.wait()
        else:
            async with listener.listen(resource_subscriptions=[uri]) as subscription:
                other = "r2" if trace[-1] == "r1" else "r1"
                await write_through(other)
                with anyio.fail_after(10):
                    async for event in subscription:
                        heard.append(getattr(event, "uri", ""))
                        break
    assert heard and set(heard) == {uri}  # (2026-07-28: the listen stream and the message handler both see it)


# ---- handshake era: stateful sessions, sticky --------------------------------------------------------------------


async def test_handshake_era_sessions_stay_on_the_replica_that_opened_them(deployment: Deployment) -> None:
    approve = answer("accept", {"approve": True})
    traces: list[list[str]] = []
    for number in range(2):
        trace: list[str] = []
        async with client(deployment.cluster.url, "legacy", trace=trace, elicitation_callback=approve) as mcp_client:
            for _ in range(3):
                data(await mcp_client.call_tool("probe_plain", {"label": "sticky"}))
            # the question travels on the call's own stream, and the answer comes back to the same process
            data(await mcp_client.call_tool("probe_danger", {"label": f"sticky-{number}"}))
        traces.append(trace)
    assert [len(set(trace)) for trace in traces] == [1, 1]  # every request of a session answered by one replica
    assert {trace[0] for trace in traces} == {"r1", "r2"}  # and the sessions themselves round-robin
    routed = [line for line in deployment.cluster.access_log.read_text().splitlines() if "session=r" in line]
    assert routed and all(line.split("replica=")[1][:2] == line.split("session=")[1][:2] for line in routed)
