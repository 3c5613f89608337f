"""The substrate: stage → edit → compare → promote, versions and restore, against real files and real SQLite.

Approvals go through a real client's elicitation (both eras) or the real `managed-tools approve` CLI; the race is
between real server processes; the failure-after-the-write case runs the real promotion inside a real transaction.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import ERAS, Connect, data, error_text, runtime_with
from mcp import Client, StdioServerParameters
from mcp.client import ClientRequestContext
from test_permissions import answer, cli

from managed_tools.sandbox.mounts import substrate_dir
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.tools.framework.context.context import Runtime, ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.substrate.access import MAX_FILE_BYTES
from managed_tools.tools.substrate.line_diff import line_diff
from managed_tools.tools.substrate.promotion import PromoteArgs, PromoteOutput, resources_promote_to_substrate

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

SOUL = "# Soul\nbe kind\nbe brave\n"
EDITED = "# Soul\nbe kind and brief\nbe brave\n"
PROMOTE = "resources_promote_to_substrate"
RESTORE = "resources_restore_version"


@pytest.fixture
def config(config: ServeConfig) -> ServeConfig:
    """These tests start from an empty substrate: a new agent's default files are off (test_substrate_defaults.py
    has them)."""
    return config.model_copy(update={"substrate_defaults": False})


def sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def substrate(config: ServeConfig) -> Path:
    return substrate_dir(config.data_dir, config.agent)


def seed(config: ServeConfig, relative: str, text: str) -> Path:
    """A file a person put into the substrate directly (the seeded files have no version)."""
    path = substrate(config) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def yes(seen: list[str] | None = None) -> Any:
    return answer("accept", {"approve": True}, seen)


async def versions(client: Client, target: str = "SOUL.md") -> list[dict[str, Any]]:
    listed = data(await client.call_tool("resources_list_versions", {"targetPath": target, "limit": 100}))
    return list(listed["versions"])


async def version_rows(runtime: Runtime) -> int:
    async with runtime.db.read() as tx:
        return int(await tx.scalar("SELECT COUNT(*) FROM substrate_versions"))


# ---- the round trip ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_stage_edit_compare_promote_round_trip(
    runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path, mode: str
) -> None:
    soul = seed(config, "SOUL.md", SOUL)
    asked: list[str] = []
    async with connect(runtime, mode, elicitation_callback=yes(asked)) as client:
        listed = data(await client.call_tool("resources_list", {}))
        staged = data(await client.call_tool("resources_stage_from_substrate", {"sourcePath": "SOUL.md"}))
        fresh = data(await client.call_tool("resources_list_staged_drafts", {}))
        (workspace / "SOUL.md").write_text(EDITED)
        edited = data(await client.call_tool("resources_list_staged_drafts", {}))
        compared = data(await client.call_tool("resources_compare_with_substrate", {"sessionPath": "SOUL.md"}))
        step = compared["nextSuggestedTool"]
        promoted = data(await client.call_tool(step["tool"], step["args"]))
        history = await versions(client)
        read = data(await client.call_tool("resources_read_version", {"versionId": promoted["versionId"]}))
        after = data(await client.call_tool("resources_list_staged_drafts", {}))
        again = data(await client.call_tool("resources_compare_with_substrate", {"sessionPath": "/workspace/SOUL.md"}))
        relisted = data(await client.call_tool("resources_list", {}))

    assert [r["mountPath"] for r in listed["resources"]] == ["/workspace", "/workspace/agent"]
    assert listed["substrateFiles"] == [{"path": "/workspace/agent/SOUL.md", "sizeBytes": 24, "latestVersionId": None}]
    assert staged["sourcePath"] == "/workspace/agent/SOUL.md" and staged["targetPath"] == "/workspace/SOUL.md"
    assert staged["sourceContentHash"] == staged["targetContentHash"] == sha(SOUL) and not staged["reusedExisting"]
    assert [d["status"] for d in fresh["drafts"]] == ["in_sync"]
    draft = edited["drafts"][0]
    assert draft["status"] == "ready" and draft["draftChangedSinceStage"] and not draft["sourceChangedSinceStage"]

    assert not compared["identical"] and compared["substrateExists"]
    assert (compared["differingLineCount"], compared["addedLineCount"], compared["removedLineCount"]) == (1, 1, 1)
    assert compared["preview"] == [
        "--- /workspace/agent/SOUL.md",
        "+++ /workspace/SOUL.md",
        "@@ -1,3 +1,3 @@",
        " # Soul",
        "-be kind",
        "+be kind and brief",
        " be brave",
    ]
    assert compared["promotePrecondition"] == {
        "expectedVersionId": None,
        "expectedContentHash": sha(SOUL),
        "versionAvailable": False,
        "contentHashAvailable": True,
    }
    assert step["tool"] == PROMOTE and step["args"]["overwrite"] is True

    assert soul.read_text() == EDITED
    assert promoted["contentHash"] == sha(EDITED) and promoted["previousVersionId"] is None
    assert promoted["uri"] == "managed-tools://files/agent/SOUL.md"
    assert [v["versionId"] for v in history] == [promoted["versionId"]]
    assert history[0]["sourcePath"] == "/workspace/SOUL.md" and history[0]["targetPath"] == "/workspace/agent/SOUL.md"
    assert read["content"] == EDITED and read["version"]["sizeBytes"] == len(EDITED)
    assert [d["status"] for d in after["drafts"]] == ["in_sync"]
    assert again["identical"] and again["preview"] == [] and again["nextSuggestedTool"] is None
    assert again["promotePrecondition"]["expectedVersionId"] == promoted["versionId"]
    assert relisted["substrateFiles"][0]["latestVersionId"] == promoted["versionId"]
    # What the person was shown: the resolved target and the diff, not just the arguments.
    assert len(asked) == 1
    assert "Target: /workspace/agent/SOUL.md" in asked[0] and "-be kind\n+be kind and brief" in asked[0]


@pytest.mark.sqlite_only(reason="CLI approval, covered on PostgreSQL by test_permissions")
@pytest.mark.parametrize("mode", ERAS)
async def test_out_of_band_approval_with_the_cli(
    runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path, mode: str
) -> None:
    soul = seed(config, "SOUL.md", SOUL)
    (workspace / "SOUL.md").write_text(EDITED)
    args = {"sourcePath": "SOUL.md", "overwrite": True, "expectedContentHash": sha(SOUL)}
    async with connect(runtime, mode) as client:  # no elicitation: fail closed
        blocked = await client.call_tool(PROMOTE, args)
        request_id = (blocked.meta or {})["managed-tools/requiresAction"]["requestId"]
        assert soul.read_text() == SOUL and await version_rows(runtime) == 0
        approved = await cli(config, "approve", request_id)
        assert approved.returncode == 0, approved.stderr
        promoted = data(await client.call_tool(PROMOTE, args))
        replayed = await client.call_tool(PROMOTE, args)
    assert f"managed-tools approve {request_id}" in error_text(blocked)
    assert soul.read_text() == EDITED and promoted["contentHash"] == sha(EDITED)
    assert "content precondition failed" in error_text(replayed)  # its expectation is stale now
    assert await version_rows(runtime) == 1


def test_the_diff_matches_lines_not_positions() -> None:
    old = "".join(f"line {n}\n" for n in range(1, 30))
    inserted = line_diff(old, "new first line\n" + old, "old", "new", 100)
    assert (inserted.differing, inserted.added, inserted.removed) == (1, 1, 0)  # positionally, all 29 would differ
    assert inserted.lines[:5] == ["--- old", "+++ new", "@@ -1,2 +1,3 @@", "+new first line", " line 1"]
    no_newline = line_diff("a\nb\n", "a\nb", "old", "new", 100)
    assert no_newline.lines[-3:] == ["-b", "+b", "\\ No newline at end of file"]
    assert line_diff(old, old, "old", "new", 100).lines == []
    far_apart = line_diff(old, old.replace("line 2\n", "two\n").replace("line 28\n", "x" * 500 + "\n"), "o", "n", 9)
    # two hunks of 5 diff lines; 9 of them shown, under their file and hunk headers
    assert far_apart.differing == 2 and len(far_apart.lines) == 13 and far_apart.hidden == 1
    assert max(len(line) for line in far_apart.lines) <= 200


# ---- staging -------------------------------------------------------------------------------------------------


async def test_staging_reuses_its_own_draft_and_never_clobbers_others(
    runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path
) -> None:
    seed(config, "SOUL.md", SOUL)
    seed(config, "team/TOOLS.md", "tools\n")
    (workspace / "notes.md").write_text("the user's own notes\n")
    async with connect(runtime) as client:
        first = data(await client.call_tool("resources_stage_from_substrate", {"sourcePath": "SOUL.md"}))
        (workspace / "SOUL.md").write_text(EDITED)
        reused = data(await client.call_tool("resources_stage_from_substrate", {"sourcePath": "SOUL.md"}))
        clash = await client.call_tool(
            "resources_stage_from_substrate", {"sourcePath": "team/TOOLS.md", "targetPath": "notes.md"}
        )
        nested = data(
            await client.call_tool("resources_stage_from_substrate", {"sourcePath": "/workspace/agent/team/TOOLS.md"})
        )
        replaced = data(
            await client.call_tool(
                "resources_stage_from_substrate", {"sourcePath": "SOUL.md", "targetPath": "notes.md", "overwrite": True}
            )
        )
        missing = await client.call_tool("resources_stage_from_substrate", {"sourcePath": "NOPE.md"})
        into_substrate = await client.call_tool(
            "resources_stage_from_substrate", {"sourcePath": "SOUL.md", "targetPath": "/workspace/agent/COPY.md"}
        )
        drafts = data(await client.call_tool("resources_list_staged_drafts", {}))
    assert not first["reusedExisting"]
    assert reused["reusedExisting"] and reused["divergedFromSource"]
    assert reused["targetContentHash"] == sha(EDITED) and (workspace / "SOUL.md").read_text() == EDITED  # kept
    assert "/workspace/notes.md already exists in the session workspace; pass overwrite=true" in error_text(clash)
    assert nested["targetPath"] == "/workspace/team/TOOLS.md" and (workspace / "team/TOOLS.md").read_text() == "tools\n"
    assert replaced["targetPath"] == "/workspace/notes.md" and (workspace / "notes.md").read_text() == SOUL
    assert "/workspace/agent/NOPE.md does not exist in the shared substrate" in error_text(missing)
    assert "is not in the session workspace" in error_text(into_substrate)
    assert not (substrate(config) / "COPY.md").exists()
    assert drafts["count"] == 3


async def test_draft_statuses(runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path) -> None:
    for name in ("a.md", "b.md", "c.md", "d.md"):
        seed(config, name, f"{name}\n")
    async with connect(runtime) as client:
        for name in ("a.md", "b.md", "c.md", "d.md"):
            data(await client.call_tool("resources_stage_from_substrate", {"sourcePath": name}))
        (workspace / "b.md").write_text("edited\n")
        (workspace / "c.md").unlink()
        (substrate(config) / "d.md").unlink()
        listed = data(await client.call_tool("resources_list_staged_drafts", {}))
        limited = data(await client.call_tool("resources_list_staged_drafts", {"limit": 1}))
    status = {d["sessionPath"]: d["status"] for d in listed["drafts"]}
    assert status == {
        "/workspace/a.md": "in_sync",
        "/workspace/b.md": "ready",
        "/workspace/c.md": "draft_missing",
        "/workspace/d.md": "substrate_missing",
    }
    d = next(d for d in listed["drafts"] if d["sessionPath"] == "/workspace/d.md")
    assert d["sourceChangedSinceStage"] and not d["substrateExists"] and d["substrateContentHash"] is None
    assert limited["count"] == 4 and len(limited["drafts"]) == 1


# ---- promotion rules -----------------------------------------------------------------------------------------


async def test_new_files_overwrite_and_defaults(
    runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path
) -> None:
    (workspace / "drafts").mkdir()
    (workspace / "drafts" / "today.md").write_text("first\n")
    asked: list[str] = []
    async with connect(runtime, "legacy", elicitation_callback=yes(asked)) as client:
        args = {"sourcePath": "drafts/today.md", "targetPath": "journal/2026/today.md"}
        created = data(await client.call_tool(PROMOTE, args))
        (workspace / "drafts" / "today.md").write_text("second\n")
        exists = await client.call_tool(PROMOTE, args)
        overwritten = data(await client.call_tool(PROMOTE, {**args, "overwrite": True}))
        # The manifest now links the draft to its target, so the target is the default from here on.
        compared = data(await client.call_tool("resources_compare_with_substrate", {"sessionPath": "drafts/today.md"}))
        missing = await client.call_tool(PROMOTE, {"sourcePath": "drafts/none.md"})
    target = substrate(config) / "journal/2026/today.md"
    assert created["targetPath"] == "/workspace/agent/journal/2026/today.md" and created["previousVersionId"] is None
    assert "already exists in the shared substrate; pass overwrite=true" in error_text(exists)
    assert overwritten["previousVersionId"] == created["versionId"] and target.read_text() == "second\n"
    assert compared["substratePath"] == "/workspace/agent/journal/2026/today.md" and compared["identical"]
    assert "/workspace/drafts/none.md does not exist in the session workspace" in error_text(missing)
    assert len(asked) == 2  # the refusals were decided before a person was asked
    assert "(a new file;" in asked[0] and "+first" in asked[0]


async def test_the_outcome_gate(runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path) -> None:
    soul = seed(config, "SOUL.md", SOUL)
    (workspace / "SOUL.md").write_text(EDITED)
    asked: list[str] = []
    async with connect(runtime, "legacy", elicitation_callback=yes(asked)) as client:
        forced = await client.call_tool(
            PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True, "requireOutcomePass": True}
        )
        outcome = {"title": "Tune the soul", "successCriteria": ["soul tuned"]}
        data(await client.call_tool("outcome_define", outcome))
        closed = await client.call_tool(PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True})
        assert soul.read_text() == SOUL and asked == []
        bypassed = data(
            await client.call_tool(PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True, "requireOutcomePass": False})
        )
        restore_closed = await client.call_tool(RESTORE, {"versionId": bypassed["versionId"]})
    # A new wake of the same session: the refused calls above would otherwise make the evaluation `fail`.
    session_id = bypassed["sessionId"]
    async with connect(runtime, "legacy", session_id=session_id, elicitation_callback=yes(asked)) as client:
        data(await client.call_tool("memory_write", {"target": "session_state", "content": "soul tuned"}))
        (workspace / "SOUL.md").write_text("# Soul\nbe kind, brief and brave\n")
        opened = data(await client.call_tool(PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True}))
        restored = data(await client.call_tool(RESTORE, {"versionId": bypassed["versionId"]}))
    assert "Current status=missing_outcome" in error_text(forced)
    assert f"{PROMOTE} requires outcome_evaluate to return status=pass" in error_text(closed)
    assert "Current status=not_ready" in error_text(closed)
    assert f"{RESTORE} requires outcome_evaluate to return status=pass" in error_text(restore_closed)
    assert bypassed["outcomeEvaluation"] is None
    assert opened["outcomeEvaluation"]["status"] == "pass" and restored["outcomeEvaluation"]["status"] == "pass"
    assert soul.read_text() == EDITED
    assert len(asked) == 3  # bypassed, opened, restored: closed gates never reached a person


# ---- stale expectations and changes on disk -------------------------------------------------------------------


async def test_stale_expectations_are_refused_and_write_nothing(
    runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path
) -> None:
    soul = seed(config, "SOUL.md", SOUL)
    asked: list[str] = []
    async with connect(runtime, "legacy", elicitation_callback=yes(asked)) as client:
        data(await client.call_tool("resources_stage_from_substrate", {"sourcePath": "SOUL.md"}))
        (workspace / "SOUL.md").write_text(EDITED)
        seen = data(await client.call_tool("resources_compare_with_substrate", {"sessionPath": "SOUL.md"}))
        first = data(
            await client.call_tool(
                PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True, "expectedContentHash": sha(SOUL)}
            )
        )
        (workspace / "SOUL.md").write_text("someone else's idea\n")
        second = data(
            await client.call_tool(
                PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True, "expectedVersionId": first["versionId"]}
            )
        )
        (workspace / "SOUL.md").write_text("my late idea\n")
        stale_version = await client.call_tool(
            PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True, "expectedVersionId": first["versionId"]}
        )
        stale_hash = await client.call_tool(
            PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True, "expectedContentHash": seen["substrateContentHash"]}
        )
        history = await versions(client)
    assert f"version precondition failed for /workspace/agent/SOUL.md: expected {first['versionId']}" in error_text(
        stale_version
    )
    assert f"but latest is {second['versionId']}" in error_text(stale_version)
    assert "content precondition failed" in error_text(stale_hash)
    assert f"the live file hashes to {sha(chr(10).join(['someone else' + chr(39) + 's idea', '']))}" in error_text(
        stale_hash
    )
    assert soul.read_text() == "someone else's idea\n"
    assert [v["versionId"] for v in history] == [second["versionId"], first["versionId"]]
    assert len(asked) == 2


async def test_a_file_changed_on_disk_between_compare_and_promote(
    runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path
) -> None:
    soul = seed(config, "SOUL.md", SOUL)
    (workspace / "SOUL.md").write_text(EDITED)

    async def edits_while_deciding(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        # The check before asking passed; the file changes while the person reads the question.
        soul.write_text("a person's direct edit\n")
        return types.ElicitResult(action="accept", content={"approve": True})

    async with connect(runtime, "legacy", elicitation_callback=edits_while_deciding) as client:
        compared = data(await client.call_tool("resources_compare_with_substrate", {"sessionPath": "SOUL.md"}))
        expect = {k: v for k, v in compared["promotePrecondition"].items() if k.startswith("expected") and v}
        during = await client.call_tool(PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True, **expect})
        soul.write_text("another direct edit\n")
        before = await client.call_tool(PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True, **expect})
    assert "content precondition failed" in error_text(during)  # the handler checked again, in its transaction
    assert "content precondition failed" in error_text(before)
    assert soul.read_text() == "another direct edit\n" and await version_rows(runtime) == 0


# ---- restore -------------------------------------------------------------------------------------------------


async def test_restore_records_a_new_version(
    runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path
) -> None:
    soul = seed(config, "SOUL.md", SOUL)
    asked: list[str] = []
    async with connect(runtime, "legacy", elicitation_callback=yes(asked)) as client:
        promoted = []
        for text in (SOUL, EDITED):
            (workspace / "SOUL.md").write_text(text)
            promoted.append(data(await client.call_tool(PROMOTE, {"sourcePath": "SOUL.md", "overwrite": True})))
        v1, v2 = (p["versionId"] for p in promoted)
        stale = await client.call_tool(RESTORE, {"versionId": v1, "expectedVersionId": v1})
        unknown = await client.call_tool(RESTORE, {"versionId": "no-such-version"})
        restored = data(
            await client.call_tool(
                RESTORE, {"versionId": v1, "expectedVersionId": v2, "expectedContentHash": sha(EDITED)}
            )
        )
        history = await versions(client)
        compared = data(await client.call_tool("resources_compare_with_substrate", {"sessionPath": "SOUL.md"}))
    assert "version precondition failed" in error_text(stale) and f"but latest is {v2}" in error_text(stale)
    assert "No substrate version exists for versionId=no-such-version." in error_text(unknown)
    assert restored["restoredFromVersionId"] == v1 and restored["previousVersionId"] == v2
    assert restored["contentHash"] == sha(SOUL) and soul.read_text() == SOUL
    assert [v["versionId"] for v in history] == [restored["versionId"], v2, v1]
    assert history[0]["restoredFromVersionId"] == v1 and history[0]["sourcePath"] == "/workspace/agent/SOUL.md"
    assert compared["promotePrecondition"]["expectedVersionId"] == restored["versionId"]
    assert (
        "-be kind and brief\n+be kind" in asked[-1]
        and f"Restore /workspace/agent/SOUL.md to its version {v1}" in (asked[-1])
    )


# ---- bad paths and bad files ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        ("resources_stage_from_substrate", {"sourcePath": "../state.db"}, "climbs out with '..'"),
        ("resources_stage_from_substrate", {"sourcePath": "/etc/passwd"}, "is outside the mounts"),
        ("resources_stage_from_substrate", {"sourcePath": "/workspace/SOUL.md"}, "is not in the shared substrate"),
        ("resources_stage_from_substrate", {"sourcePath": "SOUL.md", "targetPath": "../x.md"}, "climbs out"),
        ("resources_stage_from_substrate", {"sourcePath": "/workspace/agent"}, "is the substrate itself"),
        ("resources_compare_with_substrate", {"sessionPath": "/workspace/agent/SOUL.md"}, "not in the session"),
        ("resources_compare_with_substrate", {"sessionPath": "x.md", "substratePath": "a/../../x"}, "climbs out"),
        ("resources_list_versions", {"targetPath": "/workspace/agent/../../etc"}, "climbs out"),
        (PROMOTE, {"sourcePath": "/workspace/agent/SOUL.md"}, "not in the session workspace"),
        (PROMOTE, {"sourcePath": "x.md", "targetPath": "/tmp/x.md"}, "is outside the mounts"),
        (PROMOTE, {"sourcePath": "x.md", "targetPath": "/workspace/x.md"}, "is not in the shared substrate"),
        (PROMOTE, {"sourcePath": "x.md", "targetPath": "a\x00b"}, "NUL byte"),
        (PROMOTE, {"sourcePath": "x.md", "targetPath": "link-out/x.md"}, "resolves outside /workspace/agent"),
        (PROMOTE, {"sourcePath": "x.md", "targetPath": "alias.md"}, "is a symbolic link or lies under one"),
        (PROMOTE, {"sourcePath": "x.md", "targetPath": "dir-alias/new.md"}, "is a symbolic link or lies under one"),
        (PROMOTE, {"sourcePath": "into-data.md"}, "resolves outside /workspace"),  # the substrate is not in it
        (PROMOTE, {"sourcePath": "x.md", "targetPath": "folder"}, "not a regular file"),
        (PROMOTE, {"sourcePath": "binary.md"}, "looks binary"),
        (PROMOTE, {"sourcePath": "latin1.md"}, "is not UTF-8 text"),
        (PROMOTE, {"sourcePath": "huge.md"}, f"is larger than {MAX_FILE_BYTES} bytes"),
    ],
)
async def test_paths_that_escape_and_files_that_are_not_text(
    runtime: Runtime, connect: Connect, config: ServeConfig, tmp_path: Path, case: tuple[str, dict[str, Any], str]
) -> None:
    tool, args, expected = case
    root, workspace = substrate(config), config.workspace
    seed(config, "SOUL.md", SOUL)
    (root / "folder").mkdir()
    (root / "real").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("outside\n")
    os.symlink(outside, root / "link-out")  # a link in the substrate pointing out of it
    os.symlink(root / "SOUL.md", root / "alias.md")  # links inside it would split a path from its history
    os.symlink(root / "real", root / "dir-alias")
    os.symlink(root / "SOUL.md", workspace / "into-data.md")  # a draft that is really the substrate file
    (workspace / "x.md").write_text("draft\n")
    (workspace / "binary.md").write_bytes(b"text\x00more")
    (workspace / "latin1.md").write_bytes("caf\xe9\n".encode("latin-1"))
    (workspace / "huge.md").write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    async with connect(runtime, "legacy", elicitation_callback=yes()) as client:
        result = await client.call_tool(tool, args)
    assert expected in error_text(result)
    assert (outside / "x.md").read_text() == "outside\n" and sorted(p.name for p in outside.iterdir()) == ["x.md"]
    assert (root / "SOUL.md").read_text() == SOUL and not (root / "real" / "new.md").exists()
    assert await version_rows(runtime) == 0


# ---- disk and history agree ------------------------------------------------------------------------------------


class FailArgs(PromoteArgs):
    pass


def promote_then_fail(disk: list[str]) -> ToolDefinition:
    """The real promotion, then a failure after the file was renamed into place (as a failing span insert, a
    deadline or a failed COMMIT would be): the transaction rolls back, and so must the file."""

    async def handler(ctx: ToolContext, args: FailArgs) -> PromoteOutput:
        out = await resources_promote_to_substrate(ctx, args)
        target = ctx.runtime.guard.resolve(out.target_path).host
        disk.append(target.read_text())
        raise ToolError("failed after the write")

    return ToolDefinition(
        name="probe_promote_then_fail",
        title="Promote, then fail",
        description="Test tool: the real promotion followed by a failure in the same transaction.",
        input_model=FailArgs,
        output_model=PromoteOutput,
        handler=handler,
        read_only=False,
        effects=("resource_write",),
    )


async def test_a_failure_after_the_write_puts_the_file_back(
    config: ServeConfig, connect: Connect, workspace: Path
) -> None:
    soul = seed(config, "SOUL.md", SOUL)
    (workspace / "SOUL.md").write_text(EDITED)
    disk: list[str] = []
    async with runtime_with(config, promote_then_fail(disk)) as runtime, connect(runtime) as client:
        replaced = await client.call_tool("probe_promote_then_fail", {"sourcePath": "SOUL.md", "overwrite": True})
        created = await client.call_tool("probe_promote_then_fail", {"sourcePath": "SOUL.md", "targetPath": "x/y/z.md"})
        drafts = data(await client.call_tool("resources_list_staged_drafts", {}))
        assert await version_rows(runtime) == 0
    assert "failed after the write" in error_text(replaced) and "failed after the write" in error_text(created)
    assert disk == [EDITED, EDITED]  # each write happened ...
    assert soul.read_text() == SOUL  # ... and was undone with the transaction
    assert not (substrate(config) / "x").exists()
    assert drafts["count"] == 0  # the manifest entry rolled back too


@asynccontextmanager
async def server_process(workspace: Path, *extra: str) -> AsyncIterator[Client]:
    args = ["-m", "managed_tools.server", "serve", "--workspace", str(workspace), "--allow", PROMOTE, *extra]
    async with Client(StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))) as client:
        yield client


@pytest.mark.sqlite_only(reason="processes racing CAS on PostgreSQL: test_memory")
async def test_racing_processes_one_wins_and_disk_matches_history(config: ServeConfig, workspace: Path) -> None:
    soul = seed(config, "SOUL.md", SOUL)
    (workspace / "base.md").write_text(SOUL)
    writers = 4
    for n in range(writers):
        (workspace / f"draft{n}.md").write_text(f"# Soul\nwriter {n} was here\n")
    results: list[str] = []
    ready = anyio.Event()
    connected = 0

    async def promoter(n: int, expected: str) -> None:
        nonlocal connected
        async with server_process(workspace) as client:
            connected += 1
            if connected == writers:
                ready.set()
            await ready.wait()
            args = {
                "sourcePath": f"draft{n}.md",
                "targetPath": "SOUL.md",
                "overwrite": True,
                "expectedVersionId": expected,
            }
            result = await client.call_tool(PROMOTE, args)
            results.append("won" if not result.is_error else error_text(result))

    async with server_process(workspace) as observer:
        base = await observer.call_tool(PROMOTE, {"sourcePath": "base.md", "targetPath": "SOUL.md", "overwrite": True})
        async with anyio.create_task_group() as tg:
            for n in range(writers):
                tg.start_soon(promoter, n, data(base)["versionId"])
        history = await versions(observer)
        latest = data(await observer.call_tool("resources_read_version", {"versionId": history[0]["versionId"]}))
    assert results.count("won") == 1
    losers = [r for r in results if r != "won"]
    assert all("version precondition failed" in r and f"but latest is {history[0]['versionId']}" in r for r in losers)
    assert len(history) == 2 and history[1]["versionId"] == data(base)["versionId"]
    assert soul.read_text() == latest["content"] and sha(soul.read_bytes()) == history[0]["contentHash"]


async def test_a_one_line_diff_preview_shows_a_change(
    runtime: Runtime, connect: Connect, config: ServeConfig, workspace: Path
) -> None:
    (substrate_dir(config.data_dir, config.agent) / "SOUL.md").write_text("# Soul\nbe kind\nbe brave\n")
    async with connect(runtime) as client:
        data(await client.call_tool("resources_stage_from_substrate", {"sourcePath": "SOUL.md"}))
        (workspace / "SOUL.md").write_text("# Soul\nbe kind and brief\nbe brave\n")
        one = data(
            await client.call_tool("resources_compare_with_substrate", {"sessionPath": "SOUL.md", "maxPreviewLines": 1})
        )
        whole = data(await client.call_tool("resources_compare_with_substrate", {"sessionPath": "SOUL.md"}))
    assert one["preview"] == ["--- /workspace/agent/SOUL.md", "+++ /workspace/SOUL.md", "@@ -2 +2 @@", "-be kind"]
    assert one["previewTruncated"] and not whole["previewTruncated"]
    assert whole["preview"][3:] == [" # Soul", "-be kind", "+be kind and brief", " be brave"]
