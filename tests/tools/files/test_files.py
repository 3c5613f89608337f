"""The file hand on real directories with real symlinks: every tool, every escape, big and odd files."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, Connect, data, error_text
from mcp import Client

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.files.tools import READ_HERE_BYTES
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture
def tree(workspace: Path, tmp_path: Path) -> dict[str, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("".join(f"line {n}\n" for n in range(1, 101)))
    (workspace / "crlf.txt").write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    (workspace / "bom.txt").write_bytes(b"\xef\xbb\xbfhello bom\n")
    (workspace / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (workspace / "blob.bin").write_bytes(b"\x00\x01binary")
    (workspace / "pixel.png").write_bytes(PNG)
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "build").mkdir()
    (workspace / "build" / "out.txt").write_text("needle in build\n")
    (workspace / "link_out").symlink_to(outside / "secret.txt")
    (workspace / "dir_out").symlink_to(outside, target_is_directory=True)
    (workspace / "link_in").symlink_to(workspace / "src" / "app.py")
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "notes.md").write_text("vault notes\n")
    return {"outside": outside, "vault": vault}


@pytest.fixture
async def rt(workspace: Path, tree: dict[str, Path]) -> AsyncIterator[Runtime]:
    config = ServeConfig.build(workspace=workspace, data_dir=None, vaults={"docs": tree["vault"]})
    async with open_runtime(config) as runtime:
        yield runtime


async def call(client: Client, tool: str, args: dict[str, Any]) -> types.CallToolResult:
    return await client.call_tool(tool, args)


@pytest.mark.parametrize("mode", ERAS)
async def test_read_windows_and_caps(rt: Runtime, connect: Connect, mode: str) -> None:
    async with connect(rt, mode) as client:
        window = data(await call(client, "read", {"path": "src/app.py", "startLine": 10, "lineCount": 3}))
        tail = data(await call(client, "read", {"path": "/workspace/src/app.py", "tailLines": 2}))
        capped = data(await call(client, "read", {"path": "src/app.py", "maxChars": 20}))
        whole = data(await call(client, "read", {"path": "link_in"}))
        clash = await call(client, "read", {"path": "src/app.py", "tailLines": 2, "startLine": 1})
    assert window["content"] == "line 10\nline 11\nline 12\n" and window["showing"] == "showing lines 10-12 of 100"
    assert tail["content"] == "line 99\nline 100\n" and tail["lineWindow"] == {"startLine": 99, "endLine": 100}
    assert capped["truncated"] is True and len(capped["content"]) == 20 and "cut at 20 characters" in capped["showing"]
    assert whole["totalLineCount"] == 100 and whole["truncated"] is False  # a symlink inside the mount is fine
    assert "tailLines cannot be combined" in error_text(clash)


@pytest.mark.parametrize("mode", ERAS)
async def test_read_shows_the_text_itself_once(rt: Runtime, connect: Connect, mode: str) -> None:
    """The model reads the file as text under one line saying what it is; the fields travel once, structured."""
    async with connect(rt, mode) as client:
        result = await call(client, "read", {"path": "src/app.py", "startLine": 10, "lineCount": 2})
    assert [block.type for block in result.content] == ["text"]
    text = result.content[0].text if isinstance(result.content[0], types.TextContent) else ""
    assert text == "/workspace/src/app.py: showing lines 10-11 of 100\nline 10\nline 11\n"
    assert result.structured_content is not None and result.structured_content["content"] == "line 10\nline 11\n"
    assert '"content"' not in text  # not the JSON again


async def test_read_answers_alike_on_either_side_of_the_inline_size(
    rt: Runtime, connect: Connect, workspace: Path
) -> None:
    """A file up to READ_HERE_BYTES is read on the event loop's thread, a larger one on a worker thread: the same
    answer either way (the windows, the counts, the cap)."""
    line = "x" * 99 + "\n"
    for name, lines in (("small.txt", READ_HERE_BYTES // 100), ("large.txt", READ_HERE_BYTES // 100 + 50)):
        (workspace / name).write_text(line * lines)
    async with connect(rt) as client:
        for name in ("small.txt", "large.txt"):
            total = (workspace / name).stat().st_size // 100
            tail = data(await call(client, "read", {"path": name, "tailLines": 1}))
            whole = data(await call(client, "read", {"path": name, "maxChars": 250}))
            assert tail["content"] == line and tail["showing"] == f"showing lines {total}-{total} of {total}"
            assert whole["totalLineCount"] == total and whole["truncated"] is True and len(whole["content"]) == 250


async def test_odd_files(rt: Runtime, connect: Connect) -> None:
    async with connect(rt) as client:
        binary = await call(client, "read", {"path": "blob.bin"})
        image = await call(client, "read", {"path": "pixel.png"})
        latin = data(await call(client, "read", {"path": "latin1.txt"}))
        bom = data(await call(client, "read", {"path": "bom.txt"}))
        folder = await call(client, "read", {"path": "src"})
        missing = await call(client, "read", {"path": "nope.txt"})
        write_dir = await call(client, "write", {"path": "src", "content": "x"})
        under_file = await call(client, "write", {"path": "src/app.py/child.txt", "content": "x"})
    assert "looks binary" in error_text(binary)
    assert data(image)["image"] == {"mimeType": "image/png", "bytes": len(PNG)}
    picture = image.content[1]
    assert isinstance(picture, types.ImageContent) and base64.b64decode(picture.data) == PNG
    assert latin["invalidUtf8Replaced"] is True and "caf\ufffd" in latin["content"]
    assert bom["encoding"] == "utf-8-sig" and bom["content"] == "hello bom\n"
    assert "is a directory, not a regular file; use glob" in error_text(folder)
    assert "does not exist" in error_text(missing)
    assert "is a directory" in error_text(write_dir)
    assert "a parent of it is a file" in error_text(under_file)


ESCAPES = [
    ("", "The path is empty"),
    ("   ", "The path is empty"),
    ("src/\x00app.py", "NUL byte"),
    ("../outside/secret.txt", "climbs out with '..'"),
    ("src/../../etc/passwd", "climbs out with '..'"),
    ("/workspace/../etc/passwd", "climbs out with '..'"),
    ("/workspace-evil/x", "outside the mounts"),
    ("/workspaces", "outside the mounts"),
    ("/etc/passwd", "outside the mounts"),
    ("/tmp", "outside the mounts"),
    ("link_out", "resolves outside /workspace"),
    ("dir_out/secret.txt", "resolves outside /workspace"),
    (".managed-tools/state.db", "server's own data directory"),
]


@pytest.mark.parametrize(("path", "expected"), ESCAPES)
@pytest.mark.parametrize("tool", ["read", "write", "edit", "edit_dry_run", "grep"])
async def test_every_escape_is_refused_by_every_tool(  # noqa: PLR0917 (fixtures and parameters)
    rt: Runtime, connect: Connect, tree: dict[str, Path], path: str, expected: str, tool: str
) -> None:
    every: dict[str, dict[str, Any]] = {
        "read": {"path": path},
        "write": {"path": path, "content": "pwned"},
        "edit": {"path": path, "oldText": "top", "newText": "pwned"},
        # A dry run's diff would show the file's lines: it goes through the same guard, so shows nothing outside.
        "edit_dry_run": {"path": path, "edits": [{"oldText": "top", "newText": "pwned"}], "dryRun": True},
        "grep": {"path": path, "query": "secret"},
    }
    async with connect(rt) as client:
        result = await call(client, tool.removesuffix("_dry_run"), every[tool])
    if path.strip():
        assert expected in error_text(result)
    else:
        assert "empty" in error_text(result) or "field 'path'" in error_text(result)
    assert "top secret" not in error_text(result)
    assert (tree["outside"] / "secret.txt").read_text() == "top secret\n"


async def test_new_files_through_symlinked_ancestors_are_refused(
    rt: Runtime, connect: Connect, tree: dict[str, Path]
) -> None:
    async with connect(rt) as client:
        result = await call(client, "write", {"path": "dir_out/new/planted.txt", "content": "x"})
        appended = await call(client, "sandbox_execute", {"name": "mkdir", "input": {"path": "dir_out/made"}})
    assert "resolves outside /workspace" in error_text(result)
    assert "resolves outside /workspace" in error_text(appended)
    assert sorted(p.name for p in tree["outside"].iterdir()) == ["secret.txt"]


async def test_mount_rules(rt: Runtime, connect: Connect) -> None:
    async with connect(rt) as client:
        substrate = await call(client, "write", {"path": "/workspace/agent/SOUL.md", "content": "x"})
        vault_read = await call(client, "read", {"path": "/vaults/docs/notes.md"})
        vault_write = await call(client, "write", {"path": "/vaults/docs/x.md", "content": "x"})
        vault_list = data(
            await call(client, "sandbox_execute", {"name": "list_dir", "input": {"path": "/vaults/docs"}})
        )
        listing = data(await call(client, "sandbox_execute", {"name": "list_dir", "input": {}}))
    assert "read-only to the file tools. Stage it, compare, then promote" in error_text(substrate)
    assert "is a vault: only listing" in error_text(vault_read)
    assert "read-only" in error_text(vault_write)
    assert [e["name"] for e in vault_list["output"]["entries"]] == ["notes.md"]
    assert ".managed-tools" not in [e["name"] for e in listing["output"]["entries"]]


async def test_write_is_atomic_and_replaces_symlinks_without_following(
    rt: Runtime, connect: Connect, workspace: Path
) -> None:
    (workspace / "inner_link").symlink_to(workspace / "src" / "app.py")
    async with connect(rt) as client:
        created = data(await call(client, "write", {"path": "deep/er/new.txt", "content": "héllo"}))
        replaced = data(await call(client, "write", {"path": "inner_link", "content": "now a file"}))
    assert created["created"] is True and created["bytes"] == len("héllo".encode())
    assert (workspace / "deep" / "er" / "new.txt").read_text() == "héllo"
    assert replaced["created"] is False and not (workspace / "inner_link").is_symlink()
    assert (workspace / "src" / "app.py").read_text().startswith("line 1\n")  # the link's target is untouched
    assert not [p for p in (workspace / "deep" / "er").iterdir() if p.name.endswith(".tmp")]


async def test_edit(rt: Runtime, connect: Connect, workspace: Path) -> None:
    async with connect(rt) as client:
        crlf = data(await call(client, "edit", {"path": "crlf.txt", "oldText": "beta\ngamma", "newText": "B\nG"}))
        bom = data(await call(client, "edit", {"path": "bom.txt", "oldText": "hello", "newText": "bye"}))
        missing = await call(client, "edit", {"path": "src/app.py", "oldText": "lime 42", "newText": "x"})
        counted = await call(
            client, "edit", {"path": "src/app.py", "oldText": "line 1", "newText": "L", "expectedReplacements": 2}
        )
        first_only = data(await call(client, "edit", {"path": "src/app.py", "oldText": "line 9\n", "newText": "9\n"}))
        every = data(
            await call(client, "edit", {"path": "src/app.py", "oldText": "line", "newText": "row", "replaceAll": True})
        )
        latin = await call(client, "edit", {"path": "latin1.txt", "oldText": "au", "newText": "x"})
    assert crlf["lineEnding"] == "crlf" and (workspace / "crlf.txt").read_bytes() == b"alpha\r\nB\r\nG\r\n"
    assert bom["encoding"] == "utf-8-sig" and (workspace / "bom.txt").read_bytes() == b"\xef\xbb\xbfbye bom\n"
    assert "nearest: line 42 (86% similar): line 42" in error_text(missing)
    assert "occurs 12 times" in error_text(counted)  # line 1, 10-19, 100
    assert first_only["occurrences"] == 1 and first_only["replacements"] == 1
    assert every["replacements"] == 99 and "row 100" in (workspace / "src" / "app.py").read_text()
    assert "not valid UTF-8" in error_text(latin)


@pytest.mark.parametrize("mode", ERAS)
async def test_edit_applies_a_list_of_edits_all_or_none(
    rt: Runtime, connect: Connect, workspace: Path, mode: str
) -> None:
    """Issue 38 item 16: the reference filesystem server's edit_file (a list of edits, dryRun, a git-style diff),
    and the single form kept."""
    app = workspace / "src" / "app.py"
    before = app.read_text()
    two = [{"oldText": "line 2\n", "newText": "second\n"}, {"oldText": "line 99\n", "newText": "ninety-nine\n"}]
    async with connect(rt, mode) as client:
        shown_preview = await call(client, "edit", {"path": "src/app.py", "edits": two, "dryRun": True})
        preview = data(shown_preview)
        untouched = app.read_text()
        broken = await call(
            client, "edit", {"path": "src/app.py", "edits": [two[0], {"oldText": "nope", "newText": "x"}]}
        )
        after_broken = app.read_text()
        applied = data(await call(client, "edit", {"path": "src/app.py", "edits": two}))
        chained = data(
            await call(
                client,
                "edit",
                {
                    "path": "src/app.py",
                    "edits": [{"oldText": "second", "newText": "2nd"}, {"oldText": "2nd", "newText": "two"}],
                },
            )
        )
        single = data(await call(client, "edit", {"path": "src/app.py", "oldText": "line 3\n", "newText": "three\n"}))
        both = await call(client, "edit", {"path": "src/app.py", "oldText": "a", "newText": "b", "edits": two})
        neither = await call(client, "edit", {"path": "src/app.py"})
        too_many = await call(client, "edit", {"path": "src/app.py", "edits": [two[0]] * 101})
        huge = await call(
            client, "edit", {"path": "src/app.py", "oldText": "line", "newText": "x" * 100_000, "replaceAll": True}
        )
        per_edit_count = await call(
            client, "edit", {"path": "src/app.py", "edits": [{"oldText": "line", "newText": "x", "replaceAll": True}]}
        )
    assert untouched == before and preview["dryRun"] is True  # a dry run writes nothing
    (block,) = shown_preview.content
    shown = block.text if isinstance(block, types.TextContent) else ""
    assert shown.startswith("/workspace/src/app.py: 2 replacement(s), dry run, nothing written\n```diff\n--- a/")
    assert "-line 2\n+second\n" in shown  # the diff as a diff, not an escaped JSON string
    assert preview["diff"].startswith("--- a/workspace/src/app.py\n+++ b/workspace/src/app.py\n@@ -1,5 +1,5 @@\n")
    assert "-line 2\n+second\n" in preview["diff"] and "-line 99\n+ninety-nine\n" in preview["diff"]
    assert preview["diff"].count("@@ ") == 2 and preview["diffTruncated"] is False
    assert "edit 2: oldText was not found" in error_text(broken) and after_broken == before  # all or none
    assert applied["diff"] == preview["diff"] and applied["replacements"] == 2 and applied["dryRun"] is False
    assert "second" not in app.read_text() and "two\n" in app.read_text()  # each edit sees the ones before it
    assert chained["replacements"] == 2
    assert single["replacements"] == 1 and "-line 3\n+three\n" in single["diff"]
    assert "not both" in error_text(both) and "required unless edits" in error_text(neither)
    assert too_many.is_error and "edits" in error_text(too_many)
    assert "over 5000000 characters" in error_text(huge) and "x" * 100 not in app.read_text()
    assert "replaceAll" in error_text(per_edit_count)  # one of edits is the reference's {oldText, newText}


async def test_a_long_diff_is_cut_at_a_line(rt: Runtime, connect: Connect, workspace: Path) -> None:
    (workspace / "big.txt").write_text("".join(f"row {n}\n" for n in range(20_000)))
    async with connect(rt) as client:
        every = data(
            await call(client, "edit", {"path": "big.txt", "oldText": "row", "newText": "R", "replaceAll": True})
        )
    assert every["replacements"] == 20_000 and every["diffTruncated"] is True
    assert len(every["diff"]) <= 20_000 and every["diff"].endswith("\n")
    assert (workspace / "big.txt").read_text().startswith("R 0\nR 1\n")


async def test_glob_and_grep(rt: Runtime, connect: Connect) -> None:
    async with connect(rt) as client:
        python = data(await call(client, "glob", {"pattern": "*.py"}))
        anywhere = data(await call(client, "glob", {"pattern": "**/*.txt"}))
        deep = data(await call(client, "glob", {"pattern": "src/**"}))
        dirs = data(await call(client, "glob", {"pattern": "*", "kind": "directory"}))
        limited = data(await call(client, "glob", {"pattern": "*", "limit": 2}))
        hits = data(await call(client, "grep", {"query": "LINE 42"}))
        exact = data(await call(client, "grep", {"query": "LINE 42", "caseSensitive": True}))
        regex = data(await call(client, "grep", {"query": r"line \d{3}", "regex": True}))
        literal = data(await call(client, "grep", {"query": "line (4", "limit": 5}))
        ignored = data(await call(client, "grep", {"query": "needle"}))
        filtered = data(await call(client, "grep", {"query": "line", "glob": "*.txt"}))
        many = data(await call(client, "grep", {"query": "line", "path": "src/app.py", "maxPerFile": 100, "limit": 7}))
        bad = await call(client, "grep", {"query": "(", "regex": True})
    assert python["matches"] == ["/workspace/src/app.py"]
    assert "/workspace/crlf.txt" in anywhere["matches"]  # `**/` matches the top level too
    assert deep["matches"] == ["/workspace/src/app.py"]
    assert dirs["matches"] == ["/workspace/src"]  # build/ is ignored; the data dir never shows
    assert limited["count"] > 2 and limited["truncated"] is True and len(limited["matches"]) == 2
    assert hits["hits"] == [{"path": "/workspace/src/app.py", "line": 42, "column": 1, "preview": "line 42"}]
    assert exact["count"] == 0
    assert [h["line"] for h in regex["hits"]] == [100]
    assert literal["count"] == 0  # a literal by default: "(" is not regex syntax here
    assert ignored["count"] == 0  # .gitignore honoured
    assert filtered["count"] == 0  # no .txt file holds "line"
    assert many["count"] == 7 and many["truncated"] is True
    assert "not a valid regular expression" in error_text(bad)


async def test_big_files_are_windowed_not_loaded(rt: Runtime, connect: Connect, workspace: Path) -> None:
    big = workspace / "big.log"

    def make() -> None:
        block = b"".join(b"%09d filler filler filler filler filler filler filler filler filler!\n" % n for n in
                         range(10_000))  # fmt: skip
        with open(big, "wb") as handle:
            for _ in range(140):  # ~100 MB
                handle.write(block)
            handle.write(b"the unique last line\n")

    await anyio.to_thread.run_sync(make)
    assert big.stat().st_size > 100_000_000
    async with connect(rt) as client:
        middle = data(await call(client, "read", {"path": "big.log", "startLine": 700_000, "lineCount": 2}))
        tail = data(await call(client, "read", {"path": "big.log", "tailLines": 1}))
        head = data(await call(client, "read", {"path": "big.log"}))
        found = data(await call(client, "grep", {"query": "unique last", "path": "big.log"}))
    assert middle["content"].startswith("000009999 filler") and middle["selectedLineCount"] == 2
    assert tail["content"] == "the unique last line\n" and tail["totalLineCount"] == 1_400_001
    assert head["truncated"] is True and head["charCount"] == 12_000
    assert found["hits"][0]["line"] == 1_400_001
    os.remove(big)


async def test_sandbox_routes_to_the_same_code(rt: Runtime, connect: Connect, workspace: Path) -> None:
    async with connect(rt) as client:
        described = data(await call(client, "sandbox_describe", {}))
        wrote = data(
            await call(client, "sandbox_execute", {"name": "write_text", "input": {"path": "s.txt", "content": "a"}})
        )
        appended = data(
            await call(client, "sandbox_execute", {"name": "append_text", "input": {"path": "s.txt", "content": "b"}})
        )
        stat = data(await call(client, "sandbox_execute", {"name": "stat", "input": {"path": "s.txt"}}))
        made = data(await call(client, "sandbox_execute", {"name": "mkdir", "input": {"path": "made/here"}}))
        escape = await call(client, "sandbox_execute", {"name": "read_text", "input": {"path": "../etc/passwd"}})
        shell = await call(client, "sandbox_execute", {"name": "run_shell", "input": {"command": "rm -rf /"}})
        bad_input = await call(client, "sandbox_execute", {"name": "read_text", "input": {"nope": 1}})
    assert {a["name"] for a in described["actions"]} >= {"read_text", "grep_text", "run_shell"}
    assert wrote["ok"] is True and appended["output"]["bytes"] == 2 and (workspace / "s.txt").read_text() == "ab"
    assert stat["output"]["kind"] == "file" and stat["output"]["size"] == 2
    assert made["output"]["created"] is True and (workspace / "made" / "here").is_dir()
    assert "climbs out" in error_text(escape)
    assert "shell_run needs a person's approval" in error_text(shell)  # routed, it asks as shell_run does
    assert "Invalid arguments for read:" in error_text(bad_input) and "unexpected field 'nope'" in error_text(bad_input)


async def test_glob_lists_empty_directories_but_not_ignored_ones(
    runtime: Runtime, connect: Connect, workspace: Path
) -> None:
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "build" / "cache").mkdir(parents=True)
    (workspace / "build" / "out.o").write_text("x")
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("x")
    (workspace / "src" / "empty").mkdir()
    async with connect(runtime) as client:
        data(await client.call_tool("sandbox_execute", {"name": "mkdir", "input": {"path": "d1/d2"}}))
        d2 = data(await client.call_tool("glob", {"pattern": "d2", "kind": "directory"}))
        every = data(await client.call_tool("glob", {"pattern": "**", "kind": "directory"}))
        both = data(await client.call_tool("glob", {"pattern": "*"}))
        only_files = data(await client.call_tool("glob", {"pattern": "**", "kind": "file"}))
    assert d2["matches"] == ["/workspace/d1/d2"]
    assert every["matches"] == ["/workspace/d1", "/workspace/d1/d2", "/workspace/src", "/workspace/src/empty"]
    assert "/workspace/d1" in both["matches"] and "/workspace/.gitignore" in both["matches"]
    assert only_files["matches"] == ["/workspace/.gitignore", "/workspace/src/a.py"]
