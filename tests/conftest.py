"""Shared fixtures: a real workspace on disk, a real SQLite file (or PostgreSQL server), and a real MCP client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp_types import CallToolResult
from support.postgres_server import SKIP_REASON, TEMPLATE, binaries, database_url, running_server

from managed_tools.server.config.data_dir import state_root
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.mcp.app import build_server
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.db.sqlite import SqliteDatabase
from managed_tools.tools.framework.calls import output_check
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.definitions.definition import ToolDefinition

# The test modules import each other's helpers by name (`from test_http import serving`), as they did when they sat
# side by side in tests/: every folder of tests/ that holds tests is on the path, as tests/ itself is.
sys.path[1:1] = sorted({str(p.parent) for p in Path(__file__).parent.rglob("test_*.py")} - set(sys.path))

# Debug mode for every server the tests run, in this process and the ones they start (which inherit it): each tool's
# output is checked against its published output schema (tools/framework/calls/output_check.py).
os.environ[output_check.ENV] = "1"

ERAS = ["auto", "legacy"]  # 2026-07-28 (the SDK default) and the handshake era (2025-11-25)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test touches the person's real state dir: platformdirs reads XDG_STATE_HOME on Linux (subprocesses
    inherit it). The cwd moves too, so a command run without --workspace never adopts the checkout's own
    `.managed-tools`."""
    home = tmp_path_factory.mktemp("state-home")
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))  # the user's own skills directory, the vault key
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")  # never the person's keyring
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    assert state_root().is_relative_to(home), "platformdirs does not honour XDG_STATE_HOME on this platform"
    return home


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """Debian's headless Chromium through playwright's client (tests that use it are `browser_test` in
    test_pages.py: skipped with a reason where either is missing, outside CI)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def probe_config(workspace: Path) -> ServeConfig:
    """SQLite, and the probe tools (tests/support/probe_tools.py: an always_ask write whose rows can be counted)."""
    return ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=("support.probe_tools",))


@pytest.fixture
async def probe_rt(probe_config: ServeConfig) -> AsyncIterator[Runtime]:
    async with open_runtime(probe_config) as runtime:
        yield runtime


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


BACKENDS = ["sqlite", "postgresql"]
# The slow tier, which `pytest -m "not slow"` (the fast tier) leaves out; CI runs every test. Every test that runs on
# PostgreSQL is in it (it needs a cluster, and SQLite covers the same contract in the fast tier), and these whole
# modules, for the reason given. A single slow test in another module carries `@pytest.mark.slow` itself.
SLOW_MODULES = {
    "test_postgresql": "a PostgreSQL cluster, or a CLI process per bad database URL",
    "test_replicas": "PostgreSQL, nginx and several server processes",
    "test_workers": "a server of several worker processes per test, killed and stopped",
    "test_pages": "Chromium",
    "test_dashboard": "Chromium and a dashboard process",
    "test_views_pty": "a CLI process per view and width, on a pseudo-terminal",
    "test_approval_card": "Chromium",
    "test_crash": "server processes killed mid-write, then recovered",
    "test_wal_bound": "eight server processes on one data dir",
    "test_state_files": "server processes whose state files are deleted and replaced under them, and killed",
    "test_fuzz_tools": "hypothesis over every tool",
    "test_fuzz_frames": "hypothesis over raw protocol frames",
    "test_upstream_npm": "a Node.js upstream server from npm",
    "test_toolchain_found": "a server process per test running pytest, pip, npm, go and cargo in the sandbox",
    "test_startup": "a CLI process per start-up failure",
    "test_stdio": "a server process per test, over stdio",
    "test_stdio_bounds": "a server process per test, one fed a 300 MB line",
    "test_shutdown": "signals to server processes",
    "test_installed": "the installed command in fresh processes",
    "test_secret_by_page": "a server process and Chromium",
    "test_upstream": "an upstream MCP server process per test",
    "test_gateway": "an upstream MCP server process per test",
    "test_hostile_workspace": "a CLI process per case (serve, adopt)",
    "test_http_token": "a server process per test, over HTTP",
    "test_http_quotas": "a server per test, over HTTP",
    "test_http_request_ids": "a server per test, over HTTP, with calls waiting for a person or in the sandbox",
    "test_otel": "server processes over stdio and HTTP, and an OTLP receiver",
    "test_approval_cli": "a CLI process per case",
    "test_views_cli": "a CLI process per case",
    "test_clocks": "a second server process per test under faketime",
    "test_session_length": "100k events per session, and a server waiting out its retention pass",
}
# Single tests in the slow tier: each starts `managed-tools` processes (a server over stdio or HTTP, the approval
# CLI, racing writers) or waits out a real timeout, and took 2 s or more on a loaded machine (`--durations`). CI runs
# them; `module::function` covers every parametrization.
SLOW_TESTS = frozenset({
    "test_approval_question::test_bidi_and_zero_width_characters_are_escaped",
    "test_approval_question::test_f6_an_env_change_after_the_approval_needs_a_new_yes",
    "test_approval_question::test_f7_a_payload_behind_spaces_is_visible",
    "test_cli::test_a_reader_that_stops_early_ends_the_printout_quietly",
    "test_cli::test_approval_wait_from_config_json_is_checked_too",
    "test_cli::test_approval_wait_must_be_a_positive_finite_number_of_seconds",
    "test_cli::test_tools_as_json",
    "test_cli::test_tools_for_a_person",
    "test_cli::test_tools_lists_the_catalogue_as_served",
    "test_cli::test_tools_piped_into_head",
    "test_cli::test_tools_says_what_is_wrong_with_a_tools_module",
    "test_confine::test_require_confinement_refuses_to_start_without_it",
    "test_confine::test_require_confinement_starts_where_the_kernel_confines",
    "test_confine::test_the_start_up_log_says_how_programs_enter_confinement",
    "test_custom_tools::test_out_of_band_respond",
    "test_delegation::test_the_hand_off_over_http_with_the_session_header",
    "test_delegation::test_the_hand_off_over_stdio_with_serve_session_child",
    "test_executor::test_database_locked_by_another_process_gives_a_clear_error",
    "test_extensions::test_the_cli_serves_an_extensions_resources_over_stdio",
    "test_file_races::test_a_local_process_swapping_a_directory_never_leads_out",
    "test_http::test_a_remote_client_resumes_a_named_session",
    "test_http::test_every_request_needs_the_token_when_one_is_set",
    "test_http::test_requests_without_an_mcp_session_share_one_durable_session",
    "test_http::test_stateless_http_fails_closed_and_a_person_approves_out_of_band",
    "test_http::test_the_cli_serves_http_and_shuts_down_gracefully",
    "test_http::test_the_session_limit_refuses_more_and_recovers",
    "test_http_hostile::test_sse_streams_need_the_token_and_leave_no_session_until_used",
    "test_layers::test_our_code_is_imported_only_by_its_installed_name",
    "test_lazy_imports::test_stdio_serve_loads_no_oauth_postgres_keyring_or_jsonschema",
    "test_leftovers::test_a_young_temporary_is_spared_waited_out_or_removed_and_a_held_one_always_stays",
    "test_memory::test_racing_processes_on_one_version_exactly_one_wins",
    "test_memory::test_retrying_writers_lose_nothing",
    "test_model_provider::test_a_child_runs_headless_for_a_client_over_stdio",
    "test_oauth::test_a_valid_token_works_with_each_algorithm",
    "test_oauth::test_another_principal_cannot_reach_a_principals_sessions_or_events",
    "test_oauth::test_keys_are_fetched_again_for_an_unknown_kid_at_a_bounded_rate",
    "test_oauth::test_refusals_carry_the_challenge_and_never_the_token",
    "test_permission_tools::test_check_follows_a_request_from_none_to_approved",
    "test_permissions::test_deny_and_cli_errors",
    "test_permissions::test_interrupt_clears_pending_and_the_session_goes_idle",
    "test_permissions::test_out_of_band_approval_runs_exactly_once",
    "test_permissions::test_over_stdio_elicitation_and_out_of_band",
    "test_permissions::test_policy_overrides_come_only_from_the_user",
    "test_presets::test_an_unknown_preset_is_a_one_line_startup_error",
    "test_presets::test_coding_over_stdio",
    "test_presets::test_the_approval_commands_take_a_preset",
    "test_published_catalogue::test_a_fresh_server_answers_the_first_call_of_every_family",
    "test_published_catalogue::test_a_workspace_never_provides_the_published_file",
    "test_published_catalogue::test_a_start_imports_no_family_until_its_first_call",
    "test_recall::test_a_marker_from_another_process_is_found_by_each_search",
    "test_recall::test_never_another_agents_events",
    "test_relay::test_a_write_in_one_process_reaches_a_subscriber_of_another_once",
    "test_sandbox_layers::test_a_fork_bomb_is_bounded_and_reported",
    "test_sandbox_layers::test_require_confinement_names_the_missing_layers",
    "test_sandbox_routes::test_an_approval_of_one_action_is_not_one_of_another",
    "test_privileges::test_a_non_root_servers_command_and_upstream_hold_no_capability_and_reach_no_canary",
    "test_provenance::test_a_real_upstream_server_taints_the_session",
    "test_secret_scanning::test_a_secret_in_an_upstream_argument_asks_a_person_first",
    "test_secret_scanning::test_a_secret_in_an_upstream_result_is_masked",
    "test_setup_context::test_a_policy_change_between_sessions_shows_as_drift",
    "test_shell::test_a_new_process_reports_the_shell_closed_and_reads_its_history",
    "test_shell::test_a_shell_wait_cut_short_by_the_clients_deadline_answers_running",
    "test_shell::test_long_command_returns_a_handle_and_shell_wait_follows_it",
    "test_shell_argv::test_no_argv_carries_an_unchecked_argument",
    "test_state_dir::test_adopt_never_merges_into_an_existing_data_dir",
    "test_state_dir::test_data_dir_inside_a_vault_is_refused",
    "test_state_dir::test_data_dir_inside_the_workspace_is_refused",
    "test_state_dir::test_data_dir_reaching_the_workspace_through_a_symlink_is_refused",
    "test_state_dir::test_the_data_dir_is_shown_at_info_level_on_stderr",
    "test_state_dir::test_the_old_data_dir_moves_only_by_adopt_with_its_rows",
    "test_state_dir::test_workspace_inside_the_data_dir_is_refused",
    "test_stores::test_migrations_apply_once_when_processes_start_together",
    "test_substrate::test_out_of_band_approval_with_the_cli",
    "test_substrate::test_racing_processes_one_wins_and_disk_matches_history",
    "test_tasks::test_over_streamable_http_a_task_is_followed_and_cancelled",
    "test_toolsets::test_a_hidden_tools_request_is_never_shown_or_approved",
    "test_toolsets::test_an_unknown_toolset_is_a_one_line_startup_error",
    "test_toolsets::test_flags_over_stdio",
    "test_vault::test_a_secret_appears_nowhere_after_a_run_that_used_it",
    "test_vault::test_a_wrong_key_refuses_with_a_clear_error",
    "test_vault::test_secret_set_from_a_terminal_then_the_call_runs",
    "test_wakes::test_a_provider_error_is_the_wakes_result",
    "test_wakes::test_a_wake_is_listed_graded_sleeping_fires_and_is_offered_to_the_next_client",
    "test_wakes::test_with_a_model_provider_a_due_wake_runs_the_session_headless",
    "test_memory_carry::test_export_and_import_as_a_person_runs_them",
})  # fmt: skip


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test (or module) marked `both_backends` runs once on SQLite and once on PostgreSQL, unless the test is
    marked `sqlite_only` (a slow subprocess test whose store path another PostgreSQL test already covers)."""
    marked = metafunc.definition.get_closest_marker
    if "backend" in metafunc.fixturenames and marked("both_backends") and not marked("sqlite_only"):
        metafunc.parametrize("backend", BACKENDS, indirect=True)


FAST_SHARE = (0.5, 0.95)  # of the whole suite's tests, what the fast tier may hold


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tier; when the whole suite is collected (before `-m` deselects), check the split."""
    for item in items:
        if item.path.stem in SLOW_MODULES or _test_name(item) in SLOW_TESTS or _on_postgresql(item):
            item.add_marker(pytest.mark.slow)
    if not config.option.file_or_dir:
        problems = tier_problems(items)
        if problems:
            raise pytest.UsageError("The test tiers are off: " + "; ".join(problems))


def tier_problems(items: list[pytest.Item]) -> list[str]:
    """What is wrong with the slow/fast split of these (all) tests: a slow module or test renamed away, a fast tier
    too small to be worth running or too big to be fast."""
    modules = {item.path.stem for item in items}
    problems = [f"SLOW_MODULES names {name}, which holds no test" for name in SLOW_MODULES if name not in modules]
    names = {_test_name(item) for item in items}
    problems += [f"SLOW_TESTS names {name}, which is no test" for name in sorted(SLOW_TESTS - names)]
    fast = [item for item in items if item.get_closest_marker("slow") is None]
    share = len(fast) / max(len(items), 1)
    if not FAST_SHARE[0] <= share <= FAST_SHARE[1]:
        problems.append(f"the fast tier holds {share:.0%} of the tests, not {FAST_SHARE[0]:.0%}-{FAST_SHARE[1]:.0%}")
    return problems


def _test_name(item: pytest.Item) -> str:
    """`module::function`, the same for every parametrization."""
    return f"{item.path.stem}::{getattr(item, 'originalname', item.name)}"


def _on_postgresql(item: pytest.Item) -> bool:
    """Parametrized onto PostgreSQL (both_backends, or a PostgreSQL-only test), or asking for the cluster itself."""
    callspec = getattr(item, "callspec", None)
    on_backend = callspec is not None and callspec.params.get("backend") == "postgresql"
    return on_backend or "postgres_server" in getattr(item, "fixturenames", ())


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


def _psql(server: str, sql: str) -> None:
    bin_dir = binaries()
    assert bin_dir is not None
    subprocess.run(
        [str(bin_dir / "psql"), "-v", "ON_ERROR_STOP=1", "-qc", sql, server], check=True, capture_output=True
    )


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL cluster for the whole run; skipped where PostgreSQL is absent, except in CI."""
    if binaries() is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs every store test on PostgreSQL too: {SKIP_REASON}")
        pytest.skip(SKIP_REASON)
    with running_server() as server:
        _psql(server, f"CREATE DATABASE {TEMPLATE}")
        # In its own process: this may be set up while a test's event loop runs.
        migrate = "import anyio, pathlib, sys; from managed_tools.stores.db import Database\n" \
            "async def main():\n    await (await Database.open(sys.argv[1], local_dir=pathlib.Path('.'))).close()\n" \
            "anyio.run(main)"  # fmt: skip
        subprocess.run([sys.executable, "-c", migrate, database_url(server, TEMPLATE)], check=True, timeout=120)
        yield server


@pytest.fixture
def database(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a test's state lives: a fresh SQLite file, or a fresh (already migrated) PostgreSQL database."""
    if backend == "sqlite":
        return tmp_path / "state.db"
    server: str = request.getfixturevalue("postgres_server")
    name = f"test_{uuid.uuid4().hex[:16]}"
    _psql(server, f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    return database_url(server, name)


@pytest.fixture
def database_option(backend: str, request: pytest.FixtureRequest) -> str | None:
    """What `--database` a test's server gets: None (SQLite in the data dir), or a fresh PostgreSQL database."""
    return None if backend == "sqlite" else str(request.getfixturevalue("database"))


@pytest.fixture
def config(workspace: Path, database_option: str | None) -> ServeConfig:
    return ServeConfig.build(workspace=workspace, data_dir=None, database=database_option)


@pytest.fixture
async def runtime(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with open_runtime(config) as rt:
        yield rt


Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def connect() -> Connect:
    """`connect(runtime, mode=..., session_id=...)`: an in-process client attached to a fresh wake."""

    @asynccontextmanager
    async def _connect(
        runtime: Runtime, mode: str = "auto", session_id: str | None = None, **kwargs: Any
    ) -> AsyncIterator[Client]:
        server = build_server(runtime, transport="memory", session_id=session_id)
        async with Client(server, mode=mode, **kwargs) as client:
            yield client

    return _connect


@asynccontextmanager
async def runtime_with(config: ServeConfig, *tools: ToolDefinition) -> AsyncIterator[Runtime]:
    async with open_runtime(config, extra_tools=tools) as rt:
        yield rt


class Updates:
    """A client's `message_handler` that keeps the resources/updated notifications it hears."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self.arrived = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.uris.append(message.params.uri)
            self.arrived.set()

    def expect_more(self) -> None:
        self.arrived = anyio.Event()


async def subscribe_to_session_state(client: Client) -> tuple[str, str]:
    """Subscribe `client` to its own session's session_state store; (the session id, the store's URI)."""
    session_id = str(data(await client.call_tool("session_get_snapshot", {}))["sessionId"])
    uri = f"managed-tools://sessions/{session_id}/memory/session_state"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated for 2026-07-28
        await client.subscribe_resource(uri)
    return session_id, uri


def data(result: CallToolResult) -> dict[str, Any]:
    """The structured result of a successful call, checked against its text twin: the same JSON, or for `read`
    the file's text under a line saying what is shown (tools/files/tools.py `shown_text`), for `edit` its diff."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    text = result.content[0]
    assert text.type == "text"
    structured: dict[str, Any] = result.structured_content
    if {"showing", "content", "mountPath"} <= set(structured):
        assert text.text.startswith(f"{structured['path']}: {structured['showing']}")
        assert text.text.endswith(structured["content"])
    elif {"diff", "dryRun", "replacements"} <= set(structured):  # `edit`: a line, then the diff (`shown_diff`)
        assert text.text.startswith(f"{structured['path']}: {structured['replacements']} replacement(s)")
        assert f"```diff\n{structured['diff']}```" in text.text
    else:
        assert json.loads(text.text) == structured
    return structured


async def upstreams_started(rt: Runtime, *names: str, seconds: float = 30.0) -> None:
    """Until each named upstream's first start has ended: start-up waits for it only a moment, and a test that
    calls its tools at once needs it up (or failed)."""
    with anyio.fail_after(seconds):
        starting = [f"{name}__tool" for name in names]
        while any("is starting" in (rt.registry.absent_reason(n) or "") for n in starting):  # noqa: ASYNC110
            await anyio.sleep(0.05)  # its start is another task's, with nothing of ours to wait on


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    text = result.content[0]
    assert text.type == "text"
    return text.text


@pytest.fixture(autouse=True, scope="session")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """No test touches the person's real cache dir, where the confinement launcher is built: one cache for the
    whole run (so the launcher is compiled once), inherited by subprocesses."""
    home = tmp_path_factory.mktemp("cache-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(home))
        yield home


def alive(marker: str) -> bool:
    """Whether a live (not zombie) process on the host has `marker` as one of its arguments. Spawned programs run in
    PID namespaces of their own, so the pid a command sees of itself names nothing out here: tests find them by
    an argument only they use (`sleep 30.125`)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                found = marker.encode() in cmdline.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as stat:
                zombie = stat.read().rsplit(")", 1)[-1].split()[0] == "Z"
        except OSError:
            continue
        if found and not zombie:
            return True
    return False


async def gone(marker: str, within: float = 3.0) -> bool:
    """Whether every process with `marker` among its arguments ends within `within` seconds."""
    with anyio.move_on_after(within):
        while alive(marker):  # noqa: ASYNC110 (polling the kernel's process table)
            await anyio.sleep(0.05)
        return True
    return False


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback TCP port something listens on: a sandboxed connect to it must fail."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


T = TypeVar("T")


def count_hops(runtime: Runtime) -> list[object]:
    """The steps the runtime's SQLite database hands to its database thread from now on (its round trips)."""
    db = runtime.db
    assert isinstance(db, SqliteDatabase)
    hops: list[object] = []
    on_thread = db._on_thread

    async def counted(step: Callable[[], T]) -> T:
        hops.append(step)
        return await on_thread(step)

    db._on_thread = counted  # type: ignore[method-assign]
    return hops
