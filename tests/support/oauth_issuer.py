"""An OAuth authorization server's signing side for tests: RSA, EC and Ed25519 keys made here, its metadata and
JWKS served by a real HTTP server in a thread (plain HTTP: a loopback issuer may), and tokens it signs
(tests/server/http/test_oauth.py, test_tls_proxy.py)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

ALL = "tools:read tools:write approvals"


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@dataclass
class Issuer:
    """An authorization server's signing side: its keys, and a real HTTP server for its metadata and JWKS."""

    rsa_key: rsa.RSAPrivateKey = field(default_factory=lambda: rsa.generate_private_key(65537, 2048))
    ec_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    ed_key: ed25519.Ed25519PrivateKey = field(default_factory=ed25519.Ed25519PrivateKey.generate)
    rsa_kid: str = "rsa-1"
    url: str = ""
    jwks_fetches: int = 0

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key, alg in ((self.rsa_kid, self.rsa_key, "RS256"), ("ec-1", self.ec_key, "ES256")):
            jwk = json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": alg})
        raw = self.ed_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        keys.append({"kty": "OKP", "crv": "Ed25519", "x": b64(raw), "kid": "ed-1", "use": "sig", "alg": "EdDSA"})
        keys.append({"kty": "oct", "k": b64(b"a shared secret never to be used"), "kid": "oct-1", "alg": "HS256"})
        return {"keys": keys}

    def metadata(self) -> dict[str, Any]:
        return {"issuer": self.url, "jwks_uri": f"{self.url}/jwks", "token_endpoint": f"{self.url}/token"}

    def token(
        self, resource: str, *, scope: str = ALL, sub: str | None = "alice", alg: str = "RS256", **claims: Any
    ) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": resource, "sub": sub, "scope": scope, "iat": now, "exp": now + 300, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        key: Any = {"RS256": self.rsa_key, "ES256": self.ec_key, "EdDSA": self.ed_key}[alg]
        kid = {"RS256": self.rsa_kid, "ES256": "ec-1", "EdDSA": "ed-1"}[alg]
        return jwt.encode(body, key, algorithm=alg, headers={"kid": kid})


class IssuerHandler(BaseHTTPRequestHandler):
    issuer: Issuer

    def do_GET(self) -> None:
        routes = {"/.well-known/oauth-authorization-server": self.issuer.metadata, "/jwks": self.issuer.jwks}
        if self.path not in routes:
            self.send_error(404)
            return
        if self.path == "/jwks":
            self.issuer.jwks_fetches += 1
        body = json.dumps(routes[self.path]()).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serving_issuer() -> Iterator[Issuer]:
    """The issuer's HTTP server on a free loopback port, in a thread (plain HTTP: a loopback issuer may)."""
    made = Issuer()
    handler = type("Handler", (IssuerHandler,), {"issuer": made})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    made.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield made
    finally:
        server.shutdown()
        server.server_close()
