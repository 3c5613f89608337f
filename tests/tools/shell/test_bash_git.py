"""`bash git` end to end through a real MCP client (issue 23, item 4): the read-only subcommands on a real
repository, a hostile repository whose config names a program for every hook git has, refused flags, and
repositories that reach outside the mount.

The hostile tests run twice: with Landlock (the boundary) and with MANAGED_TOOLS_CONFINEMENT=argv-only, where only
the second layer (the allowlist, the fixed environment and the config overrides) stands between the repository's
config and a program that would write the marker: there a single gap would show.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ERAS, Connect, data, error_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from managed_tools.sandbox.confine import FORCE_ENV
from managed_tools.sandbox.mounts import default_mounts
from managed_tools.sandbox.paths import PathGuard, inside
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.tools.framework.context.context import Runtime
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.shell import git_repository
from managed_tools.tools.shell.argv import canonical, resolve_binary
from managed_tools.tools.shell.git import checked
from managed_tools.tools.shell.git_flags import REVISION, SUBCOMMANDS
from managed_tools.tools.shell.git_repository import FIXED_CONFIG, GIT_ENV, config_env

pytestmark = pytest.mark.anyio
AUTHOR = ["-c", "user.name=Tester", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main"]


def run_git(cwd: Path, *args: str, check: bool = True) -> str:
    """The test's own git, with no config of the machine's."""
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
    done = subprocess.run(["git", *AUTHOR, *args], cwd=cwd, env=env, capture_output=True, text=True, check=check)
    return done.stdout


@pytest.fixture(params=["landlock", "argv-only"])
def confinement(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Landlock (the boundary), or argv-only: the second layer alone, where a single gap would show."""
    if request.param == "argv-only":
        monkeypatch.setenv(FORCE_ENV, "argv-only")
    mode: str = request.param
    return mode


def make_repo(root: Path) -> Path:
    root.mkdir()
    run_git(root, "init", "-q")
    (root / "a.txt").write_text("first line\nsecond line\n")
    (root / "src").mkdir()
    (root / "src" / "b.py").write_text("print('b')\n")
    run_git(root, "add", "-A")
    run_git(root, "commit", "-qm", "first commit")
    (root / "a.txt").write_text("first line\nsecond line\nthird line\n")
    run_git(root, "commit", "-qam", "second commit")
    run_git(root, "branch", "topic")
    (root / "a.txt").write_text("first line\nchanged line\nthird line\n")  # unstaged
    (root / "staged.txt").write_text("staged\n")
    run_git(root, "add", "staged.txt")
    (root / "new.txt").write_text("untracked\n")
    return root


@pytest.fixture
async def rt(config: ServeConfig) -> AsyncIterator[Runtime]:
    async with open_runtime(config) as runtime:
        yield runtime


async def git(client: Client, *args: str, cwd: str = "/workspace/repo") -> dict[str, Any]:
    result = data(await client.call_tool("bash", {"command": "git", "args": list(args), "cwd": cwd}))
    assert result["exitCode"] == 0, result
    return result


async def refused(client: Client, *args: str, cwd: str = "/workspace/repo") -> str:
    return error_text(await client.call_tool("bash", {"command": "git", "args": list(args), "cwd": cwd}))


@pytest.mark.parametrize("mode", ERAS)
async def test_each_read_only_subcommand_works(rt: Runtime, connect: Connect, workspace: Path, mode: str) -> None:
    repo = make_repo(workspace / "repo")
    index = (repo / ".git" / "index").read_bytes()
    head = run_git(repo, "rev-parse", "HEAD").strip()
    async with connect(rt, mode) as client:
        short = await git(client, "status", "--short")
        long = await git(client, "status")
        diff = await git(client, "diff")
        stat = await git(client, "diff", "--stat")
        cached = await git(client, "diff", "--cached", "--name-only")
        ranged = await git(client, "diff", "--name-status", "HEAD~1..HEAD")
        one_file = await git(client, "diff", "a.txt")
        oneline = await git(client, "log", "--oneline", "-n", "5")
        in_src = await git(client, "log", "--format=%s", "--", "src")
        patch = await git(client, "log", "-p", "-1", "--stat")
        shown = await git(client, "show", "--stat", "HEAD")
        blob = await git(client, "show", "HEAD~1:a.txt")
        blame = await git(client, "blame", "-L", "1,2", "a.txt")
        files = await git(client, "ls-files")
        modified = await git(client, "ls-files", "-m")
        sha = await git(client, "rev-parse", "HEAD")
        top = await git(client, "rev-parse", "--show-toplevel")
        branch = await git(client, "rev-parse", "--abbrev-ref", "HEAD")
        branches = await git(client, "branch", "--list", "-v")
        current = await git(client, "branch", "--show-current")
        listed_only = await git(client, "branch", "newbranch")  # lists a pattern; never creates a branch
        from_elsewhere = await git(client, "-C", "repo", "status", "-s", cwd="/workspace")
        in_subdir = await git(client, "log", "--oneline", "--", "b.py", cwd="/workspace/repo/src")
    assert short["stdout"].splitlines() == [" M a.txt", "A  staged.txt", "?? new.txt"]
    assert "modified:   a.txt" in long["stdout"] and "new file:   staged.txt" in long["stdout"]
    assert "-second line\n+changed line" in diff["stdout"] and "a.txt | 2 +-" in stat["stdout"]
    assert cached["stdout"] == "staged.txt\n" and ranged["stdout"] == "M\ta.txt\n"
    assert one_file["stdout"] == diff["stdout"]  # an existing file before any -- is a path, as git does it
    assert [line.split(" ", 1)[1] for line in oneline["stdout"].splitlines()] == ["second commit", "first commit"]
    assert in_src["stdout"] == "first commit\n"
    assert "+third line" in patch["stdout"] and "a.txt | 1 +" in patch["stdout"]
    assert "second commit" in shown["stdout"] and blob["stdout"] == "first line\nsecond line\n"
    assert blame["stdout"].count("\n") == 2 and "first line" in blame["stdout"]
    assert "Not Committed Yet" in blame["stdout"]  # the work tree's version: no clean filter, no textconv
    assert files["stdout"].split() == ["a.txt", "src/b.py", "staged.txt"] and modified["stdout"] == "a.txt\n"
    assert sha["stdout"] == f"{head}\n" and top["stdout"] == "/workspace/repo\n"  # never the host path
    assert branch["stdout"] == "main\n" and current["stdout"] == "main\n"
    assert "* main" in branches["stdout"] and "topic" in branches["stdout"] and listed_only["stdout"] == ""
    assert from_elsewhere["stdout"] == short["stdout"] and in_subdir["stdout"].endswith("first commit\n")
    assert "newbranch" not in run_git(repo, "branch", "--list")
    assert (repo / ".git" / "index").read_bytes() == index  # status and diff wrote nothing (optional locks off)
    assert not (repo / ".git" / "index.lock").exists()


def hostile_repo(root: Path, evil: Path) -> None:
    """A repository whose config (and a config it includes) names `evil` for every program git may run."""
    make_repo(root)
    (root / ".gitattributes").write_text("* diff=ev filter=ev\n*.py filter=inc\n")
    run_git(root, "add", ".gitattributes")
    hooks = root / "hooks"
    hooks.mkdir()
    for hook in ("post-checkout", "post-index-change", "reference-transaction", "fsmonitor-watchman"):
        (hooks / hook).write_text(f"#!/bin/sh\n{evil} hook-{hook}\n")
        (hooks / hook).chmod(0o755)
    tree, head = run_git(root, "rev-parse", "HEAD^{tree}", "HEAD").split()
    signed = root.parent / "signed-commit"  # a signature git hands to gpg.program whenever it shows one
    signed.write_text(
        f"tree {tree}\nparent {head}\nauthor T <t@e> 1700000000 +0000\ncommitter T <t@e> 1700000000 +0000\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----\n\nsigned commit\n"
    )
    run_git(root, "update-ref", "HEAD", run_git(root, "hash-object", "-t", "commit", "-w", str(signed)).strip())
    (root / "included.cfg").write_text(f'[filter "inc"]\n\tclean = {evil} inc-clean\n\tprocess = {evil} inc\n')
    settings = {
        "core.pager": f"{evil} pager", "pager.log": f"{evil} pager-log", "pager.status": f"{evil} pager-status",
        "core.fsmonitor": str(evil), "core.hooksPath": str(hooks), "diff.external": f"{evil} external",
        "diff.ev.textconv": f"{evil} textconv", "diff.ev.command": f"{evil} diff-command",
        "filter.ev.clean": f"{evil} clean", "filter.ev.smudge": f"{evil} smudge",
        "filter.ev.process": f"{evil} process", "filter.ev.required": "true",
        "alias.status": f"!{evil} alias", "alias.log": f"!{evil} alias", "include.path": "../included.cfg",
        "core.sshCommand": f"{evil} ssh", "core.askPass": f"{evil} askpass", "credential.helper": f"!{evil} cred",
        "gpg.program": f"{evil} gpg", "log.showSignature": "true", "format.pretty": "%G? %s",
        "core.editor": f"{evil} editor", "sequence.editor": f"{evil} sequence", "column.ui": "always",
        "status.submoduleSummary": "true",
    }  # fmt: skip
    for key, value in settings.items():
        run_git(root, "config", key, value)
    (root / "a.txt").write_text("first line\nhostile change\n")
    (root / "src" / "b.py").write_text("print('changed')\n")
    os.utime(root / "a.txt", (1, 1))  # stat data differs from the index: status must compare contents
    os.utime(root / "src" / "b.py", (1, 1))


HOSTILE_COMMANDS = [
    ["status"], ["status", "--short"], ["diff"], ["diff", "--stat"], ["diff", "HEAD"], ["diff", "--cached"],
    ["log"], ["log", "-p", "-2"], ["log", "--stat"], ["show"], ["show", "--stat", "HEAD"], ["blame", "a.txt"],
    ["blame", "src/b.py"], ["ls-files", "-m"], ["rev-parse", "HEAD"], ["branch", "--list", "-v"],
]  # fmt: skip


async def test_a_hostile_repository_runs_none_of_its_programs(
    config: ServeConfig, connect: Connect, workspace: Path, tmp_path: Path, confinement: str
) -> None:
    marker = tmp_path / "MARKER"
    evil = tmp_path / "evil.sh"  # outside the mount, so in argv-only mode nothing but the second layer stops it
    evil.write_text(f'#!/bin/sh\necho "$*" >> {marker}\necho PWNED\necho PWNED >&2\ncat\n')
    evil.chmod(0o755)
    repo = workspace / "repo"
    hostile_repo(repo, evil)
    run_git(repo, "status", check=False)
    assert marker.exists(), "the hostile config must be live, or this test proves nothing"
    marker.unlink()
    async with open_runtime(config) as rt, connect(rt) as client:
        assert rt.confinement.mode == confinement
        results = [await git(client, *args) for args in HOSTILE_COMMANDS]
    assert not marker.exists(), marker.read_text()
    for args, result in zip(HOSTILE_COMMANDS, results, strict=True):
        assert "PWNED" not in result["stdout"] + result["stderr"], (args, result)
    assert "hostile change" in results[2]["stdout"]  # the diff is git's own, with no textconv or filter
    assert results[6]["stdout"].startswith("commit ")  # log's default format, not the repository's %G?


REFUSALS = [
    (["log", "--output=/workspace/x"], "git log: '--output=/workspace/x' is not an allowed flag"),
    (["diff", "--ext-diff"], "'--ext-diff' is not an allowed flag"),
    (["show", "--textconv"], "'--textconv' is not an allowed flag"),
    (["log", "--show-signature"], "'--show-signature' is not an allowed flag"),
    (["log", "--format=%G?"], "is not a valid value for --format"),
    (["log", "--pretty=evil"], "is not a valid value for --pretty"),
    (["log", "--format=%(describe)"], "is not a valid value for --format"),
    (["blame", "--ignore-revs-file=/etc/hostname", "a.txt"], "is not an allowed flag"),
    (["diff", "--no-index", "a.txt", "new.txt"], "is not an allowed flag"),
    (["ls-files", "--recurse-submodules"], "is not an allowed flag"),
    (["branch", "-D", "topic"], "-D (in '-D') is not an allowed flag"),
    (["-c", "core.pager=sh", "log"], "'-c' is not an allowed option before the subcommand"),
    (["--git-dir=/etc", "status"], "is not an allowed option before the subcommand"),
    (["--exec-path=/tmp", "status"], "is not an allowed option before the subcommand"),
    (["fetch", "--upload-pack=sh"], "'fetch' is not one of the read-only subcommands"),
    (["checkout", "topic"], "'checkout' is not one of the read-only subcommands"),
    ([], "no subcommand is not one of the read-only subcommands"),
    (["-C", "/etc", "status"], "outside the mounts"),
    (["-C", "../..", "status"], "outside the mounts"),
    (["diff", "/etc/passwd", "/etc/hostname"], "'/etc/passwd' is not a revision this hand takes"),
    (["diff", "../../x", "HEAD"], "is not a revision this hand takes"),
    (["log", "--", "../../etc"], "outside the mounts"),
    (["status", ":(top)"], "pathspec magic is not taken"),
    (["rev-parse", "HEAD", "--", "a.txt"], "takes revisions only"),
    (["blame", "HEAD", "a.txt", "src/b.py"], "at most one revision and one file"),
    (["blame"], "at most one revision and one file"),
]


async def test_refused_flags_name_the_allowed_ones(rt: Runtime, connect: Connect, workspace: Path) -> None:
    repo = make_repo(workspace / "repo")
    refs = run_git(repo, "show-ref")
    async with connect(rt) as client:
        messages = [await refused(client, *args) for args, _ in REFUSALS]
    for (args, expected), message in zip(REFUSALS, messages, strict=True):
        assert expected in message, (args, message)
    assert "git log accepts exactly these flags: " in messages[0] and "--oneline" in messages[0]
    assert "status, diff, log, show, blame, ls-files, rev-parse, branch" in messages[14]
    assert "-C DIR, --no-pager" in messages[11]
    assert run_git(repo, "show-ref") == refs and not (workspace / "x").exists()


async def test_a_git_dir_outside_the_mount_is_refused(
    rt: Runtime, connect: Connect, workspace: Path, tmp_path: Path
) -> None:
    outside = make_repo(tmp_path / "outside")
    (workspace / "to-etc").mkdir()
    (workspace / "to-etc" / ".git").write_text("gitdir: /etc\n")
    (workspace / "to-repo").mkdir()
    (workspace / "to-repo" / ".git").write_text(f"gitdir: {outside / '.git'}\n")
    (workspace / "relative").mkdir()
    (workspace / "relative" / ".git").write_text("gitdir: ../../outside/.git\n")
    (workspace / "linked").mkdir()
    (workspace / "linked" / ".git").symlink_to(outside / ".git")
    worktree = make_repo(workspace / "worktree")
    run_git(worktree, "config", "core.worktree", str(outside))
    async with connect(rt) as client:
        etc = await refused(client, "status", cwd="/workspace/to-etc")
        elsewhere = await refused(client, "log", cwd="/workspace/to-repo")
        relative = await refused(client, "log", cwd="/workspace/relative")
        linked = await refused(client, "status", cwd="/workspace/linked")
        elsewhere_tree = await refused(client, "status", cwd="/workspace/worktree")
        no_repo = await refused(client, "status", cwd="/workspace")
    assert etc == "git: /workspace/to-etc/.git points to a git directory outside /workspace; refused."
    assert elsewhere == etc.replace("to-etc", "to-repo") and relative == etc.replace("to-etc", "relative")
    assert linked == "git: /workspace/linked/.git resolves outside /workspace (through a symbolic link); refused."
    assert elsewhere_tree == "git: the repository's work tree lies outside /workspace; refused."
    assert "not a git repository" in no_repo  # the workspace's parent is a repository: git never looks above
    for message in (etc, elsewhere, relative, linked, elsewhere_tree, no_repo):
        assert str(tmp_path) not in message


async def test_config_and_objects_from_outside_the_mount_are_refused(
    config: ServeConfig, connect: Connect, workspace: Path, tmp_path: Path, confinement: str
) -> None:
    outside = make_repo(tmp_path / "outside")
    including = make_repo(workspace / "including")
    run_git(including, "config", "include.path", str(outside / ".git" / "config"))
    ignoring = make_repo(workspace / "ignoring")
    run_git(ignoring, "config", "blame.ignoreRevsFile", "/etc/hostname")
    borrowing = make_repo(workspace / "borrowing")
    (borrowing / ".git" / "objects" / "info" / "alternates").write_text(f"{outside / '.git' / 'objects'}\n")
    chained = make_repo(workspace / "chained")  # an alternate inside the mount whose own alternate is outside
    (chained / ".git" / "objects" / "info" / "alternates").write_text("../../../borrowing/.git/objects\n")
    linking = make_repo(workspace / "linking")
    (linking / ".git" / "packed-refs").symlink_to(outside / ".git" / "HEAD")
    waiting = make_repo(workspace / "waiting")
    os.mkfifo(waiting / ".git" / "objects" / "info" / "alternates")
    stuck = make_repo(workspace / "stuck")
    (stuck / ".git" / "HEAD").unlink()
    os.mkfifo(stuck / ".git" / "HEAD")
    async with open_runtime(config) as rt, connect(rt) as client:
        viewed = rt.confinement.bwrap is not None
        if viewed:  # the include's file is not in git's mount view at all: git reads the rest, as for a missing one
            included = (await git(client, "status", cwd="/workspace/including"))["stdout"]
        else:
            included = await refused(client, "status", cwd="/workspace/including")
        ignored = await refused(client, "blame", "a.txt", cwd="/workspace/ignoring")
        borrowed = await refused(client, "log", cwd="/workspace/borrowing")
        chain = await refused(client, "log", cwd="/workspace/chained")
        linked_ref = await refused(client, "branch", cwd="/workspace/linking")
        fifo = await refused(client, "log", cwd="/workspace/waiting")
        head = await refused(client, "log", cwd="/workspace/stuck")
    if confinement == "argv-only":  # git read it, and the origin check refused it
        assert "includes a file outside /workspace" in included
    elif viewed:
        assert included.startswith("On branch")
    else:  # the kernel let git read nothing there: git fails at the include
        assert included.startswith("git: fatal: bad config line 7 in file .git/config (looked from /workspace/")
    assert "sets blame.ignorerevsfile to a file outside /workspace" in ignored
    assert borrowed == "git: the repository reads objects from an alternate object store outside /workspace; refused."
    assert chain == borrowed
    assert linked_ref == "git: the repository reads packed-refs (a link) outside /workspace; refused."
    assert fifo.startswith("git: /workspace/waiting/.git/objects/info/alternates is a named pipe (FIFO); only")
    assert head == "git: /workspace/stuck/.git/HEAD is a named pipe (FIFO); git would wait on it. Refused."
    for message in (included, ignored, borrowed, linked_ref, fifo):
        assert str(tmp_path) not in message


async def test_a_git_too_old_for_the_overrides_is_refused(
    rt: Runtime, connect: Connect, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_repo(workspace / "repo")
    async with connect(rt) as client:
        assert (await git(client, "status"))["exitCode"] == 0  # the installed git's version, asked once
        monkeypatch.setitem(git_repository._VERSIONS, resolve_binary("git"), (2, 30))  # as git 2.30 would answer
        message = await refused(client, "status")
    assert message.startswith("git 2.30 is older than 2.31, which the read-only hand needs to disable the programs")


async def test_a_git_command_for_shell_run_is_offered_as_bash(rt: Runtime, connect: Connect) -> None:
    async with connect(rt) as client:
        check = data(await client.call_tool(
            "permissions_check", {"toolName": "shell_run", "toolArgs": {"command": "git log --oneline -n 3"}}
        ))  # fmt: skip
        writes = data(await client.call_tool(
            "permissions_check", {"toolName": "shell_run", "toolArgs": {"command": "git commit -am wip"}}
        ))  # fmt: skip
    offered = check["readOnlyAlternative"]
    assert offered["tool"] == "bash" and offered["args"]["args"] == ["log", "--oneline", "-n", "3"]
    assert writes.get("readOnlyAlternative") is None


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace inside a repository: git must not find the one above the mount."""
    run_git(tmp_path, "init", "-q")
    root = tmp_path / "workspace"
    root.mkdir()
    return root


SAMPLES = {"N": "3", "REV": "HEAD", "START,END": "1,2", "KEY": "refname", "WIDTH": "80", "N[%]": "50%"}
CONTEXT = {  # what each subcommand needs around a flag to run at all
    "diff": ["HEAD~1", "--"], "log": ["-1", "HEAD", "--", "a.txt"], "show": ["HEAD", "--"],
    "blame": ["HEAD", "--", "a.txt"], "ls-files": ["--"], "rev-parse": ["HEAD"], "branch": [], "status": ["--"],
}  # fmt: skip


def _spellings() -> list[tuple[str, str]]:
    cases = []
    for name, sub in SUBCOMMANDS.items():
        for flag in sub.program.flags:
            values: list[str | None] = [None]
            if flag.value is not None:
                values = list(flag.value.choices) or [
                    SAMPLES.get(
                        flag.value.hint, "%h" if "%" in flag.value.hint else "iso" if "iso" in flag.value.hint else "x"
                    )
                ]
            cases += [(name, canonical(flag, value)) for value in values]
            if flag.optional:
                cases.append((name, canonical(flag, None)))
    return cases


def test_every_allowed_spelling_is_one_git_knows(tmp_path: Path) -> None:
    """Each flag of the tables, as the hand spells it, with the flags every run gets, is one git knows (a typo in
    a table would be a usage error)."""
    repo = make_repo(tmp_path / "repo")
    env = {**GIT_ENV, **config_env(FIXED_CONFIG)}
    failures = []
    for name, spelling in _spellings():
        forced = [f for f in SUBCOMMANDS[name].forced if not (name == "branch" and spelling == "--show-current")]
        argv = ["git", "--no-pager", name, *forced, spelling, *CONTEXT[name]]
        done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=10, check=False)
        if done.returncode == 129 or "unrecognized argument" in done.stderr or "unknown option" in done.stderr:
            failures.append((argv[2:], done.stderr[:200]))  # not "needs a range" and the like: git knew the flag
    assert failures == []


# ---- a property: whatever the arguments, nothing unchecked reaches git -------------------------------------------

TOKENS = st.sampled_from([
    "-C", "..", "/etc", "status", "log", "diff", "show", "blame", "branch", "rev-parse", "ls-files", "--", "-", "-n",
    "5", "-5", "--format=%G?", "--format=%h", "--output=x", "-c", "HEAD", "../x", "/etc/passwd", ":(top)", "a.txt",
    "-L", "1,2", "--stat", "-p", "--no-index", "x..y", "--show-current", "-D", "-vv", "--contains", "=", "sub",
    "--git-dir", "/workspace/a.txt", "--no-pager", "%", "-s", "@{u}", ".", "-M", "--ext-diff",
])  # fmt: skip


@pytest.fixture(scope="module")
def guard(tmp_path_factory: pytest.TempPathFactory) -> PathGuard:
    top = tmp_path_factory.mktemp("git-argv")
    (top / "workspace" / "sub").mkdir(parents=True)
    (top / "workspace" / "a.txt").write_text("a\n")
    return PathGuard(default_mounts(top / "workspace", top / "data", "agent", {}), private=[top / "data"])


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(pieces=st.lists(st.lists(TOKENS, min_size=1, max_size=3), max_size=7))
def test_no_git_argv_carries_an_unchecked_argument(guard: PathGuard, pieces: list[list[str]]) -> None:
    args = ["".join(p) for p in pieces]
    root = str(guard.resolve("/workspace").host)
    try:
        _, argv = checked(guard, args, "/workspace")
    except ToolError:
        return
    assert argv[0] == "--no-pager" and argv[1] in SUBCOMMANDS
    sub = SUBCOMMANDS[argv[1]]
    spellings = {f"--{f.long[0]}" if f.long else f"-{f.short}" for f in sub.program.flags} | {"--list"}
    split = argv.index("--") if "--" in argv else len(argv)
    for piece in argv[2:split]:
        if piece.startswith("-"):  # a flag in its canonical spelling (a short one with its value glued)
            assert piece in sub.forced or piece.partition("=")[0] in spellings or piece[:2] in spellings, piece
        else:
            assert REVISION.fullmatch(piece), piece
    for operand in argv[split + 1 :]:
        assert sub.operands == "patterns" or inside(operand, root), operand
