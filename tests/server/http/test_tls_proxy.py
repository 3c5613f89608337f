"""The TLS recipe for a team server (deploy/tls.conf, docs/remote.md): Debian's nginx runs that very file with a
self-signed certificate made here, in front of a real `managed-tools serve --transport http` process, and a real
`mcp.Client` connects over https through it in both eras, with the bearer token and with an OAuth access token
whose resource is the https URL. Plain HTTP only redirects, and no token gets nothing."""

from __future__ import annotations

import datetime
import ipaddress
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from conftest import ERAS, data
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from support.oauth_issuer import Issuer, serving_issuer
from support.replica_cluster import NGINX, free_port, listening, process, started_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
RECIPE = REPO / "deploy" / "tls.conf"
TOKEN = "a-team-token-of-thirty-two-chars-or-so"


def self_signed(certs: Path) -> Path:
    """A certificate for localhost and 127.0.0.1 (what a team's CA or ACME would issue for its host name)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    certs.mkdir(parents=True)
    (certs / "fullchain.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (certs / "privkey.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return certs / "fullchain.pem"


def recipe(https: int, http: int, server: int) -> str:
    """deploy/tls.conf with this run's ports (everything else as shipped)."""
    text = RECIPE.read_text(encoding="utf-8")
    ports = {
        "listen 443 ssl;": f"listen 127.0.0.1:{https} ssl;",
        "listen 80;": f"listen 127.0.0.1:{http};",
        "server 127.0.0.1:8765;": f"server 127.0.0.1:{server};",
    }
    for shipped, here in ports.items():
        assert shipped in text, f"deploy/tls.conf no longer says {shipped!r}"
        text = text.replace(shipped, here)
    return text


@dataclass(frozen=True)
class Door:
    url: str  # https://localhost:PORT/mcp
    plain: str  # http://127.0.0.1:PORT/mcp
    ca: Path


@contextmanager
def behind_tls(tmp_path: Path, workspace: Path, *serve_args: str, https: int | None = None) -> Iterator[Door]:
    """The server on a free loopback port, nginx in front of it on `https` (free by default)."""
    with ExitStack() as stack:
        argv = [sys.executable, "-m", "managed_tools.server", "serve", "--transport", "http", "--port", "0"]
        argv += ["--workspace", str(workspace), "--data-dir", str(tmp_path / "data"), *serve_args]
        server_log = tmp_path / "server.log"
        server = stack.enter_context(process(argv, server_log))
        port = started_port(server, server_log)
        prefix = tmp_path / "nginx"
        (prefix / "tmp").mkdir(parents=True)
        ca = self_signed(prefix / "certs")
        https, http = https or free_port(), free_port()
        (prefix / "tls.conf").write_text(recipe(https, http, port), encoding="utf-8")
        nginx_argv = [NGINX, "-p", str(prefix), "-c", str(prefix / "tls.conf"), "-e", str(prefix / "error.log")]
        nginx = stack.enter_context(process(nginx_argv, prefix / "nginx.out"))
        listening(https, nginx, prefix)
        yield Door(f"https://localhost:{https}/mcp", f"http://127.0.0.1:{http}/mcp", ca)


@asynccontextmanager
async def connected(door: Door, token: str, mode: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(verify=str(door.ca), headers={"authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(door.url, http_client=http), mode=mode) as client,
    ):
        yield client


async def a_round_trip(client: Client) -> None:
    written = data(await client.call_tool("memory_write", {"target": "working_buffer", "content": "over TLS"}))
    assert written["target"] == "working_buffer"
    assert "over TLS" in data(await client.call_tool("memory_read", {"target": "working_buffer"}))["content"]


async def test_the_token_over_https_through_the_proxy(tmp_path: Path, workspace: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN, encoding="utf-8")
    with behind_tls(tmp_path, workspace, "--token-file", str(token_file)) as door:
        for mode in ERAS:
            async with connected(door, TOKEN, mode) as client:
                await a_round_trip(client)
        async with httpx2.AsyncClient(verify=str(door.ca)) as http:
            refused = await http.post(door.url, json={}, headers={"authorization": "Bearer wrong-token-wrong-token"})
            assert refused.status_code == 401 and TOKEN not in refused.text
            redirected = await http.post(door.plain, json={}, headers={"authorization": f"Bearer {TOKEN}"})
            assert redirected.status_code == 301
            assert redirected.headers["location"].startswith("https://")
        async with httpx2.AsyncClient() as unverified:  # a client that does not trust the certificate stops
            with pytest.raises(httpx2.ConnectError):
                await unverified.get(door.url)


async def test_oauth_over_https_through_the_proxy(tmp_path: Path, workspace: Path) -> None:
    https = free_port()  # the resource URL must be known before the server starts: pick the proxy's port first
    with serving_issuer() as issuer:
        resource = f"https://localhost:{https}/mcp"
        args = ("--oauth-issuer", issuer.url, "--oauth-resource", resource)
        with behind_tls(tmp_path, workspace, *args, https=https) as door:
            assert door.url == resource
            for mode in ERAS:
                async with connected(door, issuer.token(resource), mode) as client:
                    await a_round_trip(client)
            await refusals(door, issuer)


async def refusals(door: Door, issuer: Issuer) -> None:
    async with httpx2.AsyncClient(verify=str(door.ca)) as http:
        bare = await http.post(door.url, json={})
        assert bare.status_code == 401
        metadata = door.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
        assert f'resource_metadata="{metadata}"' in bare.headers["www-authenticate"]  # the https URL, not the backend's
        assert (await http.get(metadata)).json()["resource"] == door.url
        elsewhere = issuer.token(door.url.replace("/mcp", "/other"))
        assert (await http.post(door.url, json={}, headers={"authorization": f"Bearer {elsewhere}"})).status_code == 401
