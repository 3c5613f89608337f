"""The family rule (docs/architecture.md): one package per tool family under tools/, the catalogue framework in
tools/framework/; a family reaches another family only through a small named seam, never into its handlers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
PACKAGE = "managed_tools.tools"

# The seams: the only modules of one family that another family may import.
SEAMS = {
    f"{PACKAGE}.outcomes.gate": "grading, evaluation and the outcome gate (memory, substrate, sessions, permissions)",
    f"{PACKAGE}.shell.posture": "live shells and the shell posture every family reports",
    f"{PACKAGE}.shell.rewrites": "the read-first rewrites of a shell command that permissions_check offers",
    f"{PACKAGE}.environment.setup": "the mounted resources and the setup fingerprints",
    f"{PACKAGE}.memory.search": "memory_search, one of the backends retrieval_search merges",
}
# sandbox_execute exists to route the reference's sandbox actions to the same guarded handlers
# (docs/decisions/installed-names.md).
ROUTES = {
    "sandbox": {
        f"{PACKAGE}.files.tools",
        f"{PACKAGE}.shell.oneshot",
        f"{PACKAGE}.shell.persistent",
        f"{PACKAGE}.shell.history",
    }
}
# Top-level modules that gather the families: the catalogue (every DEFINITIONS) and the resource views.
ASSEMBLERS = {f"{PACKAGE}.catalogue", f"{PACKAGE}.resources"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("managed_tools", *(parts[:-1] if parts[-1] == "__init__" else parts)))


MODULES = {module_name(path): path for path in sorted(TOOLS.rglob("*.py")) if "__pycache__" not in path.parts}
FRAMEWORK = "framework"  # tools/framework/: what every family is written against, itself no family
FAMILIES = sorted(path.name for path in TOOLS.iterdir() if (path / "__init__.py").exists() and path.name != FRAMEWORK)


def imported(source: str, known: set[str]) -> set[str]:
    """The modules a source imports; `from pkg import module` counts as importing pkg.module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in known else node.module)
    return found


def family_of(module: str) -> str | None:
    """The family a module (or a family package itself) belongs to; None for the framework and outside tools/."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["managed_tools", "tools"] and len(parts) > 2 and parts[2] in FAMILIES else None


def violations(module: str, source: str, known: set[str]) -> list[str]:
    """Why `module` breaks the family rule (empty when it does not)."""
    own = family_of(module)
    bad = []
    for target in sorted(imported(source, known)):
        theirs = family_of(target)
        if theirs is None or theirs == own or module in ASSEMBLERS:
            continue
        if own is None:
            bad.append(f"{target}: the framework never imports a family")
        elif target not in SEAMS and target not in ROUTES.get(own, set()):
            bad.append(f"{target}: another family's internals (seams: {', '.join(sorted(SEAMS))})")
    return bad


def test_every_module_is_framework_or_in_a_family() -> None:
    assert set(FAMILIES) >= {"environment", "files", "memory", "outcomes", "permissions", "planning", "sandbox",
                             "sessions", "shell", "substrate"}  # fmt: skip
    deep = [m for m in MODULES if m.count(".") > 3 + m.startswith(f"{PACKAGE}.framework.")]
    assert deep == []  # tools/<family>/<module>.py, tools/framework/<floor>/<module>.py, no deeper


def test_seams_and_routes_exist() -> None:
    assert set(SEAMS) | set().union(*ROUTES.values()) | ASSEMBLERS <= set(MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_families_meet_only_at_seams(module: str) -> None:
    assert violations(module, MODULES[module].read_text(), set(MODULES)) == []


@pytest.mark.parametrize(
    ("module", "source", "complaint"),
    [
        (f"{PACKAGE}.memory.tools", f"from {PACKAGE}.outcomes.tools import outcome_read", "internals"),
        (f"{PACKAGE}.memory.tools", f"from {PACKAGE}.outcomes import tools", "internals"),
        (f"{PACKAGE}.memory.tools", f"import {PACKAGE}.shell.runner as runner", "internals"),
        (f"{PACKAGE}.planning.tools", f"from {PACKAGE}.files import tools as file_tools", "internals"),
        (f"{PACKAGE}.executor", f"from {PACKAGE}.shell import posture", "framework"),
        (f"{PACKAGE}.executor", f"from {PACKAGE} import memory", "framework"),
    ],
)
def test_the_rule_catches_a_reach_into_another_family(module: str, source: str, complaint: str) -> None:
    found = violations(module, source, set(MODULES))
    assert len(found) == 1 and complaint in found[0]


def test_the_rule_allows_seams_and_the_own_family() -> None:
    source = (f"from {PACKAGE}.outcomes.gate import enforce_gate\nfrom {PACKAGE}.shell import posture\n"
              f"from {PACKAGE}.memory import search\nfrom {PACKAGE}.context import ToolContext\n")  # fmt: skip
    assert violations(f"{PACKAGE}.memory.tools", source, set(MODULES)) == []
