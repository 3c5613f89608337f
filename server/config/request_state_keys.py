"""The key ring that seals our `requestState` (2026-07-28), shared by every replica of one deployment.

Without configuration each process seals under a key of its own (`RequestStateSecurity.ephemeral`): a retry that
reaches another replica, or the same one after a restart, is refused. Replicas share a ring from configuration:
config.json `requestStateKeys` (`{"env": "VAR"}` or `{"file": "PATH"}`, a file of mode 0600 outside every
mount), else `$MANAGED_TOOLS_REQUEST_STATE_KEY`. Keys are hex or base64 text of at least 32 random bytes,
separated by whitespace or commas; the first seals, every one unseals (rotation: add the new key second, then
move it first, then drop the old one after one approval wait). No message ever repeats a key.

The vault key comes from the same kinds of source (`load_vault_key`: config.json `vaultKey`, else
`$MANAGED_TOOLS_VAULT_KEY`), so replicas on separate data dirs can decrypt each other's secrets; it is one key of
exactly 32 bytes (a secret sealed under another key says so, stores/vault.py).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, SecretBytes, model_validator

from managed_tools.server.config.rules import VAULT_KEY_ENV
from managed_tools.tools.framework.context.variable_sources import ENV_NAME

KEY_ENV = "MANAGED_TOOLS_REQUEST_STATE_KEY"
VAULT_KEY_BYTES = 32  # AES-256 (stores/vault.py)
MIN_KEY_BYTES = 32
# 32 random bytes hold about 30 distinct values; fewer than this is a pattern ("aaaa...", a repeated word).
MIN_DISTINCT_BYTES = 16
MAX_KEYS = 8
HEX = re.compile(r"(?:[0-9a-fA-F]{2})+")
BASE64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
GENERATE = 'python -c "import secrets; print(secrets.token_hex(32))"'


class KeyRingError(ValueError):
    """The configured ring is unusable; the message names the source and the key's position, never a key."""


class KeyRingSource(BaseModel):
    """config.json `requestStateKeys`: where the ring is, never the keys themselves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: Annotated[str, Field(pattern=ENV_NAME)] | None = None
    file: Path | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.env is None) == (self.file is None):
            raise ValueError('give exactly one of {"env": "VAR"} or {"file": "PATH"}')
        return self


def load_key_ring(
    source: KeyRingSource | None,
    environ: Mapping[str, str],
    *,
    data_dir: Path,
    mounts: Sequence[Path],
    default_env: str = KEY_ENV,
    config_key: str = "requestStateKeys",
) -> tuple[SecretBytes, ...]:
    """The configured ring, or () for a per-process key. A key file must be the owner's alone and outside every
    mount (a tool could read it there); a relative path is against the data dir."""
    if source is None:
        text, where = environ.get(default_env, ""), f"${default_env}"
        if not text.strip():
            return ()
    elif source.env is not None:
        text, where = environ.get(source.env, ""), f"${source.env} (config.json {config_key})"
        if not text.strip():
            raise KeyRingError(f"{where} is not set; generate a key with: {GENERATE}")
    else:
        assert source.file is not None
        path = (data_dir / source.file.expanduser()).resolve()
        text, where = _read_key_file(path, mounts), f"The key file {path}"
    return parse_keys(text, where)


def _read_key_file(path: Path, mounts: Sequence[Path]) -> str:
    if any(path.is_relative_to(mount) for mount in mounts):
        raise KeyRingError(f"The key file {path} is inside a mount, where tools can read it: move it out.")
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise KeyRingError(f"The key file {path} is not a regular file.")
        if info.st_mode & 0o077 or info.st_uid != os.getuid():
            raise KeyRingError(f"The key file {path} must be yours alone: chmod 600 {path}.")
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyRingError(f"Cannot read the key file {path}: {type(exc).__name__}.") from None


def load_vault_key(
    source: KeyRingSource | None, environ: Mapping[str, str], *, data_dir: Path, mounts: Sequence[Path]
) -> SecretBytes | None:
    """The vault key replicas share, or None: the data dir's own key (the OS keyring or a key file)."""
    ring = load_key_ring(
        source, environ, data_dir=data_dir, mounts=mounts, default_env=VAULT_KEY_ENV, config_key="vaultKey"
    )
    if not ring:
        return None
    where = f"${VAULT_KEY_ENV}" if source is None else "config.json vaultKey"
    if len(ring) != 1 or len(ring[0].get_secret_value()) != VAULT_KEY_BYTES:
        raise KeyRingError(f"{where} must hold exactly one key of {VAULT_KEY_BYTES} bytes; generate it: {GENERATE}")
    return ring[0]


def parse_keys(text: str, where: str) -> tuple[SecretBytes, ...]:
    words = [word for line in text.splitlines() if not line.lstrip().startswith("#") for word in line.split()]
    tokens = [token for word in words for token in word.split(",") if token]
    if not tokens:
        raise KeyRingError(f"{where} holds no key; generate one with: {GENERATE}")
    if len(tokens) > MAX_KEYS:
        raise KeyRingError(f"{where} holds {len(tokens)} keys; a ring keeps at most {MAX_KEYS}.")
    keys = [_key(token, f"{where}, key {number}") for number, token in enumerate(tokens, 1)]
    if len(set(keys)) != len(keys):
        raise KeyRingError(f"{where} lists the same key twice.")
    return tuple(SecretBytes(key) for key in keys)


def _key(token: str, where: str) -> bytes:
    raw: bytes | None = None
    if HEX.fullmatch(token):
        raw = bytes.fromhex(token)
    elif BASE64.fullmatch(token):
        try:
            raw = base64.urlsafe_b64decode(token.replace("+", "-").replace("/", "_") + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raw = None
    if raw is None:
        raise KeyRingError(f"{where} is neither hex nor base64; generate one with: {GENERATE}")
    if len(raw) < MIN_KEY_BYTES or len(set(raw)) < MIN_DISTINCT_BYTES:
        raise KeyRingError(f"{where} is too weak: it needs {MIN_KEY_BYTES} random bytes; generate one with: {GENERATE}")
    return raw
