"""The vault key replicas share (config.json `vaultKey` or $MANAGED_TOOLS_VAULT_KEY): replicas on separate data dirs
and one PostgreSQL database decrypt each other's secrets; without it each data dir has its own key."""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

import anyio
import pytest

from managed_tools.server.config.rules import VAULT_KEY_ENV
from managed_tools.server.config.serve_config import ConfigError, ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.server.runtime.secrets import open_vault
from managed_tools.stores.vault import get_secret
from managed_tools.stores.vault_key import VaultKeyError

KEY = secrets.token_hex(32)
SECRET = "s3cr3t-shared-by-replicas"


async def secret_set(workspace: Path, data_dir: Path, database: str, env: dict[str, str]) -> None:
    argv = [sys.executable, "-m", "managed_tools.server", "secret", "set", "API_KEY", "--workspace", str(workspace)]
    argv += ["--data-dir", str(data_dir), "--database", database]
    with anyio.fail_after(60):
        done = await anyio.run_process(argv, input=SECRET.encode(), env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()


async def read_secret(config: ServeConfig) -> str | None:
    """The secret as this process decrypts it, or why it cannot."""
    async with open_runtime(config) as runtime, runtime.db.read() as tx:
        try:
            found = await get_secret(tx, open_vault(config), config.agent, "API_KEY")
        except VaultKeyError as exc:
            return f"refused: {exc}"
    return None if found is None else found.get_secret_value()


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # on SQLite, replicas share one data dir
async def test_a_secret_set_through_one_replicas_cli_is_read_by_the_other(
    workspace: Path, tmp_path: Path, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Replica one: the key in a private file named by config.json; replica two: the same key in the environment.
    one, two, alone = tmp_path / "one", tmp_path / "two", tmp_path / "alone"
    for data_dir in (one, two, alone):
        data_dir.mkdir()
    key_file = tmp_path / "vault.key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    (one / "config.json").write_text(json.dumps({"vaultKey": {"file": str(key_file)}}))
    await secret_set(workspace, one, database, dict(os.environ))

    monkeypatch.setenv(VAULT_KEY_ENV, KEY)
    assert await read_secret(ServeConfig.build(workspace=workspace, data_dir=two, database=database)) == SECRET

    monkeypatch.delenv(VAULT_KEY_ENV)  # a third process on its own data dir's key cannot
    refused = await read_secret(ServeConfig.build(workspace=workspace, data_dir=alone, database=database))
    assert refused is not None and refused.startswith("refused: ") and "another vault key" in refused


@pytest.mark.parametrize(
    "value", [secrets.token_hex(48), f"{secrets.token_hex(32)} {secrets.token_hex(32)}", "61" * 32]
)
def test_a_vault_key_that_is_not_one_strong_32_byte_key_is_refused_without_repeating_it(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(VAULT_KEY_ENV, value)
    with pytest.raises(ConfigError) as refused:
        ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    message = str(refused.value)
    assert f"${VAULT_KEY_ENV}" in message and all(word not in message for word in value.split())
