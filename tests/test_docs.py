"""The documentation's map stays whole without building the site: every decision record is in the decisions index
(mkdocs.yml leaves the records out of the nav, so nothing else would notice one missing) and every other page is in
the nav; CI's `mkdocs build --strict` checks the links and anchors themselves (.ci/run). And the code a reader
copies from the docs runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Connect, data

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DECISIONS = DOCS / "decisions"
INDEX = DECISIONS / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def test_every_decision_record_is_in_the_index_and_every_entry_exists() -> None:
    listed = set(LINK.findall(INDEX.read_text(encoding="utf-8").partition("\n## Records\n")[2]))
    records = {page.name for page in DECISIONS.glob("*.md") if page != INDEX}
    assert not records - listed, f"add these to docs/decisions/README.md: {sorted(records - listed)}"
    missing = {name for name in listed if not name.startswith("../") and not (DECISIONS / name).exists()}
    assert not missing, f"the index lists records that do not exist: {sorted(missing)}"


def test_every_decision_record_has_a_title() -> None:
    untitled = [page.name for page in DECISIONS.glob("*.md") if not page.read_text(encoding="utf-8").startswith("# ")]
    assert not untitled, f"a record starts with '# Title': {untitled}"


def nav_pages(node: Any) -> set[str]:
    if isinstance(node, str):
        return {node}
    if isinstance(node, list):
        return set().union(*(nav_pages(item) for item in node))
    if isinstance(node, dict):
        return set().union(*(nav_pages(value) for value in node.values()))
    return set()


def test_every_page_outside_the_decisions_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = nav_pages(config["nav"])
    pages = {page.relative_to(DOCS).as_posix() for page in DOCS.rglob("*.md")}
    outside = {page for page in pages if not page.startswith("decisions/")} | {"decisions/README.md"}
    assert not outside - in_nav, f"add these pages to mkdocs.yml's nav: {sorted(outside - in_nav)}"
    assert not in_nav - pages, f"mkdocs.yml's nav names pages that do not exist: {sorted(in_nav - pages)}"


@pytest.mark.anyio
async def test_the_python_tool_in_extending_runs_as_written(workspace: Path, tmp_path: Path, connect: Connect) -> None:
    """docs/extending.md's example module, copied as a reader would, is served and answers through a real client."""
    [example] = PYTHON_BLOCK.findall((DOCS / "extending.md").read_text(encoding="utf-8"))
    module = tmp_path / "my_extension.py"
    module.write_text(example, encoding="utf-8")
    config = ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=(str(module),))
    async with open_runtime(config) as runtime, connect(runtime) as client:
        assert data(await client.call_tool("count_words", {"text": "three short words"})) == {"words": 3}


# A path of ours in backticks: `server/http/transport.py`, `server/mcp/`, `tools/framework/context/attachments.store`.
NAMED_PATH = re.compile(r"`((?:server|tools|stores|sandbox|managed_tools|tests)/[\w/]*(?:\.\w+)*)`")


MCP_METHODS = {"tools/list", "tools/call"}  # spelled like a path of ours


def named_paths(text: str) -> set[str]:
    return {m for m in NAMED_PATH.findall(text) if "<" not in m} - MCP_METHODS


def exists(named: str) -> bool:
    """A file, a folder (`server/mcp/`), or a module's name (`tools/framework/context/attachments.store`)."""
    if (ROOT / named).exists():
        return True
    module, _, _ = named.partition(".")
    return (ROOT / f"{module}.py").exists()


def test_the_architecture_names_only_modules_that_exist() -> None:
    """docs/architecture.md's rooms and its walk of a call name modules by path: each one is there."""
    named = named_paths((DOCS / "architecture.md").read_text(encoding="utf-8"))
    assert len(named) > 50
    assert sorted(n for n in named if not exists(n)) == []
    assert not exists("server/nowhere.py") and exists("server/http/")
    assert exists("tools/framework/context/attachments.store")


# Files of the project's private design folder, which is not in the repository: a page citing one sends a reader
# nowhere.
PRIVATE = ("ARCHITECTURE.md", "mcp-sdk-2.md", "openboa-runtime.md", "peers.md")


def test_no_page_cites_a_file_that_is_not_in_the_repository() -> None:
    cited = [
        f"{page.relative_to(ROOT)}: {name}"
        for page in [ROOT / "README.md", *DOCS.rglob("*.md")]
        for name in PRIVATE
        if re.search(rf"(?<![\w/-]){re.escape(name)}", page.read_text(encoding="utf-8"))
    ]
    assert not cited, cited


def test_every_mkdocs_command_a_page_gives_silences_materials_banner() -> None:
    """Material 9.7 prints an end-of-life banner on every build unless NO_MKDOCS_2_WARNING is set."""
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        for block in re.findall(r"^```(?:sh|bash)\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S):
            if re.search(r"mkdocs (?:build|serve)", block):
                assert "NO_MKDOCS_2_WARNING=1" in block, f"{page.relative_to(ROOT)}: {block}"
