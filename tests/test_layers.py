"""The layer rules (docs/architecture.md): server -> tools -> stores -> sandbox -> managed_tools/errors.py, never
back; tools/, stores/ and sandbox/ never see mcp; every import of our own code goes through the installed name
`managed_tools.*`; inside server/ and tools/framework/ each package is a room on a floor, importing only the rooms
ROOMS lets it (each room's docstring says the same); and no module reaches, through imports that run, back to
itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "tools": {"mcp", "mcp_types", "managed_tools.server"},
    "stores": {"mcp", "mcp_types", "managed_tools.server", "managed_tools.tools"},
    "sandbox": {"mcp", "mcp_types", "managed_tools.server", "managed_tools.tools", "managed_tools.stores"},
}
# tools' framework never reaches into a family; the families build on it.
FAMILY_FREE = "tools/framework"
BARE = {"server", "tools", "stores", "sandbox"}  # the names a user's own packages may take (tests/test_installed.py)
PYTHON_DIRS = ("server", "tools", "stores", "sandbox", "tests", "bench", ".ci")

# Each room (a package, by its name under managed_tools) and the rooms it may import, top floor first. `tools` as a
# target is the whole catalogue (the families and every floor of the framework); a room imports itself freely.
ROOMS: dict[str, set[str]] = {
    "server.__main__": {"server.cli"},
    "server.cli": {"server.dashboard", "server.pages", "server.http", "server.stdio", "server.mcp", "server.publishing",
                   "server.runtime", "server.consent", "server.config", "server", "tools", "stores", "sandbox"},
    "server.dashboard": {"server.pages", "server.consent", "stores"},
    "server.pages": {"server.http", "server.consent", "server.config"},
    "server.http": {"server.mcp", "server.runtime", "server.consent", "server.connection", "server.auth",
                    "server.config", "tools", "stores"},
    "server.stdio": {"server.mcp", "server.runtime", "server.config"},
    "server.mcp": {"server.publishing", "server.runtime", "server.upstream", "server.consent", "server.connection",
                   "server.auth", "server.config", "server", "tools", "stores"},
    "server.publishing": {"server.connection", "server.auth", "tools", "stores"},
    "server.runtime": {"server.providers", "server.upstream", "server.consent", "server.config", "server", "tools",
                       "stores", "sandbox"},
    "server.providers": {"server.upstream", "server.config", "tools"},
    "server.upstream": {"server.consent", "server.config", "tools", "stores", "sandbox"},
    "server.consent": {"server.auth", "tools", "stores"},
    "server.connection": {"server", "tools", "stores"},
    "server.auth": {"server.config", "tools", "stores"},
    "server.config": {"tools", "stores", "sandbox"},
    "server": set(),  # server/__init__.py: the server's name and version
    "tools": {"tools.framework.calls", "tools.framework.definitions", "tools.framework.context",
              "tools.framework.wire", "stores", "sandbox"},  # the families, the catalogue, the resource views
    "tools.framework.calls": {"tools.framework.definitions", "tools.framework.context", "tools.framework.wire",
                              "stores", "sandbox"},
    "tools.framework.definitions": {"tools.framework.context", "tools.framework.wire"},
    "tools.framework.context": {"tools.framework.wire", "stores", "sandbox"},
    "tools.framework.wire": set(),
    "tools.framework": set(),
    "stores": {"sandbox", "errors"},
    "sandbox": {"errors"},
    "errors": set(),
}  # fmt: skip
# The rooms whose package docstring says what it may import, in a line `May import: ...` naming ROOMS' set.
DOCUMENTED = [room for room in ROOMS if room.startswith(("server.", "tools.framework.")) and room != "server.__main__"]


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


def module_of(path: Path) -> str:
    """`server/http/limits.py` -> `server.http.limits`; a package is its `__init__.py`; managed_tools/errors.py is
    `errors`. Names are relative to managed_tools."""
    rel = path.relative_to(ROOT / "managed_tools" if path.parent == ROOT / "managed_tools" else ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def our_modules() -> dict[str, Path]:
    modules = {module_of(p): p for p in sources("server", "tools", "stores", "sandbox")}
    modules["errors"] = ROOT / "managed_tools" / "errors.py"
    return modules


def running_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours this file imports when it runs: at module level or inside a function, but not under
    `if TYPE_CHECKING:` (a name for the type checker, which imports nothing)."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(
        node.test) for n in ast.walk(node)}  # fmt: skip
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for target in targets:
            name = target.removeprefix("managed_tools.")
            if target.startswith("managed_tools.") and name in modules:
                found.add(name)
                if isinstance(node, ast.ImportFrom):
                    break  # `from m import a, b`: the submodules named, or else m itself
    return found


def room_of(module: str) -> str | None:
    rooms = within(module, set(ROOMS))
    return max(rooms, key=len) if rooms else None


def allowed(room: str, target: str) -> bool:
    return target == room or target in ROOMS[room] or ("tools" in ROOMS[room] and target.startswith("tools"))


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
    lazy = tmp_path / "lazy.py"
    lazy.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from managed_tools.server.cli import views\n"
                    "def f():\n    from managed_tools.server.cli import audit\n")  # fmt: skip
    modules = {"server.cli": lazy, "server.cli.views": lazy, "server.cli.audit": lazy}
    assert running_imports(lazy, modules) == {"server.cli.audit"}
    assert room_of("server.http.limits") == "server.http" and room_of("server.__main__") == "server.__main__"
    assert not allowed("server.config", "server.http") and allowed("server.mcp", "tools.framework.calls")


def test_the_tools_framework_never_imports_a_family() -> None:
    families = {p.name for p in (ROOT / "tools").iterdir() if (p / "__init__.py").exists()} - {"framework"}
    assert families
    forbidden = {f"managed_tools.tools.{family}" for family in families}
    offenders = {str(f.relative_to(ROOT)): sorted(set().union(*(within(n, forbidden) for n in imported(f))))
                 for f in sources(FAMILY_FREE)}  # fmt: skip
    assert {f: bad for f, bad in offenders.items() if bad} == {}


def test_every_module_is_in_a_room() -> None:
    """A new package of server/ or tools/framework/ gets a line in ROOMS (and a docstring saying the same)."""
    packages = {m for m, p in our_modules().items() if p.name == "__init__.py"}
    unplaced = sorted(m for m in packages if m.startswith(("server.", "tools.framework.")) and m not in ROOMS
                      and m.count(".") == 1 + m.startswith("tools."))  # fmt: skip
    assert unplaced == []
    loose = sorted(m for m, p in our_modules().items() if p.parent in (ROOT / "server", ROOT / "tools" / "framework")
                   and p.name not in {"__init__.py", "__main__.py"})  # fmt: skip
    assert loose == [], "server/ and tools/framework/ hold packages only: a module goes into the room it belongs to"


def test_each_room_imports_only_the_rooms_below_it_that_it_may() -> None:
    modules = our_modules()
    offenders: dict[str, list[str]] = {}
    for module, path in modules.items():
        room = room_of(module)
        assert room is not None, module
        bad = sorted(t for t in running_imports(path, modules) if not allowed(room, room_of(t) or t))
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}


def test_the_rooms_stand_on_floors() -> None:
    """What ROOMS allows has no circle: every room is on a floor above the rooms it imports."""
    placed: list[str] = []
    left = dict(ROOMS)
    while left:
        ready = [r for r, deps in left.items() if all(d in placed or (d == "tools" and all(
            x in placed for x in ROOMS if x.startswith("tools."))) for d in deps)]  # fmt: skip
        assert ready, f"a circle among {sorted(left)}"
        placed += ready
        for r in ready:
            del left[r]


def test_no_module_reaches_back_to_itself() -> None:
    """No circle across modules through the imports that run (a package's `__init__.py` choosing one of its own
    modules lazily, as `Database.open` picks an engine, is the package's own business)."""
    modules = our_modules()
    graph = {m: {t for t in running_imports(p, modules) if not (p.name == "__init__.py" and t.startswith(m + "."))}
             for m, p in modules.items()}  # fmt: skip
    circles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


@pytest.mark.parametrize("room", DOCUMENTED)
def test_each_rooms_docstring_says_what_it_may_import(room: str) -> None:
    init = ROOT / Path(*room.split(".")) / "__init__.py"
    docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
    said = re.search(r"May import: (.*?)\.(?=\s*$|\s+[A-Z])", docstring, re.S)
    assert said, f"{init.relative_to(ROOT)}: its docstring has no `May import: ...` line"
    assert set(re.findall(r"`([a-z_.]+)`", said.group(1))) == ROOMS[room], said.group(0)
