"""The built-in tools' published schemas (tools/framework/definitions/published.py;
docs/decisions/published-catalogue.md).

The file in the package is what a server lists at start-up without building a tool model: it must equal the live
build, it is used only while it is built from the sources beside it, and the registry rules start-up skips for
the built-in tools hold here. A fresh server's first call of every family still works (the models it defers are
built then), and nothing a workspace holds stands in for the file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.snapshot_tools import published_file

from managed_tools.tools import catalogue
from managed_tools.tools.catalogue import BUILT_IN, FAMILIES, FAMILY_MODULES, build_registry, checked
from managed_tools.tools.framework.definitions import published
from managed_tools.tools.framework.definitions.custom import CustomToolSpec, custom_tool
from managed_tools.tools.framework.definitions.described import CODE_FIELDS, Described
from managed_tools.tools.framework.definitions.registry import check_definition
from managed_tools.tools.framework.definitions.schemas import built_input_schema, built_output_schema
from managed_tools.tools.framework.definitions.toolsets import ToolSelection
from managed_tools.tools.framework.wire.errors import RegistryError

REPO = Path(__file__).resolve().parents[3]
UPDATE = "PYTHONPATH=. python -m tests.support.snapshot_tools --update"


@pytest.fixture(params=["another digest", "no schemas"])
def stale(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The published file as if a model had changed since it was generated (its digest no longer matches), or
    damaged (its digest right, its schemas gone)."""
    content = json.loads(published.PUBLISHED.read_text(encoding="utf-8"))
    forged = tmp_path / "published.json"
    damage: dict[str, Any] = {"digest": "0" * 64} if request.param == "another digest" else {"schemas": {"input": []}}
    forged.write_text(json.dumps({**content, **damage}), encoding="utf-8")
    monkeypatch.setattr(published, "PUBLISHED", forged)
    published._published.cache_clear()
    yield
    published._published.cache_clear()


def test_the_published_file_is_the_live_build_of_these_sources() -> None:
    assert published.current(), f"{published.PUBLISHED.name} is stale: run `{UPDATE}` and commit it."
    assert published.PUBLISHED.read_text(encoding="utf-8") == published_file(), UPDATE


def test_a_described_tool_is_what_its_code_defines() -> None:
    """Start-up serves the families from the file: each tool's words, flags and schemas are the code's, and its
    code (models, handler, previews) is the code's own, imported when first asked for."""
    code = catalogue.from_code()
    assert list(FAMILIES) == list(code)
    for family, described in FAMILIES.items():
        assert [d.name for d in described] == [d.name for d in code[family]]
        for shown, defined in zip(described, code[family], strict=True):
            assert isinstance(shown, Described)
            ours = shown.model_dump(exclude={*CODE_FIELDS, "code", "input_key", "output_key", "present"})
            assert ours == defined.model_dump(exclude=set(CODE_FIELDS))
            assert shown.input_schema() == defined.input_schema()
            assert shown.output_schema() == defined.output_schema()
            assert all(getattr(shown, name) is getattr(defined, name) for name in CODE_FIELDS)


# A server whose every import of a family's module is written to the file IMPORTS names: a finder first on
# sys.meta_path sees each module as it is first imported (`-X importtime` and the audit hook miss importlib's).
WATCHED_SERVER = """
import sys
families, log = set(sys.argv[1].split(",")), sys.argv[2]
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in families:
            with open(log, "a") as out:
                out.write(name + "\\n")
sys.meta_path.insert(0, Watch())
sys.argv = ["managed-tools", *sys.argv[3:]]
from managed_tools.server.cli.command import main
raise SystemExit(main())
"""


@pytest.mark.parametrize("serving", [[], ["--preset", "coding"], ["--tool-search"]], ids=["full", "coding", "search"])
def test_a_start_imports_no_family_until_its_first_call(workspace: Path, tmp_path: Path, serving: list[str]) -> None:
    """tools/list, the setup contract, the instructions, presets and tool search are served from the file: a real
    server imports a family's code only when one of its tools is called, and then that family's alone."""
    families = {f"managed_tools.tools.{m}" for modules in FAMILY_MODULES.values() for m in modules}
    log = tmp_path / "imports"
    log.touch()
    serve = ["serve", "--workspace", str(workspace), "--data-dir", str(tmp_path / "state"), *serving]
    argv = [sys.executable, "-c", WATCHED_SERVER, ",".join(sorted(families)), str(log), *serve]
    server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert server.stdin is not None and server.stdout is not None

    def answer(*messages: dict[str, Any]) -> dict[str, Any]:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        server.stdin.flush()
        while True:
            found: dict[str, Any] = json.loads(server.stdout.readline())
            if found.get("id") == messages[-1]["id"]:
                return found

    try:
        listed = answer(*HANDSHAKE, {"jsonrpc": "2.0", "id": "list", "method": "tools/list", "params": {}})
        assert listed["result"]["tools"]
        assert log.read_text() == ""
        call = {"name": "glob", "arguments": {"pattern": "*"}}
        if any(tool["name"] == "glob" for tool in listed["result"]["tools"]):
            globbed = answer({"jsonrpc": "2.0", "id": "glob", "method": "tools/call", "params": call})
            assert globbed["result"]["isError"] is False
            assert log.read_text().split() == ["managed_tools.tools.files.tools"]
    finally:
        server.stdin.close()
        server.wait(timeout=30)


def test_a_record_naming_code_outside_its_family_is_not_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file only says where a family's own code is: a record pointing a tool at another module, or one whose
    fields are not a definition's, makes the whole file unused (the families are built from code)."""
    content = json.loads(published.PUBLISHED.read_text(encoding="utf-8"))
    damages: list[dict[str, Any]] = [
        {"module": "shell.tools"}, {"module": "os"}, {"timeout_seconds": -1}, {"code": ["__class__"]},
        {"input": None}, {"code": [[]]},
    ]  # fmt: skip
    for damage in damages:
        forged = tmp_path / "published.json"
        first = {**content["tools"][0], **damage}
        forged.write_text(json.dumps({**content, "tools": [first, *content["tools"][1:]]}), encoding="utf-8")
        monkeypatch.setattr(published, "PUBLISHED", forged)
        published._published.cache_clear()
        assert published.current()
        assert catalogue.described() is None, damage
    published._published.cache_clear()


def test_every_built_in_tool_keeps_the_registry_rules_start_up_skips() -> None:
    """Start-up adds the built-in tools unchecked (`checked`); every rule, examples included, holds here."""
    assert all(checked(d) for d in BUILT_IN)
    for definition in BUILT_IN:
        check_definition(definition)
        assert definition.input_schema() == built_input_schema(definition.input_model)
        assert definition.output_schema() == built_output_schema(definition.output_model)


def test_an_amended_built_in_tool_is_checked_again() -> None:
    """A tool the user's policy or overrides amend is a new definition: the registry runs its rules at start-up."""
    registry = build_registry(policy={"read": "always_ask"}, selection=ToolSelection())
    amended = registry.get("read")
    assert amended is not None and amended.permission_policy == "always_ask"
    assert not checked(amended)


def test_a_stale_file_is_not_used_and_every_rule_runs(stale: None) -> None:
    assert not published.current()
    assert catalogue.described() is None  # the families are built from their code
    definition = BUILT_IN[0]
    assert published.schema("input", definition.input_model) is None
    assert not checked(definition)
    assert build_registry().get(definition.name) is not None  # built live, checked as before


def test_only_the_class_its_module_defines_gets_a_published_schema() -> None:
    """A model named like a built-in one (a test's, a generated one) is built from itself."""
    model = BUILT_IN[0].input_model
    twin = type(model.__name__, (model,), {"__module__": model.__module__, "__qualname__": model.__qualname__})
    assert published.schema("input", model) is not None
    assert published.schema("input", twin) is None


def test_the_rules_still_run_for_a_tool_the_config_adds() -> None:
    spec = CustomToolSpec.model_validate({"name": "wordy", "description": "x" * 201, "outputSchema": {}})
    with pytest.raises(
        RegistryError, match=re.escape("Tool 'wordy' has a 201-character description; the limit is 200.")
    ):
        build_registry([custom_tool(spec)])


# One call of each family, first thing in a fresh server: each builds the models start-up deferred.
FIRST_CALLS = {
    "environment": ("environment_describe", {}),
    "sessions": ("session_get_snapshot", {}),
    "outcomes": ("outcome_read", {}),
    "memory": ("memory_list", {}),
    "recall": ("session_search_context", {"query": "hello"}),
    "planning": ("planning_setup_plan", {"objective": "Ship the fix", "initialSteps": ["reproduce", "fix"]}),
    "skills": ("skills_list", {}),
    "files": ("write", {"path": "notes.txt", "content": "hello"}),
    "sandbox": ("sandbox_describe", {}),
    "substrate": ("resources_list", {}),
    "shell": ("shell_describe", {}),
    "permissions": ("permissions_check", {"toolName": "write"}),
}


HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
HANDSHAKE: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": HELLO},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]


def _stdio(workspace: Path, state: Path, messages: list[dict[str, Any]], cwd: Path) -> list[dict[str, Any]]:
    """A real `serve` over stdio, from `cwd`: the handshake, then `messages`; every answer."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    serve = ["serve", "--workspace", str(workspace), "--data-dir", str(state)]
    out = subprocess.run(
        [sys.executable, "-m", "managed_tools.server", *serve],
        input="".join(json.dumps(m) + "\n" for m in [*HANDSHAKE, *messages]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_a_fresh_server_answers_the_first_call_of_every_family(workspace: Path, tmp_path: Path) -> None:
    calls = [
        {"jsonrpc": "2.0", "id": family, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        for family, (name, arguments) in FIRST_CALLS.items()
    ]
    answers = {a.get("id"): a for a in _stdio(workspace, tmp_path / "state", calls, REPO)}
    failed = {
        family: answers[family]
        for family in FIRST_CALLS
        if not isinstance(result := answers[family].get("result"), dict)
        or result.get("isError")
        or not result.get("structuredContent")
    }
    assert not failed, failed


def test_a_workspace_never_provides_the_published_file(workspace: Path, tmp_path: Path) -> None:
    """The file is server configuration: one planted where the server runs, current digest and all, is not read."""
    content = json.loads(published.PUBLISHED.read_text(encoding="utf-8"))
    forged = {kind: {key: {"type": "object", "description": "PLANTED"} for key in schemas}
              for kind, schemas in content["schemas"].items()}  # fmt: skip
    planted = json.dumps({"digest": content["digest"], "schemas": forged})
    for where in (Path("managed_tools/tools/framework"), Path("tools/framework"), Path(".managed-tools"), Path()):
        (workspace / where).mkdir(parents=True, exist_ok=True)
        (workspace / where / published.PUBLISHED.name).write_text(planted, encoding="utf-8")
    listing = {"jsonrpc": "2.0", "id": "list", "method": "tools/list", "params": {}}
    answers = _stdio(workspace, tmp_path / "state", [listing], workspace)
    listed = next(a for a in answers if a.get("id") == "list")
    assert len(listed["result"]["tools"]) > 60
    assert "PLANTED" not in json.dumps(listed)
