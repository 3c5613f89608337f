"""The README is a front door (issue 22): short, the install and test commands first, each after a sentence, the
same test line as CI, links that resolve, and every install line in it and in docs/ naming what this repository
really builds (a wrong name installs nothing, or one day someone else's package)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
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
# The server is on no package index: it installs from a clone ('.' and its extras) and uninstalls by its name.
OURS = re.compile(r"^\.(?:\[[a-z,]+\])?$")
INSTALLED = re.compile(rf"^{DISTRIBUTION}$")


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
    return [targets for _, targets in install_commands(line)]


def install_commands(line: str) -> list[tuple[str, list[str]]]:
    """Each install or uninstall command on a line: its verb and its package arguments."""
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
        commands.append((found.group(0).rsplit(" ", 1)[1], targets))
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
    for verb, targets in install_commands(line):
        if not targets:
            wrong.append("names no package")
        ours = INSTALLED if verb == "uninstall" else OURS
        wrong += [t for t in targets if not ours.match(t) and t not in THIRD_PARTY]
        wrong += [f"{t}: no such extra" for t in targets if OURS.match(t) and not set(extras_of(t)) <= EXTRAS]
    return wrong


def extras_of(target: str) -> list[str]:
    return target.partition("[")[2].rstrip("]").split(",") if "[" in target else []


EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"])


def test_every_install_line_names_what_this_repository_builds() -> None:
    assert len(install_lines()) >= 4  # the README's own, docs/development.md's, docs/scaling.md's
    wrong = {where: bad for where, line in install_lines() if (bad := wrong_install_names(line))}
    assert not wrong, f"install lines must name '.' or '.[extra]' (uninstall: {DISTRIBUTION}): {wrong}"


@pytest.mark.slow
def test_pip_can_install_every_target_an_install_line_names(tmp_path: Path) -> None:
    """Each distinct target, resolved by pip with the lock in a fresh venv (a dry run: it resolves and fetches
    metadata, installs nothing), so that no page offers a line that fails on a fresh machine."""
    targets = sorted(
        {t for _, line in install_lines() for verb, found in install_commands(line) if verb == "install" for t in found}
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    failed = {}
    for target in targets:
        ran = subprocess.run(
            [*pip, "install", "--dry-run", "--quiet", "-c", "constraints.txt", target],
            cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if ran.returncode:
            failed[target] = ran.stderr.strip().splitlines()[-3:]
    assert {".", ".[postgres]", ".[test]", "uv"} <= set(targets)
    assert not failed, failed


@pytest.mark.parametrize(
    "line",
    [
        "pip install 'managed-tools[postgres]'",
        "`pipx install managed-tools`",
        "pip uninstall managed_tools",
        "pip install -c constraints.txt",
        "pip install requests",
        "pip install 'managed-tools-mcp[postgres]'",
        "pip install -c constraints.txt '.[nosuchextra]'",
        "pip uninstall requests",
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
    assert "pip install -c constraints.txt '.[postgres]'" in message
    assert len(install_targets(message)) == 1 and not wrong_install_names(message)


def test_the_readmes_preset_table_counts_the_tools_each_preset_serves() -> None:
    """The same count as `managed-tools tools --preset NAME` (a preset with tool search serves its three tools)."""
    from support.snapshot_tools import preset_figures

    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| (\d+) \|", README.read_text(encoding="utf-8"), re.M)
    assert {name: int(count) for name, count in rows} == {name: f[0] for name, f in preset_figures().items()}


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_repositorys_mcp_json_starts_the_coding_preset(tmp_path: Path) -> None:
    """mcp.json as a client runs it: its command found on the client's PATH, its arguments as written, from the
    project directory (its `--workspace .`)."""
    from mcp import Client, StdioServerParameters

    entry = json.loads((ROOT / "mcp.json").read_text(encoding="utf-8"))["mcpServers"]["managed-tools"]
    assert entry["args"][-2:] == ["--preset", "coding"]
    project = tmp_path / "project"
    project.mkdir()
    bin_dir = Path(sys.executable).parent  # where pip put `managed-tools`, as an activated venv's PATH has it
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path / "state")}
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env, cwd=project)
    async with Client(params) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
    assert "tools_search" in listed and "memory_write" in listed and not {"read", "bash", "shell_run"} & listed


def python_3_10() -> str | None:
    """A Python 3.10 that runs (pyenv's shim answers for versions it does not select)."""
    found = [shutil.which("python3.10"), *map(str, Path("/root/.pyenv/versions").glob("3.10*/bin/python3.10"))]
    runs = [p for p in found if p and subprocess.run([p, "-c", ""], capture_output=True, check=False).returncode == 0]
    return runs[0] if runs else None


@pytest.mark.slow
def test_python_3_10_is_told_it_needs_3_11(tmp_path: Path) -> None:
    """pip 23 resolves a local project's dependencies before its Requires-Python; the build backend says why."""
    python = python_3_10()
    if python is None:
        pytest.skip("no Python 3.10 on this machine")
    built = subprocess.run(
        [python, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode != 0
    assert "managed-tools needs Python 3.11 or newer; this is Python 3.10" in built.stdout + built.stderr
