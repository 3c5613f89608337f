"""A typical 20-call coding session, as a model drives one: look around, read, search, change a file, set the
shell up, run the tests, note progress, check the outcome, close the shell. What the budget test
(tests/tools/test_result_budget.py) holds and bench/session_results.py measures: the characters of each result as
the model reads them (the text blocks of `content`; `structuredContent` carries the same object).

Only tools and arguments every tree since issue 24 has, so the bench can run it on an older checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import Client

APP = '''"""A tiny app."""


def greet(name: str) -> str:
    return f"Hello, {name}!"


def add(a: int, b: int) -> int:
    return a + b
'''
TEST = """from app import add, greet


def test_greet() -> None:
    assert greet("x") == "Hello, x!"


def test_add() -> None:
    assert add(1, 2) == 3
"""
README = "# app\n\nA tiny app. Run the tests with `python3 -m pytest -q` in src/.\n"

FLOAT_ADD = "def add(a: float, b: float) -> float:"
CHECK = "from app import add\n\nassert add(0.5, 0.25) == 0.75\nprint('ok')\n"
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("session_get_snapshot", {}),
    ("glob", {"pattern": "**/*.py"}),
    ("read", {"path": "README.md"}),
    ("read", {"path": "src/app.py"}),
    ("grep", {"query": "def ", "glob": "*.py"}),
    ("bash", {"command": "ls", "args": ["-la", "src"]}),
    ("outcome_define", {"title": "add() handles floats", "successCriteria": ["add(0.5, 0.25) == 0.75", "tests pass"]}),
    ("edit", {"path": "src/app.py", "oldText": "def add(a: int, b: int) -> int:", "newText": FLOAT_ADD}),
    ("write", {"path": "src/check_floats.py", "content": CHECK}),
    ("shell_set_env", {"key": "PYTHONDONTWRITEBYTECODE", "value": "1"}),
    ("shell_set_cwd", {"path": "/workspace/src"}),
    ("shell_open", {}),
    ("permissions_check", {"toolName": "shell_exec", "toolArgs": {"command": "python3 check_floats.py"}}),
    ("shell_exec", {"command": "python3 check_floats.py"}),
    ("shell_run", {"command": "python3 -c 'import app; print(app.add(1, 2))'"}),
    ("memory_write", {"target": "session_state", "content": "add() takes floats; check_floats.py passes."}),
    ("outcome_evaluate", {}),
    ("session_search_context", {"query": "floats", "includeCurrent": True}),
    ("shell_history", {"limit": 5}),
    ("shell_close", {}),
]  # fmt: skip
assert len(CALLS) == 20


def prepare(workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text(APP)
    (workspace / "src" / "test_app.py").write_text(TEST)
    (workspace / "README.md").write_text(README)


def characters(result: Any) -> int:
    """What the model reads of a result: its text blocks."""
    return sum(len(getattr(block, "text", "") or "") for block in result.content)


async def run(client: Client) -> list[tuple[str, int, bool]]:
    """(tool, result characters, is_error) for each call, in order."""
    found = []
    for name, arguments in CALLS:
        result = await client.call_tool(name, arguments)
        found.append((name, characters(result), bool(result.is_error)))
    return found
