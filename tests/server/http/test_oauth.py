"""OAuth 2.1 resource server over real HTTP: a local issuer (keys generated here, its metadata and JWKS served by a
real HTTP server in a thread), the real app on uvicorn, raw requests for the refusals and `mcp.Client` with the
bearer header for everything a principal may and may not do, in both eras."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import mcp_types as types
import pytest
from conftest import ERAS, data, error_text
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError
from support.oauth_issuer import ALL, Issuer, b64, serving_issuer
from test_http import INITIALIZE, POST_HEADERS
from test_pages import Person
from test_permissions import YES, answer, rows

from managed_tools.server.auth import oauth_tokens
from managed_tools.server.auth.principal import owner_of
from managed_tools.server.cli.command import main
from managed_tools.server.config.serve_config import ConfigError, ServeConfig
from managed_tools.server.config.user_config import OAuthConfig
from managed_tools.server.consent.board import Pages
from managed_tools.server.http.config import HttpConfig
from managed_tools.server.http.transport import bind, build_app, http_server
from managed_tools.server.pages.serving import serving_pages
from managed_tools.server.runtime.opening import open_runtime, startup_extensions
from managed_tools.stores import event_search, events, search, sessions
from managed_tools.stores.db import Database
from managed_tools.stores.event_search import EventScope
from managed_tools.stores.sessions import LOCAL_OWNER
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

SECRET_WORD = "zebracornium"


# ---- the issuer: tests/support/oauth_issuer.py ---------------------------------------------------------------


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with serving_issuer() as made:
        yield made


# ---- the resource server ---------------------------------------------------------------------------------------


@pytest.fixture
def config(workspace: Path, database_option: str | None) -> ServeConfig:
    return ServeConfig.build(
        workspace=workspace, data_dir=None, tool_modules=("support.probe_tools",), database=database_option
    )


@dataclass(frozen=True)
class Served:
    url: str
    runtime: Runtime

    @property
    def resource(self) -> str:
        return self.url + "/mcp"


@asynccontextmanager
async def serving(
    config: ServeConfig, issuer: Issuer, *required: str, pages: Pages | None = None, **options: Any
) -> AsyncIterator[Served]:
    """The real app on a real uvicorn on a free loopback port, its resource URL that port's /mcp; `options` go to
    HttpConfig.build."""
    http = HttpConfig.build(transport="http", port=0, environ={}, no_token=True, **options)  # OAuth: below
    with bind(http) as sock:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        settings = OAuthConfig(issuer=issuer.url, resource=f"{url}/mcp", required_scopes=required)
        http = http.model_copy(update={"oauth": settings})
        extensions = startup_extensions(config)
        async with open_runtime(config, extensions) as runtime:
            server = http_server(build_app(runtime, config, http, extensions, pages), http, "WARNING")
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve, [sock])
                with anyio.fail_after(10):
                    while not server.started:  # noqa: ASYNC110 (uvicorn offers no event to wait on)
                        await anyio.sleep(0.01)
                yield Served(url, runtime)
                await server.stop()


@asynccontextmanager
async def client(served: Served, token: str, mode: str = "auto", **kwargs: Any) -> AsyncIterator[Client]:
    headers = {"authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(served.resource, http_client=http), mode=mode, **kwargs) as mcp_client,
    ):
        yield mcp_client


async def post(served: Served, token: str | None, **headers: str) -> httpx2.Response:
    sent = {**POST_HEADERS, **headers, **({"authorization": f"Bearer {token}"} if token is not None else {})}
    async with httpx2.AsyncClient() as http:
        return await http.post(served.resource, json=INITIALIZE, headers=sent)


def metadata_url(served: Served) -> str:
    return f"{served.url}/.well-known/oauth-protected-resource/mcp"


# ---- refusals --------------------------------------------------------------------------------------------------


def _unsigned(header: dict[str, Any], claims: dict[str, Any]) -> bytes:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}".encode()


def _claims(issuer: Issuer, served: Served) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": issuer.url, "aud": served.resource, "sub": "mallory", "scope": ALL, "iat": now, "exp": now + 300}


def forged(kind: str, issuer: Issuer, served: Served) -> str:
    """A token that must be refused, by kind."""
    now = int(time.time())
    if kind == "expired":
        return issuer.token(served.resource, exp=now - 120, iat=now - 600)
    if kind == "not yet valid":
        return issuer.token(served.resource, nbf=now + 120)
    if kind == "wrong audience":
        return issuer.token(f"{served.url}/other")
    if kind == "wrong issuer":
        return issuer.token(served.resource, iss="http://127.0.0.1:1/evil")
    if kind == "another key":
        other = rsa.generate_private_key(65537, 2048)
        return jwt.encode(_claims(issuer, served), other, algorithm="RS256", headers={"kid": "rsa-1"})
    if kind == "alg none":
        return (_unsigned({"alg": "none", "typ": "JWT"}, _claims(issuer, served)) + b".").decode()
    if kind == "HS256 with the public key":
        pem = issuer.rsa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        signing_input = _unsigned({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, _claims(issuer, served))
        return f"{signing_input.decode()}.{b64(hmac.new(pem, signing_input, hashlib.sha256).digest())}"
    if kind == "HS256 with the JWKS's shared key":
        signing_input = _unsigned({"alg": "HS256", "typ": "JWT", "kid": "oct-1"}, _claims(issuer, served))
        secret = b"a shared secret never to be used"
        return f"{signing_input.decode()}.{b64(hmac.new(secret, signing_input, hashlib.sha256).digest())}"
    if kind == "no subject":
        return issuer.token(served.resource, sub=None)
    if kind == "garbage":
        return "not.a.jwt"
    if kind in MALFORMED_CLAIMS:
        return issuer.token(served.resource, **MALFORMED_CLAIMS[kind](now))
    raise AssertionError(kind)


# Claims of the wrong JSON type (PyJWT itself takes a numeric string for exp, nbf and iat).
MALFORMED_CLAIMS: dict[str, Callable[[int], dict[str, Any]]] = {
    "string exp": lambda now: {"exp": str(now + 300)},
    "string nbf": lambda now: {"nbf": str(now - 10)},
    "boolean exp": lambda now: {"exp": True},
    "numeric subject": lambda now: {"sub": 42},
    "scope as a list": lambda now: {"scope": ["tools:read", "tools:write"]},
    "object client_id": lambda now: {"client_id": {"id": "x"}},
}

REFUSED = [
    "expired",
    "not yet valid",
    "wrong audience",
    "wrong issuer",
    "another key",
    "alg none",
    "HS256 with the public key",
    "HS256 with the JWKS's shared key",
    "no subject",
    "garbage",
    *MALFORMED_CLAIMS,
]


async def test_refusals_carry_the_challenge_and_never_the_token(
    config: ServeConfig, issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    async with serving(config, issuer) as served:
        missing = await post(served, None)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url(served)}"'
        for kind in REFUSED:
            token = forged(kind, issuer, served)
            refused = await post(served, token)
            assert refused.status_code == 401, kind
            challenge = refused.headers["www-authenticate"]
            assert challenge == f'Bearer error="invalid_token", resource_metadata="{metadata_url(served)}"', kind
            assert token not in refused.text
            assert token not in caplog.text, kind
        short = await post(served, issuer.token(served.resource, scope="email profile"))
        assert short.status_code == 403
        assert short.headers["www-authenticate"] == (
            f'Bearer error="insufficient_scope", scope="tools:read", resource_metadata="{metadata_url(served)}"'
        )
        assert (await post(served, issuer.token(served.resource))).status_code == 200


async def test_required_scopes_are_named_in_the_403(config: ServeConfig, issuer: Issuer) -> None:
    async with serving(config, issuer, "mcp:use") as served:
        short = await post(served, issuer.token(served.resource, scope="tools:read"))
        assert short.status_code == 403
        assert 'error="insufficient_scope", scope="mcp:use"' in short.headers["www-authenticate"]
        assert (await post(served, issuer.token(served.resource, scope="tools:read mcp:use"))).status_code == 200


async def test_protected_resource_metadata(config: ServeConfig, issuer: Issuer) -> None:
    async with serving(config, issuer) as served, httpx2.AsyncClient() as http:
        for url in (metadata_url(served), f"{served.url}/.well-known/oauth-protected-resource"):
            response = await http.get(url)  # no token needed
            assert response.status_code == 200, url
            document = response.json()
            assert document["resource"] == served.resource
            assert document["authorization_servers"] == [issuer.url]  # exactly: no trailing slash added
            assert document["scopes_supported"] == ["tools:read", "tools:write", "approvals"]
            assert document["bearer_methods_supported"] == ["header"]


# ---- what a valid token may do ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_a_valid_token_works_with_each_algorithm(config: ServeConfig, issuer: Issuer, mode: str) -> None:
    async with serving(config, issuer) as served:
        for alg in ("RS256", "ES256", "EdDSA"):
            async with client(served, issuer.token(served.resource, alg=alg), mode) as mcp:
                assert data(await mcp.call_tool("session_get_snapshot", {}))["sessionId"]


async def test_keys_are_fetched_again_for_an_unknown_kid_at_a_bounded_rate(
    config: ServeConfig, issuer: Issuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oauth_tokens, "REFETCH_SECONDS", 2.0)
    async with serving(config, issuer) as served:
        assert (await post(served, issuer.token(served.resource))).status_code == 200
        assert issuer.jwks_fetches == 1
        # The issuer rotates to a new key: its first token fetches the keys again, with no restart.
        issuer.rsa_key, issuer.rsa_kid = rsa.generate_private_key(65537, 2048), "rsa-2"
        await anyio.sleep(2.1)
        assert (await post(served, issuer.token(served.resource))).status_code == 200
        assert issuer.jwks_fetches == 2
        stranger = jwt.encode(_claims(issuer, served), issuer.rsa_key, algorithm="RS256", headers={"kid": "nope"})
        assert (await post(served, stranger)).status_code == 401  # just fetched: no fetch again yet
        assert issuer.jwks_fetches == 2
        await anyio.sleep(2.1)
        assert (await post(served, stranger)).status_code == 401  # one fetch, still unknown
        assert (await post(served, stranger)).status_code == 401  # at once again: no second fetch
        assert issuer.jwks_fetches == 3


@pytest.mark.parametrize("mode", ERAS)
async def test_the_read_scope_sees_and_calls_only_read_only_tools(
    config: ServeConfig, issuer: Issuer, mode: str
) -> None:
    async with serving(config, issuer) as served:
        async with client(served, issuer.token(served.resource, scope="tools:read"), mode) as reader:
            listed = (await reader.list_tools()).tools
            refused = await reader.call_tool("probe_plain", {"label": "x"})
            near = await reader.call_tool("memory_writ", {})
            assert data(await reader.call_tool("session_get_snapshot", {}))["sessionId"]
        async with client(served, issuer.token(served.resource, scope="tools:write"), mode) as writer:
            everything = {tool.name for tool in (await writer.list_tools()).tools}
            assert data(await writer.call_tool("probe_plain", {"label": "x"})) == {"rows": 1}
    names = {tool.name for tool in listed}
    assert names and all(tool.annotations and tool.annotations.read_only_hint for tool in listed)
    assert {"session_get_snapshot", "read", "grep"} <= names
    assert not {"probe_plain", "probe_danger", "write", "memory_write"} & names
    assert names < everything and "memory_write" in everything
    assert "Unknown tool 'probe_plain'" in error_text(refused)
    assert "memory_write" not in error_text(near)


@pytest.mark.parametrize("mode", ERAS)
async def test_without_the_approvals_scope_a_pause_waits_for_the_server(
    config: ServeConfig, issuer: Issuer, mode: str
) -> None:
    seen: list[str] = []
    async with serving(config, issuer) as served:
        token = issuer.token(served.resource, scope="tools:read tools:write")
        elicits = answer("accept", {"approve": True}, seen)
        async with client(served, token, mode, elicitation_callback=elicits) as mcp:
            waiting = await mcp.call_tool("probe_danger", {"label": "x"})
        assert "needs a person's approval" in error_text(waiting)
        assert seen == []
        assert await rows(served.runtime) == 0


# ---- one principal's work is not another's ---------------------------------------------------------------------


@pytest.mark.both_backends
async def subscribe(mcp: Client, mode: str, uri: str) -> None:
    """Subscribe to a resource the way the era does: resources/subscribe, or a subscriptions/listen stream."""
    if mode == "legacy":
        await mcp.subscribe_resource(uri)
        return
    async with mcp.listen(resource_subscriptions=[uri]):
        pass


@pytest.mark.parametrize("mode", ERAS)
async def test_another_principal_cannot_reach_a_principals_sessions_or_events(
    config: ServeConfig, issuer: Issuer, mode: str
) -> None:
    async with serving(config, issuer) as served:
        alice, bob = issuer.token(served.resource), issuer.token(served.resource, sub="bob")
        async with client(served, alice, mode) as mcp:
            session = data(await mcp.call_tool("session_get_snapshot", {}))["sessionId"]
            note = {"target": "session_state", "content": f"the plan: {SECRET_WORD}"}
            data(await mcp.call_tool("memory_write", note))
        # Attaching to it by header: the owner may, another principal gets what a missing session gets.
        assert (await post(served, alice, **{"mcp-managed-session": session})).status_code == 200
        refused = await post(served, bob, **{"mcp-managed-session": session})
        assert refused.status_code == 400 and "is not available" in refused.text
        uri = f"managed-tools://sessions/{session}/memory/session_state"
        async with client(served, bob, mode) as mcp:
            listed = data(await mcp.call_tool("session_list", {}))
            events = await mcp.call_tool("session_get_events", {"sessionId": session})
            memory = await mcp.call_tool("memory_read", {"target": "session_state", "sessionId": session})
            found = data(await mcp.call_tool("session_search_context", {"query": SECRET_WORD, "includeCurrent": True}))
            searched = data(await mcp.call_tool("memory_search", {"query": SECRET_WORD}))
            with pytest.raises(MCPError):
                await mcp.read_resource(uri)
            with pytest.raises(MCPError, match="is not available"):  # nor hear of its changes
                await subscribe(mcp, mode, uri)
        assert session not in {s["sessionId"] for s in listed["sessions"]}
        assert "is not available" in error_text(events)
        assert "is not available" in error_text(memory)
        assert found["hits"] == [] and searched["hits"] == []
        # The same searches find them for their owner: the refusals above are the principal's, not the query's.
        async with client(served, alice, mode) as mcp:
            mine = data(await mcp.call_tool("session_search_context", {"query": SECRET_WORD, "includeCurrent": True}))
            recalled = data(await mcp.call_tool("memory_search", {"query": SECRET_WORD}))
            assert SECRET_WORD in (await mcp.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
            await subscribe(mcp, mode, uri)
        assert session in {hit["sessionId"] for hit in mine["hits"]}
        assert session in {hit.get("sessionId") for hit in recalled["hits"]}


@pytest.mark.both_backends
async def test_the_stores_searches_stay_inside_the_principals_sessions(database: Path | str, tmp_path: Path) -> None:
    """Below the tools, on both engines: the event index (SQLite's token of agent and owner, PostgreSQL's owner
    column) and the text index answer a principal with its own sessions' texts and the agent's shared memory only."""
    alice, bob = owner_of("https://issuer.example", "alice"), owner_of("https://issuer.example", "bob")
    db = await Database.open(database, local_dir=tmp_path)
    try:
        async with db.write() as tx:
            made = {o: (await sessions.create_session(tx, "default", owner=o)).id for o in (LOCAL_OWNER, alice, bob)}
            for owner, session in made.items():
                await events.append_event(tx, session, None, "user.note", {"text": f"{SECRET_WORD} of {owner}"})
                key = f"memory:session:{session}:session_state"
                await search.upsert(tx, key=key, source="session_state", agent_id="default", session_id=session,
                                    title="state", body=SECRET_WORD)  # fmt: skip
            await search.upsert(tx, key="memory:agent:default:notes", source="notes", agent_id="default",
                                session_id=made[alice], title="notes", body=f"shared {SECRET_WORD}")  # fmt: skip
        async with db.read() as tx:
            for owner, session in made.items():
                hits = await event_search.search_events(tx, EventScope("default", owner), [SECRET_WORD], [], 10)
                texts = await search.search(tx, "default", [SECRET_WORD], [], 10, owner=owner)
                assert [hit.session_id for hit in hits] == [session]
                assert {text.key for text in texts} == {f"memory:session:{session}:session_state",
                                                         "memory:agent:default:notes"}  # fmt: skip
    finally:
        await db.close()


async def test_another_principal_cannot_answer_a_principals_approval(config: ServeConfig, issuer: Issuer) -> None:
    """2026-07-28: the sealed requestState is bound to the principal it was issued to (the SDK's binding, fed the
    verified token by our auth middleware)."""
    async with serving(config, issuer) as served:
        alice, bob = issuer.token(served.resource), issuer.token(served.resource, sub="bob")
        yes = answer("accept", {"approve": True})
        arguments = {"label": "alice's"}
        async with client(served, alice, elicitation_callback=yes) as mcp:
            first = await mcp.session.call_tool("probe_danger", arguments, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            state = first.request_state
        async with client(served, bob, elicitation_callback=yes) as mcp:
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await mcp.session.call_tool("probe_danger", arguments, input_responses=YES, request_state=state)
        assert await rows(served.runtime) == 0
        async with client(served, alice, elicitation_callback=yes) as mcp:
            done = await mcp.session.call_tool("probe_danger", arguments, input_responses=YES, request_state=state)
        assert data(done) == {"rows": 1}


# ---- each principal's share (server/auth/fair_share.py) -------------------------------------------------------------


async def test_a_principal_past_its_share_of_sessions_gets_429_and_others_still_connect(
    config: ServeConfig, issuer: Issuer
) -> None:
    async with serving(config, issuer, max_sessions=8) as served:  # a share of 2 each
        alice, bob = issuer.token(served.resource), issuer.token(served.resource, sub="bob")
        async with client(served, alice, "legacy") as one, client(served, alice, "legacy"):
            refused = await post(served, alice)
            assert refused.status_code == 429 and refused.headers["retry-after"]
            assert "You have 2 MCP sessions open already" in refused.json()["error"]["message"]
            async with client(served, bob, "legacy") as bobs, client(served, bob, "legacy"):
                assert data(await bobs.call_tool("environment_describe", {}))
                assert (await post(served, bob)).status_code == 429
            await one.list_tools()
        async with client(served, alice, "legacy") as again:  # closed sessions are no longer counted
            assert data(await again.call_tool("environment_describe", {}))


async def test_a_principal_past_its_share_of_sse_streams_gets_429(config: ServeConfig, issuer: Issuer) -> None:
    async with serving(config, issuer, max_sessions=4) as served:  # a share of 1 each
        alice, bob = issuer.token(served.resource), issuer.token(served.resource, sub="bob")
        sse = f"{served.url}/sse"
        async with (
            httpx2.AsyncClient(timeout=10) as http,
            http.stream("GET", sse, headers={"authorization": f"Bearer {alice}"}) as first,
        ):
            assert first.status_code == 200
            second = await http.get(sse, headers={"authorization": f"Bearer {alice}"})
            assert second.status_code == 429 and "SSE streams" in second.json()["error"]["message"]
            async with http.stream("GET", sse, headers={"authorization": f"Bearer {bob}"}) as bobs:
                assert bobs.status_code == 200


async def test_pages_past_a_principals_share_are_refused_and_no_one_elses_open_page_is_forgotten(
    config: ServeConfig, issuer: Issuer
) -> None:
    """Once a page board of 8 evicted the oldest page to make room: one principal asking often pushed out another's
    open approval. Now each principal holds at most 2 pages, a full board refuses, and live pages stay."""

    async def ask(mcp: Client, label: str) -> types.InputRequiredResult | types.CallToolResult:
        return await mcp.session.call_tool("probe_danger", {"label": label}, allow_input_required=True)

    def page_url(round_: types.InputRequiredResult | types.CallToolResult) -> str:
        assert isinstance(round_, types.InputRequiredResult), round_
        params = (round_.input_requests or {})["consent"].params
        assert isinstance(params, types.ElicitRequestURLParams)
        return params.url

    async with (
        serving_pages(Pages(for_approvals=True, capacity=8)) as pages,
        serving(config, issuer, pages=pages) as served,
        httpx2.AsyncClient() as http,
    ):
        alice, bob = issuer.token(served.resource), issuer.token(served.resource, sub="bob")
        async with client(served, bob, elicitation_callback=Person()) as mcp:
            bobs_page = page_url(await ask(mcp, "bob"))
        async with client(served, alice, elicitation_callback=Person()) as mcp:
            first = await ask(mcp, "alice 0")
            page_url(await ask(mcp, "alice 1"))
            refused = await ask(mcp, "alice 2")
            assert isinstance(refused, types.CallToolResult)
            assert "2 one-time pages of yours are waiting" in error_text(refused)
            assert isinstance(first, types.InputRequiredResult)
            no: types.InputResponses = {"consent": types.ElicitResult(action="decline")}
            await mcp.session.call_tool("probe_danger", {"label": "alice 0"}, input_responses=no,
                                        request_state=first.request_state)  # fmt: skip
            page_url(await ask(mcp, "alice 3"))  # her answered page made room for her
        for name in ("carol", "dave", "erin"):  # the board fills: 1 + 2 + 2 + 2 + 1 = 8 live pages
            async with client(served, issuer.token(served.resource, sub=name), elicitation_callback=Person()) as mcp:
                for label in [name] if name == "erin" else [name, f"{name} again"]:
                    page_url(await ask(mcp, label))
        async with client(served, issuer.token(served.resource, sub="frank"), elicitation_callback=Person()) as mcp:
            full = await ask(mcp, "frank")
        assert isinstance(full, types.CallToolResult) and "Too many one-time pages" in error_text(full)
        assert (await http.get(bobs_page)).status_code == 200  # bob's question is still there to answer
        assert await rows(served.runtime) == 0


# ---- configuration ---------------------------------------------------------------------------------------------


def test_configuration_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    settings = OAuthConfig(issuer="https://auth.example.com", resource="https://mcp.example.com/mcp")
    assert HttpConfig.build(transport="http", host="0.0.0.0", environ={}, oauth=settings).oauth == settings
    with pytest.raises(ConfigError, match="Choose one way to authenticate"):
        HttpConfig.build(transport="http", environ={"MANAGED_TOOLS_TOKEN": "t" * 20}, oauth=settings)
    for issuer in ("http://auth.example.com", "https://auth.example.com/?x=1", "ftp://auth.example.com"):
        with pytest.raises(ValidationError):
            OAuthConfig(issuer=issuer, resource="https://mcp.example.com/mcp")
    assert OAuthConfig(issuer="http://127.0.0.1:9000", resource="http://localhost:8765/mcp").issuer
    assert main(["serve", "--oauth-issuer", "https://auth.example.com"]) == 2
    assert "--oauth-issuer applies to --transport http or sse" in capsys.readouterr().err
    assert main(["serve", "--transport", "http", "--oauth-issuer", "https://auth.example.com"]) == 2
    assert "--oauth-resource: Field required" in capsys.readouterr().err
