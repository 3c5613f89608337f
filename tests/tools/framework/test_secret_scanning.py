"""Secret scanning at the gate (issue 27 item 3): credentials in the shell's and the upstream servers' arguments ask a
person first, shown masked; credentials in their results are masked before the model, the events and the index see
them; every hit is an audited event without the value. The detector's false positives are measured on this
repository's own source text."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import ERAS, Connect, data, error_text
from test_permissions import answer
from test_permissions import client_for as permission_client
from test_upstream import PROBE, client_for, serving

from managed_tools.sandbox import layers
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.wire import secret_scan
from managed_tools.tools.framework.wire.redaction import REDACTED

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[3]
# Made-up credentials of the well-known shapes (none is real; a scanner cannot tell).
GITHUB = "ghp_" + "R8x2Lq9Vt4Zc7Nw1Kp5Ys3Hd6Fg0Jm2Bv8Ae"
AWS_ID = "AKIA" + "QZ7XK3M2PL9WN4RT"
PASSWORD = "Tr0ub4dor&3-horse-battery"
PRIVATE_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + "\n".join(textwrap.wrap(base64.b64encode(bytes(range(256)) * 3).decode(), 64))
    + "\n-----END RSA PRIVATE KEY-----"
)


def kinds_of(text: str) -> list[str]:
    return sorted({hit.kind for hit in secret_scan.find(text)})


def test_the_well_known_shapes_are_found() -> None:
    assert kinds_of(f"token {GITHUB} here") == ["GitHub Token"]
    assert kinds_of(f"aws_access_key_id {AWS_ID}") == ["AWS Access Key"]
    assert kinds_of(f"export DB_PASSWORD={PASSWORD}") == ["Secret Keyword"]
    assert kinds_of(f'config = {{"api_key": "{PASSWORD}"}}') == ["Secret Keyword"]
    assert kinds_of('token = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3A"') == ["Base64 High Entropy String"]


def test_a_private_key_is_masked_whole_across_its_lines() -> None:
    text = f"before\n{PRIVATE_KEY}\nafter"
    masked = secret_scan.masked(text)
    assert masked == f"before\n{REDACTED}\nafter"
    body_line = PRIVATE_KEY.splitlines()[3]
    assert body_line not in masked
    cut = secret_scan.masked("head\n" + PRIVATE_KEY[:300])  # output cut before the END line: masked to the end
    assert cut == "head\n" + REDACTED
    in_json = json.dumps({"stdout": PRIVATE_KEY})  # the text twin of a result: its line breaks escaped
    assert body_line not in secret_scan.masked(in_json)


def test_prose_code_and_base64_are_no_storm() -> None:
    prose = "secret: never its value.\nsecrets: set[str] = set()\nif args.secret_command == 'list':\n"
    assert secret_scan.find(prose) == []
    # A base64 blob of a key, wrapped over many lines, is not one hit per line.
    wrapped = "\n".join(textwrap.wrap(base64.b64encode(PRIVATE_KEY.encode()).decode(), 76))
    assert len(secret_scan.find(wrapped)) <= 1
    integrity = '"integrity": "sha512-jdf7FHh6A1lzjpHHQUgxsg2GeER2vMetnAOfeActzcoli6jamlK+NAwL6Dsr5Fl3BS3tYUQz=="'
    assert secret_scan.find(integrity) == []  # a lock file's public content hash


def test_no_false_positives_in_this_repositorys_own_source() -> None:
    """The server's own code and docs (not tests/, whose fixtures are secrets on purpose) hold no credential, so
    every hit there is a false positive; bench/secret_scan.py prints the figure for the whole tree."""
    sources = [p for d in ("tools", "server", "stores", "sandbox", "docs", "bench") for p in (REPO / d).rglob("*")]
    hits = [
        (str(path.relative_to(REPO)), hit.kind)
        for path in sources
        if path.is_file() and path.suffix in (".py", ".md", ".c", ".toml", ".json")
        for hit in secret_scan.find(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert hits == []


async def events_of(rt: Runtime, kind: str) -> list[dict[str, Any]]:
    async with rt.db.read() as tx:
        rows = await tx.fetchall("SELECT payload FROM events WHERE type = ? ORDER BY seq", (kind,))
    return [json.loads(row["payload"]) for row in rows]


async def everything_recorded(rt: Runtime) -> str:
    """Every event, every shell history row and the search index, as one text."""
    async with rt.db.read() as tx:
        parts = [str(dict(r)) for r in await tx.fetchall("SELECT * FROM events")]
        parts += [str(dict(r)) for r in await tx.fetchall("SELECT * FROM shell_commands")]
        parts += [str(dict(r)) for r in await tx.fetchall("SELECT * FROM search_docs")]
        parts += [str(dict(r)) for r in await tx.fetchall("SELECT * FROM event_search_docs")]
    return "\n".join(parts)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_secret_in_a_commands_output_is_masked_everywhere(
    runtime: Runtime, connect: Connect, workspace: Path, mode: str
) -> None:
    env = f"USER=ci\nexport API_TOKEN={GITHUB}\nDB_PASSWORD={PASSWORD}\n{PRIVATE_KEY}\n"
    (workspace / "deploy.env").write_text(env)
    async with connect(runtime, mode) as client:
        shown = await client.call_tool("bash", {"command": "cat", "args": ["deploy.env"]})
        last = data(await client.call_tool("shell_read_last_output", {}))
        found = data(await client.call_tool("memory_search", {"query": "API_TOKEN"}))
    shown_text = json.dumps(shown.structured_content) + "".join(getattr(b, "text", "") for b in shown.content)
    for secret in (GITHUB, PASSWORD, PRIVATE_KEY.splitlines()[2]):
        assert secret not in shown_text
        assert secret not in json.dumps(last)
        assert secret not in json.dumps(found)
        assert secret not in await everything_recorded(runtime)
    assert "USER=ci" in shown_text and REDACTED in shown_text
    audited = await events_of(runtime, "secret.detected")
    assert audited[0]["toolName"] == "bash" and audited[0]["where"] == "result"
    assert set(audited[0]["kinds"]) == {"GitHub Token", "Private Key", "Secret Keyword"}


async def test_scanning_can_be_turned_off(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "config.json").write_text(json.dumps({"secretScanning": {"results": False}}))
    (workspace / "deploy.env").write_text(f"API_TOKEN={GITHUB}\n")
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    async with open_runtime(config) as rt, connect(rt) as client:
        shown = data(await client.call_tool("bash", {"command": "cat", "args": ["deploy.env"]}))
        assert GITHUB in shown["stdout"]
        assert await events_of(rt, "secret.detected") == []


async def test_a_mistyped_setting_is_named(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "config.json").write_text(json.dumps({"secretScanning": {"result": False}}))
    with pytest.raises(Exception, match=r"secretScanning\.result.*did you mean 'results'"):
        ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")


# ---- upstream servers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_a_secret_in_an_upstream_argument_asks_a_person_first(workspace: Path, tmp_path: Path, mode: str) -> None:
    asked: list[str] = []
    async with serving(workspace, tmp_path, {"probe": PROBE}) as rt:
        async with client_for(rt, mode, elicitation_callback=answer("decline", None, asked)) as client:
            refused = await client.call_tool("probe__echo", {"text": f"use {GITHUB} please"})
        async with client_for(rt, mode, elicitation_callback=answer("accept", {"approve": True}, asked)) as client:
            plain = await client.call_tool("probe__echo", {"text": "nothing secret"})
            approved = await client.call_tool("probe__echo", {"text": f"use {GITHUB} please"})
        recorded = await everything_recorded(rt)
        audited = await events_of(rt, "secret.detected")
        async with rt.db.read() as tx:
            requests = [str(dict(r)) for r in await tx.fetchall("SELECT * FROM approvals")]
    assert refused.is_error and "denied" in error_text(refused)
    assert "echo: nothing secret" in json.dumps(plain.model_dump(mode="json"))
    assert len(asked) == 2  # the two calls with the token, not the plain one (an always_allow tool)
    assert GITHUB not in asked[0] and "probe__echo" in asked[0] and "use [secret redacted] please" in asked[0]
    assert "looks like a credential (GitHub Token)" in asked[0]
    # Approved, the call ran with the real value; its result echoes it, and the result is masked in turn.
    assert "echo: use [secret redacted] please" in json.dumps(approved.model_dump(mode="json"))
    assert GITHUB not in json.dumps(approved.model_dump(mode="json"))
    assert GITHUB not in recorded and GITHUB not in "".join(requests)
    # One record per call that carried it (a 2026-07-28 client's retry with the answer is a call of its own).
    assert [e["where"] for e in audited][-1] == "result" and {e["where"] for e in audited[:-1]} == {"arguments"}
    assert all(e["kinds"] == ["GitHub Token"] for e in audited)


async def test_a_secret_in_an_upstream_result_is_masked(workspace: Path, tmp_path: Path) -> None:
    servers = {"probe": {**PROBE, "env": {"DEPLOY_ID": f"id={AWS_ID}"}}}
    async with serving(workspace, tmp_path, servers) as rt, client_for(rt, "auto") as client:
        result = await client.call_tool("probe__env", {"name": "DEPLOY_ID"})
        recorded = await everything_recorded(rt)
        audited = await events_of(rt, "secret.detected")
    shown = json.dumps(result.model_dump(mode="json"))
    assert not result.is_error and f"id={REDACTED}" in shown
    assert AWS_ID not in shown and AWS_ID not in recorded
    assert audited == [{"spanId": audited[0]["spanId"], "toolName": "probe__env", "where": "result",
                        "kinds": ["AWS Access Key"]}]  # fmt: skip


# ---- the session env ----------------------------------------------------------------------------------------


@pytest.mark.skipif(bool(layers.missing(layers.describe())), reason="a sandbox layer is missing here (CI has them all)")
@pytest.mark.parametrize("mode", ERAS)
async def test_a_key_in_the_session_env_asks_under_auto_sandboxed_as_one_typed_in(
    workspace: Path, tmp_path: Path, mode: str
) -> None:
    """Issue 34, L3: a key put into the session env with shell_set_env and used by a command ran unasked under
    --auto-sandboxed, while the same key typed into the command asked. The env is scanned with the command."""
    asked: list[str] = []
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data", auto_sandboxed=True)
    use = {"command": 'printf %s "$GREETING" | wc -c'}
    async with (
        open_runtime(config.model_copy(update={"shell_network": False})) as rt,
        permission_client(rt, mode, elicitation_callback=answer("decline", None, asked)) as client,
    ):
        before = data(await client.call_tool("shell_run", use))  # no credential anywhere: contained, unasked
        data(await client.call_tool("shell_set_env", {"key": "GREETING", "value": GITHUB}))
        from_env = await client.call_tool("shell_run", use)
        checked = data(await client.call_tool("permissions_check", {"toolName": "shell_run", "toolArgs": use}))
        data(await client.call_tool("shell_unset_env", {"key": "GREETING"}))
        typed = await client.call_tool("shell_run", {"command": f"printf %s {GITHUB} | wc -c"})
        audited = await events_of(rt, "secret.detected")
        async with rt.db.read() as tx:
            requests = [str(dict(r)) for r in await tx.fetchall("SELECT * FROM approvals")]
    assert before["stdout"].strip() == "0"
    assert "denied" in error_text(from_env) and "denied" in error_text(typed)
    assert len(asked) == 2
    assert "GREETING=[secret redacted]" in asked[0] and GITHUB not in asked[0]
    assert "the env set with shell_set_env holds what looks like a credential (GitHub Token)" in asked[0]
    assert "its arguments hold what looks like a credential (GitHub Token)" in asked[1]
    assert checked["requiresConfirmation"] and checked["approvalState"] == "none"
    # One record per call that carried it (a 2026-07-28 client's retry with the answer is a call of its own).
    assert audited[0]["where"] == "env" and {e["where"] for e in audited} == {"env", "arguments"}
    assert all(e["kinds"] == ["GitHub Token"] for e in audited)
    assert GITHUB not in "".join(requests)
