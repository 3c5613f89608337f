"""The bearer token loopback HTTP gets by default: generated once, kept 0600 in the data dir, reused at each start.

Loopback is not a boundary between programs of one machine: without a token, any local process (a command the
tools themselves run included) could connect to the server's own port as a full client and answer its own
permission questions. So HTTP always has a token unless the person opts out (`--no-token`); the one kept here is
printed at start-up with a ready client configuration, as Jupyter prints its URL with its token.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import uuid
from pathlib import Path

from pydantic import SecretStr

TOKEN_FILE = "http-token"
# A header-safe secret long enough not to be guessed; the message never repeats it.
TOKEN_PATTERN = re.compile(r"[\x21-\x7e]{16,}")
MAX_TOKEN_FILE_BYTES = 4096


class TokenFileError(Exception):
    """The kept token cannot be used; the message says which file and what to do."""


def kept_token(data_dir: Path) -> tuple[SecretStr, Path]:
    """The token kept in `data_dir` (made on first use) and its file. Safe when several replicas sharing one data
    dir start at once: each writes its candidate to a file of its own and links it into place; one link wins, and
    the others read the winner's."""
    path = data_dir / TOKEN_FILE
    try:
        return _read(path), path
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fresh = secrets.token_urlsafe(32)
    staging = data_dir / f".{TOKEN_FILE}.{uuid.uuid4().hex}"
    descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(fresh + "\n")
        try:
            os.link(staging, path)
        except FileExistsError:
            return _read(path), path  # another process placed its own first
    finally:
        os.unlink(staging)
    return SecretStr(fresh), path


def _read(path: Path) -> SecretStr:
    """The kept token; FileNotFoundError when there is none yet."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        why = exc.strerror or exc
        raise TokenFileError(f"Cannot read the token file {path}: {why}; delete it for a new one.") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077 or info.st_uid != os.getuid():
            raise TokenFileError(
                f"The token file {path} must be a regular file that is yours alone (chmod 600 {path}); "
                "or delete it, and a new token is made at the next start."
            )
        token = handle.read(MAX_TOKEN_FILE_BYTES).decode("ascii", "replace").strip()
    if not TOKEN_PATTERN.fullmatch(token):
        raise TokenFileError(f"The token file {path} does not hold one token; delete it for a new one.")
    return SecretStr(token)
