"""The layer rule (docs/architecture.md): server -> tools -> stores and sandbox, never back; tools/, stores/ and
sandbox/ never see mcp; and every import of our own code goes through the installed name `managed_tools.*`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "tools": {"mcp", "mcp_types", "managed_tools.server"},
    "stores": {"mcp", "mcp_types", "managed_tools.server", "managed_tools.tools"},
    "sandbox": {"mcp", "mcp_types", "managed_tools.server", "managed_tools.tools"},
}
# tools' framework never reaches into a family; the families build on it.
FAMILY_FREE = "tools/framework"
BARE = {"server", "tools", "stores", "sandbox"}  # the names a user's own packages may take (tests/test_installed.py)
PYTHON_DIRS = ("server", "tools", "stores", "sandbox", "tests", "bench", ".ci")


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def within(name: str, packages: set[str]) -> set[str]:
    return {p for p in packages if name == p or name.startswith(p + ".")}


def sources(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py") if not {"node_modules", "build"} & set(p.parts))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_never_import_upward(package: str) -> None:
    files = sources(package)
    assert files
    offenders = {str(f.relative_to(ROOT)): sorted(set().union(*(within(n, FORBIDDEN[package]) for n in imported(f))))
                 for f in files}  # fmt: skip
    assert {f: bad for f, bad in offenders.items() if bad} == {}


def test_our_code_is_imported_only_by_its_installed_name() -> None:
    offenders = {str(f.relative_to(ROOT)): sorted(n for n in imported(f) if n.split(".")[0] in BARE)
                 for f in sources(*PYTHON_DIRS)}  # fmt: skip
    assert {f: bad for f, bad in offenders.items() if bad} == {}


def test_the_rules_see_what_they_forbid(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import mcp.types\nfrom managed_tools.server.mcp.app import x\nfrom tools.definition import y\n")
    names = imported(probe)
    assert within("managed_tools.server.mcp.app", FORBIDDEN["tools"]) == {"managed_tools.server"}
    assert {n for n in names if n.split(".")[0] in BARE} == {"tools.definition"}
    assert set().union(*(within(n, FORBIDDEN["stores"]) for n in names)) == {"mcp", "managed_tools.server"}


def test_the_tools_framework_never_imports_a_family() -> None:
    families = {p.name for p in (ROOT / "tools").iterdir() if (p / "__init__.py").exists()} - {"framework"}
    assert families
    forbidden = {f"managed_tools.tools.{family}" for family in families}
    offenders = {str(f.relative_to(ROOT)): sorted(set().union(*(within(n, forbidden) for n in imported(f))))
                 for f in sources(FAMILY_FREE)}  # fmt: skip
    assert {f: bad for f, bad in offenders.items() if bad} == {}
