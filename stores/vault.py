"""The agent's vault: secrets encrypted at rest with AES-256-GCM, listed by name only.

Each value has its own random 96-bit nonce, and its owner and name are bound as associated data: a ciphertext
copied to another name or agent does not decrypt. The key is never in the database (stores/vault_key.py).
Nothing here logs or repeats a value; a value leaves only as a SecretStr.
"""

from __future__ import annotations

import hashlib
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BaseModel, SecretStr

from managed_tools.stores.db import Tx
from managed_tools.stores.errors import StoreError
from managed_tools.stores.ids import utc_now
from managed_tools.stores.vault_key import KeySource, VaultKeyError

NONCE_BYTES = 12
MAX_SECRET_BYTES = 64 * 1024
AD_PREFIX = b"managed-tools/vault/v1"


class SecretInfo(BaseModel):
    """What may be shown about a secret: never its value."""

    name: str
    scope: str
    set_at: str


class Vault:
    """The cipher over one data dir's key, loaded on first use (a server that never meets a secret never makes
    one)."""

    def __init__(self, keys: KeySource) -> None:
        self._keys = keys
        self._key: bytes | None = None

    def _cipher(self, *, create: bool) -> tuple[AESGCM, str] | None:
        if self._key is None:
            self._key = self._keys.load(create=create)
        if self._key is None:
            return None
        return AESGCM(self._key), key_id(self._key)

    def seal(self, agent_id: str, name: str, value: SecretStr) -> tuple[bytes, bytes, str]:
        plain = value.get_secret_value().encode()
        if len(plain) > MAX_SECRET_BYTES:
            raise StoreError(f"The secret {name} is over {MAX_SECRET_BYTES // 1024} KiB; the vault refuses it.")
        cipher = self._cipher(create=True)
        assert cipher is not None
        nonce = secrets.token_bytes(NONCE_BYTES)
        return nonce, cipher[0].encrypt(nonce, plain, _bound(agent_id, name)), cipher[1]

    def open(self, agent_id: str, name: str, nonce: bytes, sealed: bytes, sealed_with: str) -> SecretStr:
        cipher = self._cipher(create=False)
        if cipher is None or cipher[1] != sealed_with:
            raise VaultKeyError(
                f"The secret {name} was stored under another vault key than this server's, so it cannot be "
                f"decrypted. Set it again with `managed-tools secret set {name}`."
            )
        try:
            plain = cipher[0].decrypt(nonce, sealed, _bound(agent_id, name))
        except InvalidTag:
            raise VaultKeyError(
                f"The secret {name} does not decrypt with this vault key: it was altered or moved from another "
                f"name or agent. Set it again with `managed-tools secret set {name}`."
            ) from None
        return SecretStr(plain.decode())


def key_id(key: bytes) -> str:
    """Names a key without revealing it: which key sealed a value, so a changed key is told apart from tampering."""
    return hashlib.sha256(b"managed-tools vault key id\0" + key).hexdigest()[:16]


def _bound(agent_id: str, name: str) -> bytes:
    return b"\0".join((AD_PREFIX, b"agent", agent_id.encode(), name.encode()))


async def set_secret(tx: Tx, vault: Vault, agent_id: str, name: str, value: SecretStr) -> None:
    nonce, sealed, sealed_with = vault.seal(agent_id, name, value)
    await tx.execute(
        "INSERT INTO vault_secrets (agent_id, name, nonce, ciphertext, key_id, set_at) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (agent_id, name) DO UPDATE SET nonce = excluded.nonce, ciphertext = excluded.ciphertext, "
        "key_id = excluded.key_id, set_at = excluded.set_at",
        (agent_id, name, nonce, sealed, sealed_with, utc_now()),
    )


async def get_secret(tx: Tx, vault: Vault, agent_id: str, name: str) -> SecretStr | None:
    row = await tx.fetchone(
        "SELECT nonce, ciphertext, key_id FROM vault_secrets WHERE agent_id = ? AND name = ?", (agent_id, name)
    )
    if row is None:
        return None
    return vault.open(agent_id, name, row["nonce"], row["ciphertext"], row["key_id"])


async def list_secrets(tx: Tx, agent_id: str) -> list[SecretInfo]:
    rows = await tx.fetchall("SELECT name, set_at FROM vault_secrets WHERE agent_id = ? ORDER BY name", (agent_id,))
    return [SecretInfo(name=row["name"], scope="agent", set_at=row["set_at"]) for row in rows]


async def delete_secret(tx: Tx, agent_id: str, name: str) -> bool:
    return await tx.execute("DELETE FROM vault_secrets WHERE agent_id = ? AND name = ?", (agent_id, name)) > 0
