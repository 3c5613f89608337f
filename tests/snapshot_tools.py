"""The model-visible tools/list, kept in tests/snapshots/tools_list.json so that every change to a name, title,
description, schema or annotation is deliberate (tests/test_catalogue_budget.py diffs it).

Regenerate after a deliberate change, and commit the file with it:

    PYTHONPATH=. python -m tests.snapshot_tools --update
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any

from managed_tools.server.publish import to_mcp_tool
from managed_tools.tools.catalogue import FAMILIES
from managed_tools.tools.framework.definition import ToolDefinition
from managed_tools.tools.latent_calls import tools as latent_calls

SNAPSHOT = Path(__file__).parent / "snapshots" / "tools_list.json"
UPDATE = "PYTHONPATH=. python -m tests.snapshot_tools --update"
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


def main(argv: list[str]) -> int:
    if argv == ["--update"]:
        SNAPSHOT.write_text(current(), encoding="utf-8")
        print(f"wrote {SNAPSHOT}")
        return 0
    found = difference()
    print(found or "tools/list matches the snapshot.")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
