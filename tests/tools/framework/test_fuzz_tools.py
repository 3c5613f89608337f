"""Every published tool called with schema-driven arguments and mutations off its schema, through a real
in-process `mcp.Client` in a throwaway workspace: each result is a success or an isError that names the problem,
never an internal error, a traceback or a host path. The budget is short and derandomized (the same arguments
every run); bench/fuzz.py runs the long one. Below it, one regression test per bug the fuzzer found."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from conftest import Connect, error_text
from mcp import Client
from support.fuzz_arguments import Verdicts, fuzz_catalogue

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.publishing.publish import ERROR_META_KEY
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.catalogue import build_registry
from managed_tools.tools.framework.context.context import Runtime

pytestmark = pytest.mark.anyio

APPROVAL_WAIT = 1.0  # a call that needs a person is refused or paused at once, never waited on for long


def throwaway(workspace: Path, *, allow_all: bool) -> ServeConfig:
    """A workspace with something in it; `allow_all` lets every call reach its handler (no approval asked),
    with no network for the shell: destructive tools act only inside this workspace (the path guard for files,
    Landlock for what the shell runs)."""
    (workspace / "notes.md").write_text("# notes\nhello\n")
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("print('hi')\n")
    config = ServeConfig.build(workspace=workspace, data_dir=None, approval_wait_seconds=APPROVAL_WAIT)
    if allow_all:
        config = config.model_copy(
            update={"policy": dict.fromkeys(build_registry().names(), "always_allow"), "shell_network": False}
        )
    return config


def report(verdicts: Verdicts) -> str:
    return "\n".join(f"{tool} {args!r:.300} -> {why}" for tool, args, why in verdicts.failures[:20])


async def fuzz(config: ServeConfig, mode: str, examples: int) -> Verdicts:
    async with open_runtime(config) as runtime:
        server = build_server(runtime, transport="memory", approval_wait_seconds=APPROVAL_WAIT)
        async with Client(server, mode=mode) as client:
            verdicts = await fuzz_catalogue(
                client,
                examples,
                host_paths=[config.workspace, config.data_dir, config.workspace.parent],
                data_dir=config.data_dir,
                call_seconds=30,
            )
        files_outside = sorted(p.name for p in config.workspace.parent.iterdir())
    assert files_outside == ["workspace"], "something was written beside the workspace"
    return verdicts


async def test_every_tool_answers_clearly_with_every_call_allowed(workspace: Path) -> None:
    verdicts = await fuzz(throwaway(workspace, allow_all=True), "auto", examples=8)
    assert verdicts.calls >= 8 * 50 and verdicts.successes and verdicts.errors
    assert not verdicts.failures, report(verdicts)


async def test_every_tool_answers_clearly_under_the_default_policy(workspace: Path) -> None:
    """Handshake era, no elicitation: an always_ask tool is refused with the way to approve, not a hang."""
    verdicts = await fuzz(throwaway(workspace, allow_all=False), "legacy", examples=3)
    assert verdicts.calls >= 3 * 50
    assert not verdicts.failures, report(verdicts)


# ---- what the fuzzer found -----------------------------------------------------------------------------------


@pytest.fixture
async def allowed(workspace: Path) -> AsyncIterator[Runtime]:
    async with open_runtime(throwaway(workspace, allow_all=True)) as runtime:
        yield runtime


async def refusal(connect: Connect, runtime: Runtime, tool: str, args: Mapping[str, object]) -> tuple[str, str]:
    """(error kind, message) of a call that must be refused."""
    async with connect(runtime) as client:
        result = await client.call_tool(tool, dict(args))
    return (result.meta or {})[ERROR_META_KEY]["kind"], error_text(result)


async def test_a_lone_surrogate_in_arguments_is_invalid_not_internal(connect: Connect, allowed: Runtime) -> None:
    # Over stdio and HTTP the JSON parser refuses "\ud800"; in process (and for a library caller) it arrives.
    kind, text = await refusal(connect, allowed, "memory_search", {"query": "x\ud800y"})
    assert kind == "invalid_arguments"
    assert "lone surrogate" in text


async def test_a_nul_byte_in_a_grep_query_or_glob_is_invalid_not_internal(connect: Connect, allowed: Runtime) -> None:
    for args in ({"query": "a\x00b"}, {"query": "a", "glob": "*.md\x00"}):
        kind, text = await refusal(connect, allowed, "grep", args)
        assert kind == "invalid_arguments"
        assert "NUL byte" in text


async def test_a_nul_byte_in_a_shell_command_is_invalid_not_internal(connect: Connect, allowed: Runtime) -> None:
    for tool in ("shell_run", "shell_exec"):
        kind, text = await refusal(connect, allowed, tool, {"command": "echo a\x00b"})
        assert kind == "invalid_arguments"
        assert "NUL byte" in text


async def test_a_line_break_in_a_grep_query_is_invalid_not_no_matches(connect: Connect, allowed: Runtime) -> None:
    # rg refuses a literal line break on its stderr and exits 2: grep used to answer "no matches".
    kind, text = await refusal(connect, allowed, "grep", {"query": "# notes\nhello"})
    assert kind == "invalid_arguments"
    assert "line break" in text


async def test_huge_integers_are_invalid_not_internal(connect: Connect, allowed: Runtime) -> None:
    for tool, args in (
        ("session_list", {"activeMinutes": 670826741757839872}),
        ("planning_update_step", {"stepId": 2**70, "status": "done"}),
    ):
        kind, text = await refusal(connect, allowed, tool, args)
        assert kind == "invalid_arguments", text
        assert "less than or equal to" in text


async def test_a_cwd_too_long_for_the_filesystem_is_a_tool_error(connect: Connect, allowed: Runtime) -> None:
    cwd = "/workspace/" + "x" * 300
    kind, text = await refusal(connect, allowed, "shell_restart", {"cwd": cwd})
    assert kind == "tool_error"
    assert text == f"cwd {cwd} cannot be used: File name too long."
