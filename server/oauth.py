"""This server as an OAuth 2.1 resource server (the MCP authorization spec), built on the SDK's auth parts.

- The SDK's `AuthenticationMiddleware` + `BearerAuthBackend` run our `JwtVerifier` (its `TokenVerifier`) on every
  request, and `AuthContextMiddleware` hands the verified token to the handlers (server/principal.py) and to the
  SDK's own bindings: MCP sessions and SSE streams to the credential that opened them, a sealed `requestState`
  to the principal it was issued to.
- `RequireToken` answers a request without a valid token 401, one without the scopes 403, each with the
  `WWW-Authenticate` challenge pointing at the Protected Resource Metadata (RFC 9728), which `metadata_routes`
  serves (the SDK's handler) at `/.well-known/oauth-protected-resource` and its path-suffixed form.
- A token is a JWT signed by the issuer with an asymmetric key from its JWKS (RS256, ES256, EdDSA; never `none`
  or an HMAC), for this server (`aud`), from this issuer (`iss`), current (`exp`, `nbf`, with a small leeway).
  The JWKS comes over HTTPS (plain HTTP only from a loopback issuer), bounded in size and time, cached, and
  fetched again for an unknown key id at most every `REFETCH_SECONDS`.

The token's text is never logged or echoed: a refusal is logged with the failure's kind alone.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from typing import Annotated, Any
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt
import mcp_types as types
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url, cors_middleware
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl, BaseModel, Field, StrictFloat, StrictInt, StrictStr, TypeAdapter, ValidationError
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from managed_tools.server.config import OAuthConfig, ServedUrl
from managed_tools.server.principal import SCOPES, TOOLS_READ

log = logging.getLogger("managed_tools.oauth")

ALGORITHMS = ("RS256", "ES256", "EdDSA")
KEY_TYPES = frozenset({"RSA", "EC", "OKP"})  # never "oct": a shared secret is no issuer's public key
MAX_TOKEN_CHARS = 16_384
MAX_DOCUMENT_BYTES = 256 * 1024
MAX_KEYS = 64
FETCH_SECONDS = 5.0
JWKS_TTL_SECONDS = 600.0
REFETCH_SECONDS = 30.0  # an unknown key id fetches the JWKS again at most this often
METADATA_PATH = "/.well-known/oauth-protected-resource"
_SERVED_URL: TypeAdapter[str] = TypeAdapter(ServedUrl)


class FetchError(Exception):
    """The issuer's metadata or keys could not be fetched or read."""


class Jwks:
    """The issuer's signing keys: fetched on first use, kept `JWKS_TTL_SECONDS`, fetched again (rate-limited) when a
    token names a key id not among them, so that a key rotation needs no restart."""

    def __init__(self, config: OAuthConfig) -> None:
        self._config = config
        self._url = config.jwks_url
        self._keys: list[tuple[str | None, jwt.PyJWK]] = []
        self._fetched = -float("inf")  # when the keys were last fetched (monotonic), or tried
        self._lock = anyio.Lock()

    async def key(self, kid: str | None, alg: str) -> jwt.PyJWK | None:
        if time.monotonic() - self._fetched >= JWKS_TTL_SECONDS:
            await self._refresh(stale_after=JWKS_TTL_SECONDS)
        found = self._find(kid, alg)
        if found is None:
            await self._refresh(stale_after=REFETCH_SECONDS)
            found = self._find(kid, alg)
        return found

    def _find(self, kid: str | None, alg: str) -> jwt.PyJWK | None:
        """The key `kid` names, for `alg` (a key's algorithm is fixed, so a token cannot choose another). A token
        without a key id matches only if exactly one key fits."""
        fits = [key for key_id, key in self._keys if key.algorithm_name == alg and (kid is None or key_id == kid)]
        return fits[0] if len(fits) == 1 else None

    async def _refresh(self, *, stale_after: float) -> None:
        async with self._lock:
            if time.monotonic() - self._fetched < stale_after:
                return  # another request fetched them meanwhile, or tried too recently
            self._fetched = time.monotonic()
            try:
                if self._url is None:
                    self._url = await self._discover()
                self._keys = _parse_keys(await fetch_json(self._url))
            except FetchError as exc:  # keep the keys we have; a token needing others is refused meanwhile
                log.warning("cannot fetch the OAuth issuer's keys: %s", exc)

    async def _discover(self) -> str:
        """The `jwks_uri` of the issuer's metadata (RFC 8414, else OpenID Connect Discovery), whose `issuer` must
        be the configured one exactly."""
        issuer = self._config.issuer
        parts = urlsplit(issuer)
        path = parts.path.rstrip("/")
        for url in (
            f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server{path}",
            f"{issuer.rstrip('/')}/.well-known/openid-configuration",
        ):
            try:
                metadata = await fetch_json(url)
            except FetchError:
                continue
            if metadata.get("issuer") != issuer:
                raise FetchError(f"the metadata at {url} names another issuer")
            try:
                return _SERVED_URL.validate_python(metadata.get("jwks_uri"))
            except ValidationError as exc:
                raise FetchError(f"the metadata at {url} has no usable jwks_uri: {exc.errors()[0]['msg']}") from None
        raise FetchError(f"no authorization server metadata found for {issuer}")


async def fetch_json(url: str) -> dict[str, Any]:
    """A JSON object from `url`: 200 only, no redirects, at most MAX_DOCUMENT_BYTES within FETCH_SECONDS. Fetches
    are rare (once per TTL, or per rotation), so each has its own client."""
    body = bytearray()
    try:
        with anyio.fail_after(FETCH_SECONDS):
            async with (
                httpx2.AsyncClient(timeout=FETCH_SECONDS, follow_redirects=False) as client,
                client.stream("GET", url, headers={"accept": "application/json"}) as response,
            ):
                if response.status_code != 200:
                    raise FetchError(f"{url} answered {response.status_code}")
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_DOCUMENT_BYTES:
                        raise FetchError(f"{url} sent more than {MAX_DOCUMENT_BYTES} bytes")
    except TimeoutError:
        raise FetchError(f"{url} did not answer within {FETCH_SECONDS:g} s") from None
    except httpx2.HTTPError as exc:
        raise FetchError(f"{url}: {type(exc).__name__}") from None
    try:
        document = json.loads(body)
    except ValueError:
        raise FetchError(f"{url} did not send JSON") from None
    if not isinstance(document, dict):
        raise FetchError(f"{url} did not send a JSON object")
    return document


def _parse_keys(document: dict[str, Any]) -> list[tuple[str | None, jwt.PyJWK]]:
    """The usable public signing keys of a JWKS; any other entry (private, symmetric, for encryption, of another
    algorithm, malformed) is left out."""
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise FetchError("the JWKS has no `keys` list")
    keys: list[tuple[str | None, jwt.PyJWK]] = []
    for entry in entries[:MAX_KEYS]:
        if not isinstance(entry, dict) or entry.get("kty") not in KEY_TYPES or "d" in entry:
            continue
        if entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid")
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWTError, ValueError, TypeError):
            continue
        if key.algorithm_name in ALGORITHMS and (kid is None or isinstance(kid, str)):
            keys.append((kid, key))
    return keys


class JwtVerifier:
    """The SDK's `TokenVerifier` for our issuer's JWT access tokens."""

    def __init__(self, config: OAuthConfig, jwks: Jwks) -> None:
        self._config = config
        self._jwks = jwks
        resource = config.resource.rstrip("/")
        self._audiences = [resource, resource + "/"]  # the one URL, with or without a trailing slash

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            return await self._verify(token.strip())
        except jwt.PyJWTError as exc:
            log.info("refused an access token: %s", type(exc).__name__)  # the kind of failure, never the token
            return None

    async def _verify(self, token: str) -> AccessToken | None:
        if len(token) > MAX_TOKEN_CHARS:
            raise jwt.DecodeError("too long")
        header = jwt.get_unverified_header(token)
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            raise jwt.InvalidAlgorithmError("not an asymmetric algorithm we accept")
        if kid is not None and not isinstance(kid, str):
            raise jwt.InvalidTokenError("kid")
        key = await self._jwks.key(kid, alg)
        if key is None:
            raise jwt.InvalidKeyError("no key of the issuer fits")
        claims = jwt.decode(
            token,
            key,
            algorithms=[alg],
            audience=self._audiences,
            issuer=self._config.issuer,
            leeway=self._config.leeway_seconds,
            options={"require": ["exp", "iss", "aud", "sub"], "enforce_minimum_key_length": True},
        )
        try:
            read = Claims.model_validate(claims)
        except ValidationError as exc:  # PyJWT takes "exp": "1767225600" (it calls int()); we take numbers only
            raise jwt.InvalidTokenError("claims") from exc
        return AccessToken(
            token=token,
            client_id=read.client_id or read.azp or read.sub,
            scopes=sorted(set(read.scope.split())),
            # When the token stops being accepted: the SDK's backend checks this again, without our leeway.
            expires_at=int(read.exp + self._config.leeway_seconds),
            resource=self._config.resource,
            subject=read.sub,
            claims={"iss": read.iss},
        )


class Claims(BaseModel):
    """The claims a verified token must carry, each of its JSON type (known-good input only); others are ignored."""

    iss: StrictStr
    sub: Annotated[StrictStr, Field(min_length=1)]
    exp: StrictInt | StrictFloat
    nbf: StrictInt | StrictFloat | None = None
    iat: StrictInt | StrictFloat | None = None
    scope: StrictStr = ""
    client_id: StrictStr | None = None
    azp: StrictStr | None = None


class RequireToken:
    """401 without a valid token, 403 without the scopes, with the challenge RFC 6750 and RFC 9728 describe. The
    SDK's `RequireAuthMiddleware` is not used: it names no `scope` on a 403, and says `invalid_token` to a request
    that sent none."""

    def __init__(self, app: ASGIApp, *, config: OAuthConfig, open_paths: Iterable[str]) -> None:
        self._app = app
        self._required = config.required_scopes
        self._open = frozenset(open_paths)
        self._metadata = str(_metadata_url(config))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            await self._app(scope, receive, send)
            return
        user = scope.get("user")
        if not isinstance(user, AuthenticatedUser):
            presented = Headers(scope=scope).get("authorization") is not None
            params = ['error="invalid_token"'] if presented else []
            why = "The access token is not valid here." if presented else "This server requires an access token."
            await self._refuse(401, why, params)(scope, receive, send)
            return
        missing = [s for s in self._required if s not in user.scopes]
        if not set(user.scopes) & set(SCOPES):
            missing.append(TOOLS_READ)  # the least that lets a principal use anything here
        if missing:
            needed = " ".join(dict.fromkeys([*self._required, *missing]))
            why = f"The access token lacks the scope {needed}."
            await self._refuse(403, why, ['error="insufficient_scope"', f'scope="{needed}"'])(scope, receive, send)
            return
        await self._app(scope, receive, send)

    def _refuse(self, status: int, message: str, params: list[str]) -> JSONResponse:
        challenge = "Bearer " + ", ".join([*params, f'resource_metadata="{self._metadata}"'])
        body = {"jsonrpc": "2.0", "id": None, "error": {"code": types.INVALID_REQUEST, "message": message}}
        return JSONResponse(body, status_code=status, headers={"WWW-Authenticate": challenge})


def auth_middleware(config: OAuthConfig, open_paths: Iterable[str]) -> list[Middleware]:
    """Verify, hand on, then require: in that order, after the Host/Origin guard."""
    verifier = JwtVerifier(config, Jwks(config))
    return [
        # validate_token_resource stays off: the verifier checks `aud` itself.
        Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(verifier)),
        Middleware(AuthContextMiddleware),
        Middleware(RequireToken, config=config, open_paths=open_paths),
    ]


def metadata_routes(config: OAuthConfig) -> list[Route]:
    """The Protected Resource Metadata (the SDK's model and handler) at its path-suffixed place and at the root.
    The URLs are kept exactly as configured: an issuer identifier is compared as a string (RFC 8414), and a
    parsed URL would gain a trailing slash."""
    metadata = ProtectedResourceMetadata.model_validate(
        {
            "resource": config.resource,
            "authorization_servers": [config.issuer],
            "scopes_supported": list(SCOPES),
            "resource_name": "managed-tools",
        }
    )
    endpoint = cors_middleware(ProtectedResourceMetadataHandler(metadata).handle, ["GET", "OPTIONS"])
    paths = dict.fromkeys([_metadata_url(config).path or METADATA_PATH, METADATA_PATH])
    return [Route(path, endpoint=endpoint, methods=["GET", "OPTIONS"]) for path in paths]


def _metadata_url(config: OAuthConfig) -> AnyHttpUrl:
    return build_resource_metadata_url(AnyHttpUrl(config.resource))
