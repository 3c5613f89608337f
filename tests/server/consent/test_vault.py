"""Tool variables and the encrypted vault: resolution order, asking a person (both eras), the secret CLI, the key.

Real parts: the SQLite file (its bytes scanned), the key file on disk, `managed-tools secret` as a subprocess, and a
real MCP client in-process in both protocol eras.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import keyring
import mcp_types as types
import pytest
from conftest import ERAS, data, error_text
from keyring.backend import KeyringBackend
from mcp import Client
from mcp.client import ClientRequestContext
from pydantic import SecretStr

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import StartupError, open_runtime
from managed_tools.server.runtime.secrets import key_store
from managed_tools.stores import session_variables, sessions, vault
from managed_tools.stores.db import as_dict
from managed_tools.stores.vault import Vault
from managed_tools.stores.vault_key import VaultKeyError
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.context.ports import VariableAnswer, VariableRequest
from managed_tools.tools.framework.context.variable_sources import EnvReference

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parents[2]
SECRET = "sk-live-Zq8uV3nR7tP2"


def serve_config(workspace: Path, database: str | None = None, **variables: Any) -> ServeConfig:
    config = ServeConfig.build(
        workspace=workspace, data_dir=None, tool_modules=("support.probe_variables",), database=database
    )
    return config.model_copy(update={"variables": variables})


@asynccontextmanager
async def client_for(rt: Runtime, mode: str = "auto", *, session_id: str | None = None, secret_input: Any = None,
                     **kwargs: Any) -> AsyncIterator[Client]:  # fmt: skip
    server = build_server(
        rt, transport="memory", session_id=session_id, approval_wait_seconds=5, secret_input=secret_input
    )
    async with Client(server, mode=mode, **kwargs) as client:
        yield client


Asked = list[types.ElicitRequestParams]


def form(answers: dict[str, Any], asked: Asked, action: str = "accept") -> Any:
    """A client that answers each form by its one field: `value` for a variable, `approve` for a permission."""

    async def on_elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        assert isinstance(params, types.ElicitRequestFormParams)
        field = next(iter(params.requested_schema["properties"]))
        return types.ElicitResult(action=action, content={field: answers[field]} if action == "accept" else None)

    return on_elicit


async def set_secret(rt: Runtime, name: str, value: str, agent: str = "default") -> None:
    assert rt.variables.vault is not None
    async with rt.db.write() as tx:
        await vault.set_secret(tx, rt.variables.vault, agent, name, SecretStr(value))


def db_bytes(config: ServeConfig) -> bytes:
    return b"".join(p.read_bytes() for p in config.data_dir.glob("state.db*"))


# ---- resolution order ------------------------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_session_wins_over_vault_wins_over_config(workspace: Path, database_option: str | None) -> None:
    config = serve_config(workspace, database_option, REGION="from-config", NOTE="a note")
    async with open_runtime(config) as rt:
        async with client_for(rt) as client:
            assert data(await client.call_tool("probe_region", {})) == {
                "region": "from-config",
                "zone": None,
                "note": "a note",
            }
        await set_secret(rt, "REGION", "from-vault")
        async with client_for(rt) as client:
            assert data(await client.call_tool("probe_region", {}))["region"] == "from-vault"
            async with rt.db.write() as tx:
                session = (await sessions.list_agent_sessions(tx, "default", owner=sessions.LOCAL_OWNER, limit=1))[0]
                await session_variables.set_value(tx, session.id, "REGION", "from-session")
            assert data(await client.call_tool("probe_region", {}))["region"] == "from-session"
        async with client_for(rt) as other:  # another session: the vault again
            assert data(await other.call_tool("probe_region", {}))["region"] == "from-vault"


@pytest.mark.both_backends
async def test_a_child_inherits_plain_values_but_never_scoped_ones(
    workspace: Path, database_option: str | None
) -> None:
    async with open_runtime(serve_config(workspace, database_option)) as rt:
        async with rt.db.write() as tx:
            parent = await sessions.create_session(tx, "default")
            child = await sessions.create_session(tx, "default", parent_id=parent.id)
            grandchild = await sessions.create_session(tx, "default", parent_id=child.id)
            for name, value in (("REGION", "parent-region"), ("ZONE", "parent-zone")):
                await session_variables.set_value(tx, parent.id, name, value)
        async with client_for(rt, session_id=parent.id) as client:
            assert data(await client.call_tool("probe_zone", {}))["zone"] == "parent-zone"
        async with client_for(rt, session_id=grandchild.id) as client:
            assert data(await client.call_tool("probe_region", {}))["region"] == "parent-region"
            scoped = await client.call_tool("probe_zone", {})
        async with rt.db.write() as tx:
            await session_variables.set_value(tx, child.id, "REGION", "child-region")
        async with client_for(rt, session_id=grandchild.id) as client:
            assert data(await client.call_tool("probe_region", {}))["region"] == "child-region"  # the nearest
    assert (scoped.meta or {})["managed-tools/error"] == {"kind": "requires_action", "status": "blocked"}
    assert "needs the value of ZONE" in error_text(scoped)


async def test_config_gives_a_secret_only_by_environment_reference(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROBE_ACME_KEY", SECRET)
    with_env = serve_config(workspace, API_KEY=EnvReference(env="PROBE_ACME_KEY"))
    async with open_runtime(with_env) as rt, client_for(rt) as client:
        assert data(await client.call_tool("probe_key", {}))["length"] == len(SECRET)
    with pytest.raises(StartupError, match="gives the secret API_KEY as plain text"):
        async with open_runtime(serve_config(workspace, API_KEY=SECRET)):
            pass


# ---- asking a person ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_a_required_text_is_asked_by_form_and_kept_for_the_session(workspace: Path, mode: str) -> None:
    asked: Asked = []
    async with open_runtime(serve_config(workspace)) as rt:
        async with client_for(rt, mode, elicitation_callback=form({"value": "eu-west-9"}, asked)) as client:
            first = data(await client.call_tool("probe_region", {}))
            again = data(await client.call_tool("probe_region", {}))
        async with rt.db.read() as tx:
            recorded = json.dumps([dict(r) for r in await tx.fetchall("SELECT type, payload FROM events")])
    assert first == again == {"region": "eu-west-9", "zone": None, "note": None}
    assert len(asked) == 1 and "REGION" in asked[0].message and "The region to work in" in asked[0].message
    assert "variable.provided" in recorded and "eu-west-9" not in recorded  # named, never its value


@pytest.mark.parametrize("mode", ERAS)
async def test_a_declined_form_fails_closed(workspace: Path, mode: str) -> None:
    async with open_runtime(serve_config(workspace)) as rt:
        async with client_for(rt, mode, elicitation_callback=form({}, [], action="decline")) as client:
            refused = await client.call_tool("probe_region", {})
        async with client_for(rt, mode) as no_elicitation:
            unavailable = await no_elicitation.call_tool("probe_region", {})
    assert "did not give a value for REGION, so probe_region did not run" in error_text(refused)
    assert (refused.meta or {})["managed-tools/error"] == {"kind": "permission", "status": "blocked"}
    assert "set `variables.REGION` in the server's config.json" in error_text(unavailable)


async def test_a_variable_then_a_permission_in_one_modern_call(workspace: Path) -> None:
    asked: Asked = []
    answers = {"value": "ap-south-7", "approve": True}
    async with (
        open_runtime(serve_config(workspace)) as rt,
        client_for(rt, elicitation_callback=form(answers, asked)) as c,
    ):
        assert data(await c.call_tool("probe_region_ask", {}))["region"] == "ap-south-7"
    assert [next(iter(p.requested_schema["properties"])) for p in asked] == ["value", "approve"]  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_secret_is_never_asked_by_form(workspace: Path, mode: str) -> None:
    asked: Asked = []
    on_elicit = form({"value": SECRET}, asked)
    async with open_runtime(serve_config(workspace)) as rt, client_for(rt, mode, elicitation_callback=on_elicit) as c:
        result = await c.call_tool("probe_key", {})
    assert asked == []
    assert (result.meta or {})["managed-tools/error"] == {"kind": "requires_action", "status": "blocked"}
    action = (result.meta or {})["managed-tools/requiresAction"]
    assert action == {
        "kind": "variable_required",
        "variable": "API_KEY",
        "type": "secret",
        "toolName": "probe_key",
        "command": "managed-tools secret set API_KEY",
    }
    assert "run `managed-tools secret set API_KEY`" in error_text(result)
    assert str(rt.environment.data_dir) not in error_text(result)


class PageInput:
    """Stands in for the loopback page's URL-mode asker (server/pages/, built apart): a person typed the secret."""

    def __init__(self, answer: VariableAnswer) -> None:
        self.answer = answer
        self.input_required: types.InputRequiredResult | None = None
        self.asked: list[VariableRequest] = []

    async def ask(self, request: VariableRequest) -> VariableAnswer:
        self.asked.append(request)
        return self.answer


async def test_a_secret_given_through_url_mode_goes_to_the_vault_encrypted(workspace: Path) -> None:
    config = serve_config(workspace)
    page = PageInput(VariableAnswer(status="provided", value=SecretStr(SECRET)))
    async with open_runtime(config) as rt:
        async with client_for(rt, secret_input=lambda *_: page) as client:
            used = data(await client.call_tool("probe_key", {}))
            listed = data(await client.call_tool("vault_list", {}))
        async with client_for(rt) as later:  # the vault keeps it for the agent's other sessions
            assert data(await later.call_tool("probe_key", {})) == used
    assert used["length"] == len(SECRET) and len(page.asked) == 1
    assert page.asked[0].description == "The Acme API key"
    assert [s["name"] for s in listed["secrets"]] == ["API_KEY"] and listed["secrets"][0]["scope"] == "agent"
    assert SECRET.encode() not in db_bytes(config)


# ---- the CLI ---------------------------------------------------------------------------------------------------


async def cli(config: ServeConfig, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    argv = [sys.executable, "-m", "managed_tools.server", "secret", *args, "--workspace", str(config.workspace)]
    with anyio.fail_after(60):
        done = await anyio.run_process(argv, input=stdin, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_secret_set_from_a_terminal_then_the_call_runs(workspace: Path) -> None:
    config = serve_config(workspace)
    assert await cli(config, "set", "API_KEY", stdin=SECRET.encode() + b"\n") == (
        0,
        "Stored API_KEY in the vault of agent default, encrypted.\n",
        "",
    )
    async with open_runtime(config) as rt, client_for(rt) as client:
        assert data(await client.call_tool("probe_key", {}))["length"] == len(SECRET)
    status, listed, _ = await cli(config, "list")
    assert status == 0 and listed.startswith("API_KEY\tset ") and SECRET not in listed
    assert SECRET.encode() not in db_bytes(config)
    assert (await cli(config, "delete", "API_KEY"))[0] == 0
    async with open_runtime(config) as rt, client_for(rt) as client:
        assert "managed-tools secret set API_KEY" in error_text(await client.call_tool("probe_key", {}))
    status, _, error = await cli(config, "set", "API_KEY")
    assert (status, error) == (1, "managed-tools: No value given for API_KEY; nothing was stored.\n")
    status, _, error = await cli(config, "delete", "not-a-name")
    assert status == 1 and "is not a variable name" in error


# ---- the key -----------------------------------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_a_value_is_bound_to_its_name_and_agent(workspace: Path, database_option: str | None) -> None:
    async with open_runtime(serve_config(workspace, database_option)) as rt:
        await set_secret(rt, "API_KEY", SECRET)
        assert rt.variables.vault is not None
        async with rt.db.write() as tx:
            await tx.execute("INSERT INTO vault_secrets SELECT 'default', 'OTHER', nonce, ciphertext, key_id, set_at "
                             "FROM vault_secrets WHERE name = 'API_KEY'")  # fmt: skip
            await tx.execute("INSERT INTO vault_secrets SELECT 'mallory', name, nonce, ciphertext, key_id, set_at "
                             "FROM vault_secrets WHERE name = 'API_KEY'")  # fmt: skip
            sealed = await tx.fetchall("SELECT nonce, ciphertext FROM vault_secrets WHERE agent_id = 'default'")
            for agent, name in (("default", "OTHER"), ("mallory", "API_KEY")):
                with pytest.raises(VaultKeyError, match="altered or moved") as caught:
                    await vault.get_secret(tx, rt.variables.vault, agent, name)
                assert SECRET not in str(caught.value) and caught.value.__cause__ is None
        await set_secret(rt, "API_KEY", SECRET)  # a fresh nonce each time
        async with rt.db.read() as tx:
            again = await tx.fetchone("SELECT nonce FROM vault_secrets WHERE agent_id = 'default' AND name = 'API_KEY'")
    assert again is not None and again["nonce"] not in {row["nonce"] for row in sealed}


@pytest.mark.both_backends
async def test_the_vaults_rows_never_hold_the_plaintext(workspace: Path, database_option: str | None) -> None:
    """On either engine (PostgreSQL's bytea as SQLite's BLOB): what the table keeps is a nonce, a ciphertext and a key
    id; the value comes back only through the key."""
    config = serve_config(workspace, database_option)
    async with open_runtime(config) as rt:
        await set_secret(rt, "API_KEY", SECRET)
        assert rt.variables.vault is not None
        async with rt.db.read() as tx:
            rows = [as_dict(row) for row in await tx.fetchall("SELECT * FROM vault_secrets")]
            opened = await vault.get_secret(tx, rt.variables.vault, "default", "API_KEY")
    [row] = rows
    assert isinstance(row["nonce"], bytes) and isinstance(row["ciphertext"], bytes)
    assert len(row["ciphertext"]) == len(SECRET) + 16  # AES-GCM: the value's length and a 16-byte tag
    kept = b"".join(value if isinstance(value, bytes) else str(value).encode() for value in row.values())
    assert SECRET.encode() not in kept and SECRET.encode().hex().encode() not in kept
    assert opened is not None and opened.get_secret_value() == SECRET


async def test_a_wrong_key_refuses_with_a_clear_error(workspace: Path) -> None:
    config = serve_config(workspace)
    async with open_runtime(config) as rt:
        await set_secret(rt, "API_KEY", SECRET)
    path = key_store(config).path
    path.write_bytes(base64.b64encode(os.urandom(32)) + b"\n")
    async with open_runtime(config) as rt, client_for(rt) as client:
        refused = await client.call_tool("probe_key", {})
        async with rt.db.read() as tx:
            ciphertext = (await tx.fetchall("SELECT ciphertext FROM vault_secrets"))[0]["ciphertext"]
    text = error_text(refused)
    assert "stored under another vault key than this server's" in text
    assert "managed-tools secret set API_KEY" in text and "Traceback" not in text
    assert SECRET not in text and base64.b64encode(ciphertext).decode() not in text and ciphertext.hex() not in text
    assert (await cli(config, "list"))[0] == 0  # names need no key


async def test_the_key_file_must_be_private_and_the_users_own(workspace: Path, tmp_path: Path) -> None:
    config = serve_config(workspace)
    async with open_runtime(config) as rt:
        await set_secret(rt, "API_KEY", SECRET)
    store = key_store(config)
    assert store.path.stat().st_mode & 0o777 == 0o600 and not store.path.is_relative_to(config.data_dir)
    fresh = Vault(store)
    assert fresh._cipher(create=False) is not None
    store.path.chmod(0o640)
    with pytest.raises(VaultKeyError, match="mode 640: others can read or change it") as caught:
        Vault(store)._cipher(create=False)
    assert str(store.path) not in str(caught.value) and str(store.path) in caught.value.detail
    store.path.chmod(0o600)
    if os.getuid() == 0:
        os.chown(store.path, 4242, -1)
        with pytest.raises(VaultKeyError, match="belongs to another user"):
            Vault(store)._cipher(create=False)
        os.chown(store.path, 0, -1)
    real = store.path.with_suffix(".real")
    store.path.rename(real)
    store.path.symlink_to(real)
    with pytest.raises(VaultKeyError, match="Cannot open the vault key file"):
        Vault(store)._cipher(create=False)
    store.path.unlink()
    store.path.write_text("not a key\n")
    store.path.chmod(0o600)
    with pytest.raises(VaultKeyError, match="does not hold a vault key"):
        Vault(store)._cipher(create=False)


async def test_a_key_file_inside_a_mount_is_refused(workspace: Path) -> None:
    config_home = Path(os.environ["XDG_CONFIG_HOME"])
    (config_home / "managed-tools").mkdir(parents=True)
    config = ServeConfig.build(workspace=workspace, data_dir=None, skills_dirs=(config_home,))
    with pytest.raises(StartupError, match="inside a directory the tools can reach"):
        async with open_runtime(config):
            pass


class MemoryKeyring(KeyringBackend):
    priority = 1

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        del self.entries[(service, username)]


async def test_the_key_goes_to_the_os_keyring_where_one_exists(workspace: Path) -> None:
    config = serve_config(workspace)
    ring = MemoryKeyring()
    before = keyring.get_keyring()
    keyring.set_keyring(ring)
    try:
        async with open_runtime(config) as rt:
            await set_secret(rt, "API_KEY", SECRET)
        async with open_runtime(config) as rt, client_for(rt) as client:
            assert data(await client.call_tool("probe_key", {}))["length"] == len(SECRET)
    finally:
        keyring.set_keyring(before)
    assert list(ring.entries) == [("managed-tools", f"vault:{config.data_dir}")]
    assert not key_store(config).path.exists()


# ---- redaction ---------------------------------------------------------------------------------------------------


async def test_a_secret_appears_nowhere_after_a_run_that_used_it(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Results, errors, events, traces, searches, resources (the session's exports), logs at debug, db bytes."""
    caplog.set_level("DEBUG")
    config = serve_config(workspace)
    assert (await cli(config, "set", "API_KEY", stdin=SECRET.encode()))[0] == 0
    shown: list[Any] = []
    async with open_runtime(config) as rt, client_for(rt, "legacy") as client:
        for flags in ({}, {"fail": True}, {"crash": True}, {"leak": True}):
            shown.append(await client.call_tool("probe_key", flags))
        for tool, arguments in (
            ("session_get_events", {"limit": 100}),
            ("session_search_traces", {"query": "probe_key", "includeCurrent": True}),
            ("session_search_context", {"query": "Acme", "includeCurrent": True}),
            ("vault_list", {}),
            ("agent_describe_setup", {}),
        ):
            shown.append(data(await client.call_tool(tool, arguments)))
        traces = data(await client.call_tool("session_list_traces", {}))
        shown.append(traces)
        for trace in traces["traces"]:
            shown.append(data(await client.call_tool("session_get_trace", {"wakeId": trace["wakeId"], "limit": 100})))
        for resource in (await client.list_resources()).resources:
            shown.append(await client.read_resource(resource.uri))
        async with rt.db.read() as tx:
            shown.append([dict(row) for row in await tx.fetchall("SELECT * FROM events")])
        assert any(p.name.endswith("-wal") for p in config.data_dir.glob("state.db*"))
        assert SECRET.encode() not in db_bytes(config)  # the WAL included, while it holds the run's pages
    ok, failed, crashed, leaked = shown[:4]
    assert data(ok)["length"] == len(SECRET)
    assert "Acme refused the key [secret redacted]." in error_text(failed)
    assert "crashed" not in error_text(crashed) and "RuntimeError" in error_text(crashed)
    assert data(leaked)["leaked"] == "key=[secret redacted]"
    assert "calling Acme with a key of" in caplog.text and "crashed holding [secret redacted]" in caplog.text
    everything = json.dumps([s.model_dump(mode="json") if hasattr(s, "model_dump") else s for s in shown], default=str)
    assert SECRET not in everything
    assert SECRET not in caplog.text
    assert SECRET.encode() not in db_bytes(config)


async def test_a_secret_declined_on_the_page_fails_closed(workspace: Path) -> None:
    """A person declined on the page: the call fails closed and nothing is stored."""
    page = PageInput(VariableAnswer(status="declined"))
    async with open_runtime(serve_config(workspace)) as rt:
        async with client_for(rt, secret_input=lambda *_: page) as client:
            refused = await client.call_tool("probe_key", {})
        async with rt.db.read() as tx:
            assert await vault.list_secrets(tx, "default") == []
    assert "did not give a value for API_KEY" in error_text(refused)


# ---- config.json: values and tools without code ------------------------------------------------------------------


async def test_config_json_declares_variables_and_a_latent_model_sees_their_texts(workspace: Path) -> None:
    data_dir = workspace.parent / "data"
    data_dir.mkdir()
    latent = {
        "name": "plan_trip",
        "description": "Plan a trip in the configured region.",
        "outputSchema": {"type": "object", "properties": {"plan": {"type": "string"}}, "required": ["plan"]},
        "variables": [{"name": "REGION", "required": True, "description": "Where"}],
    }
    file = {"variables": {"REGION": "eu-west-1", "API_KEY": {"env": "PROBE_UNSET_KEY"}}, "latentTools": [latent]}
    (data_dir / "config.json").write_text(json.dumps(file))
    config = ServeConfig.build(workspace=workspace, data_dir=data_dir, tool_modules=("support.probe_variables",))
    async with open_runtime(config) as rt, client_for(rt) as client:
        handed = await client.call_tool("plan_trip", {})
        missing = await client.call_tool("probe_key", {})  # the environment variable is unset: no value
    assert "Its variables:\n- REGION = eu-west-1" in error_text(handed)
    assert "managed-tools secret set API_KEY" in error_text(missing)
    latent["variables"] = [{"name": "API_KEY", "type": "secret"}]
    (data_dir / "config.json").write_text(json.dumps({"latentTools": [latent]}))
    with pytest.raises(StartupError, match="cannot declare a secret variable"):
        async with open_runtime(ServeConfig.build(workspace=workspace, data_dir=data_dir)):
            pass
