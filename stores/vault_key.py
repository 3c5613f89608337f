"""Where the vault's key lives: the OS keyring where one exists, else a 0600 key file outside every mount.

The key never sits beside state.db: a copy of the data dir (a backup, an export) holds only ciphertexts.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import stat
from pathlib import Path
from types import ModuleType
from typing import Protocol

from managed_tools.stores.errors import StoreError

KEY_BYTES = 32  # AES-256
KEYRING_SERVICE = "managed-tools"


class VaultKeyError(StoreError):
    """The vault key is missing, unreadable or not safe to use. The message names no host path (a model may read
    it); `detail` adds where, for the person at the terminal and the server log."""

    def __init__(self, message: str, where: Path | None = None) -> None:
        super().__init__(message)
        self.detail = message if where is None else f"{message} ({where})"


class KeySource(Protocol):
    def load(self, *, create: bool) -> bytes | None: ...


class ConfiguredKey:
    """A key the server's configuration gives (replicas share it): never created, never stored by us."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def load(self, *, create: bool) -> bytes | None:
        return self._key


class KeyStore:
    """The key for one data dir: `keyring_user` names it in the OS keyring, `path` is the file fallback."""

    def __init__(self, keyring_user: str, path: Path) -> None:
        self.keyring_user = keyring_user
        self.path = path

    def load(self, *, create: bool) -> bytes | None:
        """The key (created on first need when `create`), or None when none exists yet."""
        found = self._from_keyring()
        if found is None and self.path.exists():
            found = self._from_file()
        if found is not None or not create:
            return found
        key = secrets.token_bytes(KEY_BYTES)
        if self._to_keyring(key):
            return key
        self._to_file(key)
        return self._from_file()  # another process may have made it first: theirs is the key

    def _from_keyring(self) -> bytes | None:
        keyring = _usable_keyring()
        if keyring is None:
            return None
        try:
            text = keyring.get_password(KEYRING_SERVICE, self.keyring_user)
        except keyring.errors.KeyringError:
            return None  # a locked or broken keyring: the key file, if any, is the other place a key can be
        return None if text is None else _decode(text, "the OS keyring entry", None)

    def _to_keyring(self, key: bytes) -> bool:
        keyring = _usable_keyring()
        if keyring is None:
            return False
        try:
            keyring.set_password(KEYRING_SERVICE, self.keyring_user, base64.b64encode(key).decode())
        except keyring.errors.KeyringError:
            return False
        return True

    def _from_file(self) -> bytes:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise VaultKeyError(f"Cannot open the vault key file: {exc.strerror or exc}.", self.path) from None
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise VaultKeyError("The vault key file is not a regular file; refusing to use it.", self.path)
            if info.st_uid != os.getuid():
                raise VaultKeyError("The vault key file belongs to another user; refusing to use it.", self.path)
            if info.st_mode & 0o077:
                raise VaultKeyError(
                    f"The vault key file has mode {stat.S_IMODE(info.st_mode):o}: others can read or change it. "
                    "Refusing to use it; `chmod 600` it if it is yours.",
                    self.path,
                )
            text = file.read(256).decode("ascii", errors="replace")
        return _decode(text, "the vault key file", self.path)

    def _to_file(self, key: bytes) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileExistsError:
            return
        except OSError as exc:
            raise VaultKeyError(f"Cannot create the vault key file: {exc.strerror or exc}.", self.path) from None
        with os.fdopen(fd, "wb") as file:
            file.write(base64.b64encode(key) + b"\n")
            file.flush()
            os.fsync(file.fileno())


def _usable_keyring() -> ModuleType | None:
    """The keyring module when it has a real backend: headless Linux without a Secret Service has only the `fail`
    one. Imported here, not at start-up: it costs ~80 ms, and only a secret read or written needs it."""
    import keyring
    import keyring.errors
    from keyring.backends import fail

    try:
        backend = keyring.get_keyring()
    except Exception:  # a misconfigured keyring is no keyring
        return None
    return keyring if not isinstance(backend, fail.Keyring) and getattr(backend, "priority", 0) > 0 else None


def _decode(text: str, what: str, where: Path | None) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise VaultKeyError(
            f"{what.capitalize()} does not hold a vault key ({KEY_BYTES} bytes in base64); refusing to use it.", where
        )
    return key
