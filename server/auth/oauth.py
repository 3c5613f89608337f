"""This server as an OAuth 2.1 resource server (the MCP authorization spec), built on the SDK's auth parts.

- The SDK's `AuthenticationMiddleware` + `BearerAuthBackend` run our `JwtVerifier` (its `TokenVerifier`) on every
  request, and `AuthContextMiddleware` hands the verified token to the handlers (server/auth/principal.py) and to the
  SDK's own bindings: MCP sessions and SSE streams to the credential that opened them, a sealed `requestState`
  to the principal it was issued to.
- `RequireToken` answers a request without a valid token 401, one without the scopes 403, each with the
  `WWW-Authenticate` challenge pointing at the Protected Resource Metadata (RFC 9728), which `metadata_routes`
  serves (the SDK's handler) at `/.well-known/oauth-protected-resource` and its path-suffixed form.
- A token is a JWT signed by the issuer with an asymmetric key from its JWKS (RS256, ES256, EdDSA; never `none`
  or an HMAC), for this server (`aud`), from this issuer (`iss`), current (`exp`, `nbf`, with a small leeway).
  The JWKS comes over HTTPS (plain HTTP only from a loopback issuer), bounded in size and time, cached, and
  fetched again for an unknown key id at most every `REFETCH_SECONDS`.

The token's text is never logged or echoed: a refusal is logged with the failure's kind alone. The verifier
(server/auth/oauth_tokens.py) is imported only when OAuth is configured.
"""

from __future__ import annotations

from collections.abc import Iterable

import mcp_types as types
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.auth.routes import build_resource_metadata_url, cors_middleware
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from managed_tools.server.auth.principal import SCOPES, TOOLS_READ
from managed_tools.server.config.user_config import OAuthConfig

METADATA_PATH = "/.well-known/oauth-protected-resource"


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
    from managed_tools.server.auth.oauth_tokens import Jwks, JwtVerifier

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
