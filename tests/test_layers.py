"""The layer rule (ARCHITECTURE §1): server -> tools -> stores, never back; tools/ and stores/ never see mcp."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"tools": {"mcp", "mcp_types", "server"}, "stores": {"mcp", "mcp_types", "server", "tools"}}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_never_import_upward(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    offenders = {str(f.relative_to(ROOT)): sorted(imported_roots(f) & FORBIDDEN[package]) for f in files}
    assert {f: bad for f, bad in offenders.items() if bad} == {}
