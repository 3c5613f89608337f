"""The model-visible tools/list, kept in tests/snapshots/tools_list.json so that every change to a name, title,
description, schema or annotation is deliberate (tests/tools/test_catalogue_budget.py diffs it); and each preset's
served tool count and tools/list size, in docs/presets.md's table (checked by the same test). `--update` also
regenerates the built-in tools' published schemas (tools/framework/definitions/published.py;
tests/tools/framework/test_published_catalogue.py checks them).

Regenerate all three after a deliberate change, and commit the files with it:

    PYTHONPATH=. python -m tests.support.snapshot_tools --update
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as types

from managed_tools.server.publishing.publish import to_mcp_tool
from managed_tools.server.publishing.tool_search import choose_core
from managed_tools.tools import catalogue
from managed_tools.tools.catalogue import FAMILIES, build_registry
from managed_tools.tools.discovery import tools as discovery
from managed_tools.tools.framework.definitions import published
from managed_tools.tools.framework.definitions.definition import ToolDefinition, model_visible_chars
from managed_tools.tools.framework.definitions.registry import Registry
from managed_tools.tools.framework.definitions.toolsets import PRESETS, ToolSelection
from managed_tools.tools.latent_calls import tools as latent_calls

SNAPSHOT = Path(__file__).parents[1] / "snapshots" / "tools_list.json"
PRESETS_PAGE = Path(__file__).parents[2] / "docs" / "presets.md"
TABLE_START, TABLE_END = "<!-- preset figures: start -->", "<!-- preset figures: end -->"
UPDATE = "PYTHONPATH=. python -m tests.support.snapshot_tools --update"
MODEL_VISIBLE = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def full_catalogue() -> list[ToolDefinition]:
    """Every managed tool, in publishing order, and latent_submit (served beside any latent tool)."""
    return [d for family in FAMILIES.values() for d in family] + list(latent_calls.DEFINITIONS)


def listing(definitions: list[ToolDefinition]) -> list[dict[str, Any]]:
    tools = [to_mcp_tool(d).model_dump(mode="json", by_alias=True, exclude_none=True) for d in definitions]
    return [{key: tool[key] for key in MODEL_VISIBLE if key in tool} for tool in tools]


def current() -> str:
    return json.dumps({"tools": listing(full_catalogue())}, indent=1, ensure_ascii=False) + "\n"


def difference(limit: int = 80) -> str:
    """'' when the snapshot matches; otherwise the start of a unified diff and how to accept it."""
    recorded = SNAPSHOT.read_text(encoding="utf-8") if SNAPSHOT.exists() else ""
    now = current()
    if recorded == now:
        return ""
    diff = list(difflib.unified_diff(recorded.splitlines(), now.splitlines(), "snapshot", "catalogue", lineterm=""))
    more = f"\n... and {len(diff) - limit} more lines" if len(diff) > limit else ""
    return (
        "The published tools/list differs from tests/snapshots/tools_list.json:\n"
        + "\n".join(diff[:limit])
        + more
        + f"\nIf the change is deliberate, run `{UPDATE}` and commit the snapshot with it."
    )


def tools_list_bytes(definitions: list[ToolDefinition]) -> int:
    """The size of the tools a client receives in tools/list, as compact JSON (`{"tools": [...]}`; the era's
    cache hint and result type around it are a few dozen bytes more)."""
    result = types.ListToolsResult(tools=[to_mcp_tool(d) for d in definitions])
    return len(result.model_dump_json(by_alias=True, exclude_none=True, include={"tools"}).encode())


visible_chars = model_visible_chars  # what a model reads of a tool (tools/framework/definitions/definition.py)


def at_connect(registry: Registry) -> list[ToolDefinition]:
    """What the search profile lists at connect on a fresh state: the fallback core the registry serves, and the
    search tools (server/publishing/tool_search.py)."""
    core = [d for d in registry if d.name in choose_core(registry, [])]
    return core + list(discovery.DEFINITIONS)


def preset_figures() -> dict[str, tuple[int, int, int, int]]:
    """Each preset's (served tools, tools/list bytes, model-visible characters, model-visible characters listed at
    connect), no tools of the user's configured; a preset with tool search serves the search tools too."""
    figures = {}
    for name, preset in PRESETS.items():
        registry = build_registry(selection=ToolSelection(preset=name))
        served = list(registry) + (list(discovery.DEFINITIONS) if preset.tool_search else [])  # as `tools` counts
        chars = sum(visible_chars(d) for d in served)
        listed = sum(visible_chars(d) for d in at_connect(registry)) if preset.tool_search else chars
        figures[name] = (len(served), tools_list_bytes(served), chars, listed)
    return figures


def preset_table() -> str:
    head = "| preset | tools served | `tools/list` size | name + description + input schema | listed at connect |"
    rows = [f"| `{name}` | {count} | {size:,} bytes ({size / 1024:.0f} KB) | {chars:,} characters | {listed:,} |"
            for name, (count, size, chars, listed) in preset_figures().items()]  # fmt: skip
    return "\n".join([TABLE_START, head, "|---|---|---|---|---|", *rows, TABLE_END])


def page_with_current_table() -> tuple[str, str]:
    """docs/presets.md as it is, and as it would be with the current figures."""
    page = PRESETS_PAGE.read_text(encoding="utf-8")
    start, end = page.index(TABLE_START), page.index(TABLE_END) + len(TABLE_END)
    return page, page[:start] + preset_table() + page[end:]


def published_file() -> str:
    """tools/framework/definitions/published.json as the code builds it (every family imported)."""
    return published.render(catalogue.built_in(catalogue.from_code()), catalogue.records())


def main(argv: list[str]) -> int:
    if argv == ["--update"]:
        published.PUBLISHED.write_text(published_file(), encoding="utf-8")
        SNAPSHOT.write_text(current(), encoding="utf-8")
        PRESETS_PAGE.write_text(page_with_current_table()[1], encoding="utf-8")
        print(f"wrote {published.PUBLISHED}, {SNAPSHOT} and the figures in {PRESETS_PAGE}")
        return 0
    found = difference()
    page, updated = page_with_current_table()
    stale = "" if page == updated else f"\ndocs/presets.md's figures are stale: run `{UPDATE}`."
    if not published.current():
        stale += f"\n{published.PUBLISHED.name} is not built from these sources: run `{UPDATE}`."
    print((found + stale).strip() or "tools/list matches the snapshot and docs/presets.md's figures.")
    return 1 if found or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
