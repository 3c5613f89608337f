"""Verifying an OAuth access token (server/auth/oauth.py): the issuer's JWKS, fetched and cached, and the JWT checks.

Apart from server/auth/oauth.py because PyJWT (with the elliptic-curve half of cryptography) and the HTTP client cost
a few hundred milliseconds to import, and only a server with `--oauth-issuer` needs them: stdio and a static-token
HTTP server never load this module.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Annotated, Any
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt
from mcp.server.auth.provider import AccessToken
from pydantic import BaseModel, Field, StrictFloat, StrictInt, StrictStr, TypeAdapter, ValidationError

from managed_tools.server.config.served_urls import ServedUrl
from managed_tools.server.config.user_config import OAuthConfig

log = logging.getLogger("managed_tools.oauth")

ALGORITHMS = ("RS256", "ES256", "EdDSA")
KEY_TYPES = frozenset({"RSA", "EC", "OKP"})  # never "oct": a shared secret is no issuer's public key
MAX_TOKEN_CHARS = 16_384
MAX_DOCUMENT_BYTES = 256 * 1024
MAX_KEYS = 64
FETCH_SECONDS = 5.0
JWKS_TTL_SECONDS = 600.0
REFETCH_SECONDS = 30.0  # an unknown key id fetches the JWKS again at most this often
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
