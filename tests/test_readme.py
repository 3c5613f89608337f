"""The README is a front door (issue 22): short, the install and test commands first, each after a sentence, the
same test line as CI, links that resolve, and every install line in it and in docs/ naming what this repository
really builds (a wrong name installs nothing, or one day someone else's package)."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from managed_tools.stores.db import Database
from managed_tools.stores.errors import DatabaseOpenError

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_README_BYTES = 15_000
DISTRIBUTION = "managed-tools-mcp"  # pyproject.toml [project] name

VENV = "python3 -m venv .venv && . .venv/bin/activate"
INSTALL_AND_SERVE = "pip install -c constraints.txt . && managed-tools serve"
TEST = 'pip install -c constraints.txt -e ".[test]" && python -m pytest'
FAST_TIER = 'python -m pytest -m "not slow"'

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
INSTALLER = re.compile(r"\b(?:pipx|pip|uv tool|uv pip) (?:install|uninstall)\b")
# pip options that take a value: what follows them is not a package.
VALUED = {"-c", "--constraint", "-r", "--requirement", "-i", "--index-url", "--python", "-o"}
# Other tools a page may tell a developer to install (the lock refresh uses uv).
THIRD_PARTY = {"uv"}
OURS = re.compile(r"^(?:\.|managed-tools-mcp)(?:\[[a-z,]+\])?$")


def code_blocks(text: str) -> list[str]:
    return [block.strip() for block in FENCE.findall(text)]


def test_the_readme_is_a_front_door_of_at_most_15_kb() -> None:
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, f"README.md is {size} bytes; move detail to docs/ (at most {MAX_README_BYTES})"


def test_the_first_commands_install_serve_and_test_each_after_a_sentence() -> None:
    text = README.read_text(encoding="utf-8")
    assert code_blocks(text)[:4] == [VENV, INSTALL_AND_SERVE, TEST, FAST_TIER]
    # Before each of them, prose saying what it does (not a bare block after a heading or another block).
    before = FENCE.split(text)[0:8:2]  # the text before each of the first four blocks (split keeps the bodies)
    for prose in before:
        last = prose.rstrip().splitlines()[-1]
        assert last and not last.startswith(("#", "```")), f"no sentence before a command: {last!r}"


def test_ci_runs_the_readmes_test_line() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert TEST in ci, ".ci/run must run exactly the README's test line"


def readme_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, backticks and punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {readme_anchor(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_every_relative_link_in_the_readme_resolves() -> None:
    broken = []
    for target in LINK.findall(README.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        page = (ROOT / path) if path else README
        if not page.exists():
            broken.append(f"{target}: no such file")
        elif anchor and page.suffix == ".md" and anchor not in anchors_of(page):
            broken.append(f"{target}: no heading #{anchor} in {page.relative_to(ROOT)}")
    assert not broken, broken


def install_targets(line: str) -> list[list[str]]:
    """The package arguments of each install or uninstall command on a line (inside backticks or a code block)."""
    commands = []
    for segment in re.split(r"`|&&|;|\s#\s|\||\(|\)|: ", line):
        found = INSTALLER.search(segment)
        if found is None:
            continue
        words = shlex.split(segment[found.end() :], posix=True)
        targets, skip = [], False
        for word in words:
            if skip:
                skip = False
            elif word in VALUED:
                skip = True
            elif not word.startswith("-"):
                targets.append(word)
        commands.append(targets)
    return commands


def install_lines() -> list[tuple[str, str]]:
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    return [
        (f"{page.relative_to(ROOT)}:{number}", line)
        for page in pages
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if INSTALLER.search(line)
    ]


def wrong_install_names(line: str) -> list[str]:
    wrong = []
    for targets in install_targets(line):
        if not targets:
            wrong.append("names no package")
        wrong += [t for t in targets if not OURS.match(t) and t not in THIRD_PARTY]
    return wrong


def test_every_install_line_names_what_this_repository_builds() -> None:
    assert len(install_lines()) >= 4  # the README's own, docs/development.md's, docs/scaling.md's
    wrong = {where: bad for where, line in install_lines() if (bad := wrong_install_names(line))}
    assert not wrong, f"install lines must name '.', '.[extra]' or {DISTRIBUTION}[extra]: {wrong}"


@pytest.mark.parametrize(
    "line",
    [
        "pip install 'managed-tools[postgres]'",
        "`pipx install managed-tools`",
        "pip uninstall managed_tools",
        "pip install -c constraints.txt",
        "pip install requests",
    ],
)
def test_a_wrong_install_name_is_caught(line: str) -> None:
    assert wrong_install_names(line)


@pytest.mark.anyio
async def test_the_missing_driver_error_names_the_real_distribution(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "managed_tools.stores.db.postgres", None)  # as when asyncpg is absent
    with pytest.raises(DatabaseOpenError) as raised:
        await Database.open("postgresql://me@127.0.0.1:5432/state", local_dir=tmp_path)
    message = str(raised.value)
    assert f"pip install '{DISTRIBUTION}[postgres]'" in message
    assert len(install_targets(message)) == 2 and not wrong_install_names(message)
