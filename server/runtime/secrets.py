"""The vault of a data dir, and `managed-tools secret set|list|delete` (a person at a terminal, never a model).

The key lives in the OS keyring where one exists, else in a 0600 file under the user's config directory: never
in the data dir beside state.db, never inside a mount (refused).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from pydantic import SecretStr

from managed_tools.server.config.data_dir import vault_key_file
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.consent.human import HumanError, state_database
from managed_tools.server.upstream.secrets import SecretLookup
from managed_tools.stores import vault
from managed_tools.stores.errors import StoreError
from managed_tools.stores.vault import Vault
from managed_tools.stores.vault_key import ConfiguredKey, KeyStore, VaultKeyError
from managed_tools.tools.framework.calls import variables
from managed_tools.tools.framework.context.variable_sources import VariableSources
from managed_tools.tools.framework.definitions.definition import Variable


def key_store(config: ServeConfig) -> KeyStore:
    """The key of this data dir (its path names it): refused when the key file would sit inside a mount."""
    data_dir = str(config.data_dir)
    path = vault_key_file(config.data_dir)
    mounts = [config.workspace, config.data_dir, *config.vaults.values(), *config.skills_dirs]
    mounts += list(config.skills.directories or ())
    for root in mounts:
        if Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root)):
            raise VaultKeyError(
                "The vault key file would be inside a directory the tools can reach; refusing. Move that "
                "directory out of the user config directory.",
                path,
            )
    return KeyStore(f"vault:{data_dir}", path)


def open_vault(config: ServeConfig) -> Vault:
    """On the key replicas share when one is configured, else on this data dir's own."""
    if config.vault_key is not None:
        return Vault(ConfiguredKey(config.vault_key.get_secret_value()))
    return Vault(key_store(config))


def _name(name: str) -> str:
    try:
        return Variable(name=name).name
    except ValueError:
        raise HumanError(f"{name!r} is not a variable name (a letter or _, then letters, digits or _).") from None


def read_value(name: str) -> SecretStr:
    """The value without echo at a terminal; from a pipe, the whole of stdin less one trailing line break."""
    if sys.stdin.isatty():
        value = getpass.getpass(f"Value of {name} (not shown): ")
    else:
        value = sys.stdin.read(vault.MAX_SECRET_BYTES + 2).removesuffix("\n").removesuffix("\r")
    if not value:
        raise HumanError(f"No value given for {name}; nothing was stored.")
    return SecretStr(value)


async def secret_set(config: ServeConfig, name: str) -> None:
    name = _name(name)
    value = read_value(name)
    async with state_database(config, create=True) as db:
        try:
            async with db.write() as tx:
                await vault.set_secret(tx, open_vault(config), config.agent, name, value)
        except VaultKeyError as exc:
            raise HumanError(exc.detail) from None
        except StoreError as exc:
            raise HumanError(str(exc)) from None
    print(f"Stored {name} in the vault of agent {config.agent}, encrypted.")


async def secret_list(config: ServeConfig) -> None:
    async with state_database(config, create=True) as db, db.read() as tx:
        found = await vault.list_secrets(tx, config.agent)
    if not found:
        print(f"No secrets in the vault of agent {config.agent}.")
    for info in found:
        print(f"{info.name}\tset {info.set_at}")


async def secret_delete(config: ServeConfig, name: str) -> None:
    name = _name(name)
    async with state_database(config, create=True) as db, db.write() as tx:
        if not await vault.delete_secret(tx, config.agent, name):
            raise HumanError(f"No secret {name} in the vault of agent {config.agent}.")
    print(f"Deleted {name} from the vault of agent {config.agent}.")


@asynccontextmanager
async def vault_lookup(config: ServeConfig) -> AsyncIterator[SecretLookup]:
    """`${vault:NAME}` outside a running server (the `tools` command starts each upstream once): the agent's
    vault, then config.json; config.json alone while no server has made the state yet."""
    sources = VariableSources(vault=open_vault(config), config=config.variables)
    async with contextlib.AsyncExitStack() as stack:
        made = config.database is not None or config.state_path.exists()
        db = await stack.enter_async_context(state_database(config)) if made else None

        async def lookup(name: str) -> str | None:
            if db is None:
                return await variables.stored_or_configured(None, sources, config.agent, name)
            async with db.read() as tx:
                return await variables.stored_or_configured(tx, sources, config.agent, name)

        yield lookup
