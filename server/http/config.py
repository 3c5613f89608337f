"""How `serve --transport http|sse` listens and whom it lets in: the token, the Host and Origin allowlists, the
limits."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from managed_tools.server.config.data_dir import ConfigError
from managed_tools.server.config.rules import DEFAULT_MAX_REQUEST_BYTES, TOKEN_ENV
from managed_tools.server.config.served_urls import is_loopback
from managed_tools.server.config.user_config import OAuthConfig
from managed_tools.server.http.allowlist import Address, host_entry, origin_entry
from managed_tools.server.http.token import TOKEN_PATTERN, TokenFileError, kept_token

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_SESSION_IDLE_SECONDS = 1800.0
DEFAULT_HEADER_TIMEOUT_SECONDS = 10.0
DEFAULT_BODY_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_CONNECTIONS = 512  # well under the usual 1024 open-file limit, which SQLite and tools share
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})
MAX_WORKERS = 256
REPLICA_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"  # no '.': it ends the prefix of a session id (http_replica.py)
HOST_WITH_PORT = re.compile(r"(\[[^\]]*\]|[^:\[\]]*):(\d+|\*)")  # `name:port`, `[v6]:port`, or `:*`


class HttpConfig(BaseModel):
    """How `serve --transport http|sse` listens and whom it lets in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    transport: Literal["http", "sse"]
    host: str = DEFAULT_HOST
    port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_PORT
    stateless: bool = False
    token: SecretStr | None = None
    # Where the token this server made and keeps is (printed at start-up); None when the person gave the token.
    kept_token_file: Path | None = None
    oauth: OAuthConfig | None = None
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    max_request_bytes: Annotated[int, Field(gt=0)] = DEFAULT_MAX_REQUEST_BYTES
    max_sessions: Annotated[int, Field(gt=0)] = DEFAULT_MAX_SESSIONS
    session_idle_seconds: Annotated[float, Field(gt=0)] = DEFAULT_SESSION_IDLE_SECONDS
    header_timeout_seconds: Annotated[float, Field(gt=0)] = DEFAULT_HEADER_TIMEOUT_SECONDS
    body_timeout_seconds: Annotated[float, Field(gt=0)] = DEFAULT_BODY_TIMEOUT_SECONDS
    max_connections: Annotated[int, Field(gt=0)] = DEFAULT_MAX_CONNECTIONS
    replica: Annotated[str, Field(pattern=REPLICA_NAME)] | None = None
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] = 1  # processes on the one port (server/http/workers.py)

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_parse(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return _entries(values, host_entry, "a host name or address, optionally with :PORT or :*")

    @field_validator("allowed_origins")
    @classmethod
    def _origins_parse(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return _entries(
            values,
            origin_entry,
            "an origin: http:// or https:// and a host name or address, optionally with :PORT or :*",
        )

    @classmethod
    def build(
        cls,
        *,
        transport: Literal["http", "sse"],
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        stateless: bool = False,
        token_file: Path | None = None,
        environ: Mapping[str, str] | None = None,
        token_dir: Path | None = None,
        no_token: bool = False,
        oauth: OAuthConfig | None = None,
        allowed_hosts: tuple[str, ...] = (),
        allowed_origins: tuple[str, ...] = (),
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        session_idle_seconds: float = DEFAULT_SESSION_IDLE_SECONDS,
        header_timeout_seconds: float = DEFAULT_HEADER_TIMEOUT_SECONDS,
        body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        replica: str | None = None,
        workers: int = 1,
    ) -> HttpConfig:
        """Resolve the token (`--token-file` wins over $MANAGED_TOOLS_TOKEN, else the one kept in `token_dir`, the
        data dir; without a `token_dir`, one for this process only) and the Host/Origin allowlists.

        Loopback names are always allowed; a specific bind address is added to the hosts. Refuses a bind
        beyond loopback without a token or OAuth, and two ways to authenticate at once. `no_token` is the explicit
        opt-out on loopback.
        """
        if stateless and transport == "sse":
            raise ConfigError("--stateless applies to Streamable HTTP (--transport http); SSE streams are sessions.")
        token = _read_token(token_file, os.environ if environ is None else environ)
        if token is not None and oauth is not None:
            raise ConfigError(
                f"Choose one way to authenticate: OAuth (config.json `oauth`, --oauth-*) or the static token "
                f"({TOKEN_ENV}, --token-file), not both."
            )
        if no_token and (token is not None or oauth is not None):
            raise ConfigError(f"--no-token contradicts {'OAuth' if oauth else f'{TOKEN_ENV} or --token-file'}.")
        if token is None and oauth is None and not is_loopback(host):
            raise ConfigError(
                f"Binding to {host or 'every interface'} exposes the server beyond this machine: set "
                f"{TOKEN_ENV} or --token-file, or configure OAuth (--oauth-issuer, --oauth-resource), so that "
                "every request must carry a bearer token."
            )
        kept: Path | None = None
        if token is None and oauth is None and not no_token:
            try:
                token, kept = kept_token(token_dir) if token_dir is not None else (_fresh_token(), None)
            except TokenFileError as exc:
                raise ConfigError(str(exc)) from None
        own = [] if host in WILDCARD_HOSTS or host in LOOPBACK_HOSTS else [f"[{host}]" if ":" in host else host]
        origins = [f"http://{name}" for name in LOOPBACK_HOSTS]
        return cls(
            transport=transport,
            host=host,
            port=port,
            stateless=stateless,
            token=token,
            kept_token_file=kept,
            oauth=oauth,
            allowed_hosts=_any_port([*LOOPBACK_HOSTS, *own, *allowed_hosts]),
            allowed_origins=_any_port([*origins, *allowed_origins]),
            max_request_bytes=max_request_bytes,
            max_sessions=max_sessions,
            session_idle_seconds=session_idle_seconds,
            header_timeout_seconds=header_timeout_seconds,
            body_timeout_seconds=body_timeout_seconds,
            max_connections=max_connections,
            replica=replica,
            workers=workers,
        )

    @property
    def binds_everywhere(self) -> bool:
        return self.host in WILDCARD_HOSTS


def _any_port(values: list[str]) -> tuple[str, ...]:
    """Each value as the SDK's allowlists read it: a value without a port is allowed on any port."""
    allowed: list[str] = []
    for value in values:
        has_port = HOST_WITH_PORT.fullmatch(value.split("://", 1)[-1]) is not None
        forms = [value] if has_port else [value, f"{value}:*"]
        allowed.extend(form for form in forms if form not in allowed)
    return tuple(allowed)


LOOPBACK_ALLOWED_HOSTS = _any_port(list(LOOPBACK_HOSTS))


def _entries(values: tuple[str, ...], parse: Callable[[str], Address | None], shape: str) -> tuple[str, ...]:
    for value in values:
        if parse(value) is None:
            raise ValueError(f"{value!r} is not {shape}")
    return values


def _fresh_token() -> SecretStr:
    return SecretStr(secrets.token_urlsafe(32))


def _read_token(token_file: Path | None, environ: Mapping[str, str]) -> SecretStr | None:
    if token_file is not None:
        try:
            raw = token_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"Cannot read the token file {token_file}: {type(exc).__name__}.") from None
        where = f"The token file {token_file}"
    else:
        raw = environ.get(TOKEN_ENV, "")
        where = TOKEN_ENV
        if not raw.strip():
            return None
    token = raw.strip()
    if not token:
        raise ConfigError(f"{where} is empty.")
    if not TOKEN_PATTERN.fullmatch(token):
        raise ConfigError(f"{where} must hold one token of at least 16 printable characters, without spaces.")
    return SecretStr(token)
