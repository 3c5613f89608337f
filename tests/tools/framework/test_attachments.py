"""Attachments (seed 001 §5, issue 15 item 4): a user tool's images and files stored per session in the data dir,
shown as image content and resource links, read back as attachments:// resources and through `read`, only by the
session's own agent, through the path guard, within their caps; nothing written anywhere else."""

from __future__ import annotations

import base64
import dataclasses
import os
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import ERAS, Connect, data, error_text
from mcp import Client, MCPError

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores import images, sessions
from managed_tools.stores.attachments import AttachmentError, AttachmentLimits
from managed_tools.stores.errors import NotFoundError
from managed_tools.tools.framework.context import attachments
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio


def png(width: int, height: int) -> bytes:
    """A real PNG (8-bit grey), built by hand."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\x00" + bytes(range(width)) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def jpeg(width: int, height: int, sof: int = 0xC0) -> bytes:
    """A JPEG's segments up to its frame header as an encoder writes them: JFIF, a quantisation table, the frame."""

    def segment(marker: int, body: bytes) -> bytes:
        return bytes((0xFF, marker)) + struct.pack(">H", len(body) + 2) + body

    jfif = segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    tables = segment(0xDB, b"\x00" + bytes(range(64)))
    frame = segment(sof, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
    return b"\xff\xd8" + jfif + tables + frame + b"\xff\xd9"


def webp(kind: bytes, body: bytes) -> bytes:
    chunk = kind + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def test_image_sizes_come_from_the_headers() -> None:
    lossy = webp(b"VP8 ", b"\x10\x02\x00\x9d\x01\x2a" + struct.pack("<HH", 7, 3) + bytes(8))
    lossless = webp(b"VP8L", b"\x2f" + ((7 - 1) | (3 - 1) << 14).to_bytes(4, "little") + bytes(4))
    extended = webp(b"VP8X", bytes(4) + (7 - 1).to_bytes(3, "little") + (3 - 1).to_bytes(3, "little"))
    gif = b"GIF89a" + struct.pack("<HH", 7, 3) + bytes(8)
    for picture in (png(7, 3), jpeg(7, 3), jpeg(7, 3, sof=0xC2), gif, lossy, lossless, extended):
        assert images.dimensions(picture) == (7, 3), picture[:16]
    # A header that stops short or lies gives no size.
    for broken in (png(7, 3)[:20], jpeg(7, 3)[:30], b"\xff\xd8\xff\xda\x00\x02", png(0, 3), b"GIF89a", b"plain"):
        assert images.dimensions(broken) is None


@pytest.fixture
def module_config(workspace: Path, database_option: str | None) -> ServeConfig:
    return ServeConfig.build(
        workspace=workspace, data_dir=None, tool_modules=("support.probe_attachments",), database=database_option
    )


@pytest.fixture
async def rt(module_config: ServeConfig) -> AsyncIterator[Runtime]:
    async with open_runtime(module_config) as runtime:
        yield runtime


def file(name: str, mime: str, body: bytes) -> dict[str, str]:
    return {"name": name, "mimeType": mime, "base64": base64.b64encode(body).decode()}


async def session_of(client: Client) -> str:
    session: str = data(await client.call_tool("session_get_snapshot", {}))["sessionId"]
    return session


def blob_of(result: types.ReadResourceResult) -> tuple[str | None, bytes]:
    [content] = result.contents
    assert isinstance(content, types.BlobResourceContents)
    return content.mime_type, base64.b64decode(content.blob)


def stored_files(data_dir: Path) -> dict[str, int]:
    """Every file under the data dir but the database's own, with its mode."""
    return {
        str(p.relative_to(data_dir)): p.lstat().st_mode & 0o777
        for p in data_dir.rglob("*")
        if not p.is_dir() and not p.name.startswith("state.db")
    }


@pytest.mark.parametrize("mode", ERAS)
async def test_a_tool_attaches_an_image_and_a_file(rt: Runtime, connect: Connect, workspace: Path, mode: str) -> None:
    chart, photo, report = png(7, 3), jpeg(5, 9), b"total: 42\n"
    files = [file("chart.png", "image/png", chart), file("photo.jpg", "image/jpeg", photo),
             file("report.txt", "text/plain", report)]  # fmt: skip
    before = stored_files(rt.environment.data_dir)
    async with connect(rt, mode) as client:
        session = await session_of(client)
        result = await client.call_tool("make_files", {"files": files})
        refs = data(result)["attachments"]
        links = [block for block in result.content if isinstance(block, types.ResourceLink)]
        pictures = [block for block in result.content if isinstance(block, types.ImageContent)]
        read_back = [blob_of(await client.read_resource(link.uri)) for link in links]
        read_png = await client.call_tool("read", {"path": refs[0]["path"]})
        read_text = data(await client.call_tool("read", {"path": refs[2]["path"]}))
        listed = {r.uri: r for r in (await client.list_resources()).resources}
    assert [r["name"] for r in refs] == ["chart.png", "photo.jpg", "report.txt"]
    assert [(r["width"], r["height"]) for r in refs] == [(7, 3), (5, 9), (None, None)]
    assert [r["size"] for r in refs] == [len(chart), len(photo), len(report)]
    assert all(r["type"] == "file" and r["path"] == f"/attachments/{session}/{r['id']}" for r in refs)
    assert [r["uri"] for r in refs] == [f"attachments://{session}/{r['id']}" for r in refs] == [k.uri for k in links]
    assert [(p.mime_type, base64.b64decode(p.data)) for p in pictures] == [("image/png", chart), ("image/jpeg", photo)]
    assert [(link.mime_type, link.size) for link in links] == [(r["mimeType"], r["size"]) for r in refs]
    assert read_back == [("image/png", chart), ("image/jpeg", photo), ("text/plain", report)]
    assert isinstance(read_png.content[1], types.ImageContent) and base64.b64decode(read_png.content[1].data) == chart
    assert read_text["content"] == "total: 42\n" and read_text["mountPath"] == "/attachments"
    assert {r["uri"] for r in refs} <= set(listed) and listed[refs[0]["uri"]].mime_type == "image/png"
    # Stored under attachments/<session>/<id>, mode 0600, and nothing else written outside the database.
    new = {path: mode for path, mode in stored_files(rt.environment.data_dir).items() if path not in before}
    assert new == {f"attachments/{session}/{r['id']}": 0o600 for r in refs}
    assert not any(workspace.iterdir())  # noqa: ASYNC240


@pytest.mark.parametrize("mode", ERAS)
async def test_only_the_sessions_agent_reads_an_attachment(rt: Runtime, connect: Connect, mode: str) -> None:
    async with rt.db.write() as tx:
        stranger = await sessions.create_session(tx, "beta")
    theirs = (await attachments.store(rt, stranger.id, b"their secret plan", name="plan.txt",
                                      mime_type="text/plain")).ref  # fmt: skip
    assert theirs is not None
    async with connect(rt, mode) as client:
        first = await session_of(client)
        mine = data(await client.call_tool("make_files", {"files": [file("a.txt", "text/plain", b"mine")]}))
    [ref] = mine["attachments"]
    guessed = "0190a0b0-0000-7000-8000-000000000000"
    async with connect(rt, mode) as client:
        # Another session of the same agent reaches it, like the session's other artifacts.
        assert blob_of(await client.read_resource(ref["uri"])) == ("text/plain", b"mine")
        refused = [
            theirs.uri,  # another agent's
            f"attachments://{first}/{theirs.id}",  # their id under this agent's session
            f"attachments://{stranger.id}/{ref['id']}",  # this agent's id under their session
            f"attachments://{first}/{guessed}",  # an id that never existed
        ]
        errors = []
        for uri in refused:
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            errors.append((caught.value.error.code, caught.value.error.message))
        read_refusals = [
            error_text(await client.call_tool("read", {"path": path}))
            for path in (theirs.path, f"/attachments/{first}/{theirs.id}", f"/attachments/{first}/{guessed}")
        ]
    assert errors == [(-32002, "No such attachment.")] * len(refused)  # all alike: nothing to tell them apart
    assert read_refusals == ["No such attachment."] * 3


@pytest.mark.both_backends
async def test_another_principal_of_the_agent_cannot_reach_an_attachment(rt: Runtime) -> None:
    """Under OAuth two principals share an agent; a session's attachments stay with the principal that owns it."""
    async with rt.db.write() as tx:
        theirs = await sessions.create_session(tx, rt.environment.agent_id, owner="oauth:someone-else")
    stored = (await attachments.store(rt, theirs.id, b"their notes", name="n.txt", mime_type="text/plain")).ref
    assert stored is not None
    async with rt.db.read() as tx:
        record, _ = await attachments.owned(rt, tx, theirs.id, stored.id, owner="oauth:someone-else")
        assert record.name == "n.txt"
        with pytest.raises(NotFoundError, match="No such attachment"):
            await attachments.owned(rt, tx, theirs.id, stored.id, owner=sessions.LOCAL_OWNER)


async def test_traversal_and_links_are_refused(rt: Runtime, connect: Connect, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("workspace notes\n")
    async with connect(rt) as client:
        session = await session_of(client)
        two = [file("a.txt", "text/plain", b"first"), file("b.txt", "text/plain", b"second")]
        [first, second] = data(await client.call_tool("make_files", {"files": two}))["attachments"]
        root = rt.environment.data_dir / "attachments" / session
        bad_paths = [
            f"/attachments/{session}/../{session}/{first['id']}",
            f"/attachments/{session}/{first['id']}/..",
            f"/attachments/%2e%2e/{first['id']}",
            f"/attachments/{session}",
            f"/attachments/{session}/{first['id']}/more",
            "/attachments/../state.db",
            f"/attachments/{session}/{first['id'].upper()}",
        ]
        path_errors = [error_text(await client.call_tool("read", {"path": path})) for path in bad_paths]
        host = error_text(await client.call_tool("read", {"path": str(root / first["id"])}))
        listing = error_text(await client.call_tool("glob", {"pattern": "*", "path": f"/attachments/{session}"}))
        bad_uris = [
            f"attachments://{session}/../{first['id']}",
            f"attachments://{session}/%2e%2e%2f{first['id']}",
            f"attachments://{session}/{first['id']}/x",
            f"attachments://{session}%2f{first['id']}",
            f"attachments://{session}/{first['id']}%00",
        ]
        for uri in bad_uris:
            with pytest.raises(MCPError, match="No resource"):
                await client.read_resource(uri)
        # A link planted where a stored file was: to a workspace file, then to another attachment.
        os.unlink(root / first["id"])
        os.symlink(workspace / "notes.txt", root / first["id"])
        outside = error_text(await client.call_tool("read", {"path": first["path"]}))
        with pytest.raises(MCPError, match=r"outside|link"):
            await client.read_resource(first["uri"])
        os.unlink(root / first["id"])
        os.symlink(root / second["id"], root / first["id"])
        sideways = error_text(await client.call_tool("read", {"path": first["path"]}))
        with pytest.raises(MCPError, match="link"):
            await client.read_resource(first["uri"])
    assert all("is not an attachment path" in text for text in path_errors), path_errors
    assert "outside the mounts" in host  # a host path is no mount (it is only echoed back)
    assert "outside the mounts" in listing
    assert "resolves outside /attachments" in outside and "symbolic link is in the way" in sideways


async def test_a_linked_attachments_directory_is_never_written_through(
    rt: Runtime, connect: Connect, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    directory = rt.environment.data_dir / "attachments"
    assert not directory.exists()  # made on the first attachment, not before
    directory.symlink_to(elsewhere)
    async with connect(rt) as client:
        refused = error_text(await client.call_tool("make_files", {"files": [file("a.txt", "text/plain", b"x")]}))
    assert "replaced by a link" in refused and str(elsewhere) not in refused
    assert list(elsewhere.iterdir()) == []


@pytest.mark.both_backends
async def test_caps_and_checks(rt: Runtime, connect: Connect) -> None:
    limits = AttachmentLimits(max_bytes=1000, max_session_bytes=2500, max_count=3)
    capped = dataclasses.replace(rt, attachment_limits=limits)

    async def attach(client: Client, *bodies: tuple[str, str, bytes], tool: str = "make_files") -> Any:
        return await client.call_tool(tool, {"files": [file(*body) for body in bodies]})

    async with connect(capped) as client:
        session = await session_of(client)
        too_big = error_text(await attach(client, ("big.bin", "application/octet-stream", bytes(1001))))
        data(await attach(client, ("a.bin", "application/octet-stream", bytes(1000))))
        data(await attach(client, ("b.bin", "application/octet-stream", bytes(1000)), tool="show_files"))
        over_total = error_text(await attach(client, ("c.bin", "application/octet-stream", bytes(501))))
        data(await attach(client, ("c.bin", "application/octet-stream", bytes(500))))
        over_count = error_text(await attach(client, ("d.bin", "application/octet-stream", bytes(1))))
    async with connect(rt) as client:
        checks = [
            error_text(await attach(client, body))
            for body in (
                ("x.png", "image/png", jpeg(5, 9)),  # declared PNG, is a JPEG
                ("x.jpg", "image/jpeg", b"\xff\xd8\xff\xe0 not really"),
                ("../x.txt", "text/plain", b"x"),
                ("x.txt", "text", b"x"),
                ("", "text/plain", b"x"),
            )
        ]
        # A writing call that fails after attaching keeps nothing; its attachment goes with it.
        failed = await client.call_tool("make_files", {"files": [file("gone.txt", "text/plain", b"x")],
                                                       "failAfter": True})  # fmt: skip
        other = await session_of(client)
    assert "at most 1000 bytes" in too_big
    assert "past 2500 bytes (2000 used)" in over_total
    assert "already has 3 attachments" in over_count
    assert "not a readable image/png image" in checks[0] and "not a readable image/jpeg image" in checks[1]
    assert "a file name, not a path" in checks[2] and "is not a MIME type" in checks[3]
    assert "a file name, not a path" in checks[4]
    assert error_text(failed) == "failed after attaching"
    assert list((rt.environment.data_dir / "attachments" / other).glob("*")) == []
    async with rt.db.read() as tx:
        assert await tx.scalar("SELECT count(*) FROM attachments WHERE session_id = ?", (other,)) == 0
        assert await tx.scalar("SELECT count(*) FROM attachments WHERE session_id = ?", (session,)) == 3


@pytest.mark.both_backends
async def test_the_store_function_for_code_outside_a_tool_call(rt: Runtime, connect: Connect) -> None:
    """What the server calls for an upstream server's image: (runtime, session id, bytes, name, mime type)."""
    async with connect(rt) as client:
        session = await session_of(client)
        stored = await attachments.store(rt, session, png(4, 2), name="upstream.png", mime_type="image/png")
        assert stored.ref is not None
        mime, body = blob_of(await client.read_resource(stored.ref.uri))
    assert (stored.ref.width, stored.ref.height, mime, body) == (4, 2, "image/png", png(4, 2))
    assert [block.type for block in stored.blocks()] == ["image", "resource_link"]
    with pytest.raises(AttachmentError, match="no valid id"):
        await attachments.store(rt, "../etc", b"x", name="x.txt", mime_type="text/plain")
    with pytest.raises(AttachmentError, match="no session"):
        await attachments.store(rt, "0190a0b0-0000-7000-8000-000000000000", b"x", name="x.txt", mime_type="text/plain")
