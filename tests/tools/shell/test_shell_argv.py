"""The read-only hand's flag allowlist, table-driven: every allowed spelling becomes one exact canonical argv,
every other spelling is refused with a message naming what is allowed. The tables are also run against the real
programs, so a spelling we allow is one they accept."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from managed_tools.sandbox.mounts import default_mounts
from managed_tools.sandbox.paths import PathGuard, inside
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.shell.argv import FIXED_ENV, plan
from managed_tools.tools.shell.flags import PROGRAMS, Flag

W = "W"  # stands for the workspace's real host root in the expected argvs


@pytest.fixture(scope="module")
def guard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PathGuard]:
    top = tmp_path_factory.mktemp("argv")
    workspace = top / "workspace"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "notes.txt").write_text("one\ntwo\nthree\n")
    (workspace / "-name").write_text("dash\n")
    (top / "SECRET.txt").write_text("SECRET-argv\n")
    data = top / "data"
    yield PathGuard(default_mounts(workspace, data, "agent", {}), private=[data])


def _argv(guard: PathGuard, command: str, args: list[str]) -> list[str]:
    root = str(guard.resolve("/workspace").host)
    return [a.replace(root, W) for a in plan(guard, command, args, "/workspace").argv[1:]]


ALLOWED: list[tuple[str, list[str], list[str]]] = [
    ("pwd", [], []),
    ("env", [], []),
    ("ls", [], ["--"]),
    ("ls", ["-la"], ["-l", "--all", "--"]),
    ("ls", ["-1", "sub"], ["-1", "--", "W/sub"]),
    ("ls", ["sub", "-l"], ["-l", "--", "W/sub"]),  # permuted: the flag still comes first, the path after --
    ("ls", ["--color", "sub"], ["--color", "--", "W/sub"]),  # an optional value never takes the next argument
    ("ls", ["--color=never"], ["--color=never", "--"]),
    ("ls", ["-F"], ["--classify", "--"]),
    ("ls", ["--classify=auto"], ["--classify=auto", "--"]),
    ("ls", ["--sort=size"], ["--sort=size", "--"]),
    ("ls", ["--sort", "time"], ["--sort=time", "--"]),
    ("ls", ["-w80"], ["--width=80", "--"]),
    ("ls", ["-lw", "80"], ["-l", "--width=80", "--"]),
    ("ls", ["-I", "*.txt"], ["--ignore=*.txt", "--"]),
    ("ls", ["-I", "-R"], ["--ignore=-R", "--"]),  # a required value is a value, dash or not
    ("ls", ["--hide=-x"], ["--hide=-x", "--"]),
    ("ls", ["--time-style=+%Y"], ["--time-style=+%Y", "--"]),
    ("ls", ["--block-size=K", "--quoting-style=c"], ["--block-size=K", "--quoting-style=c", "--"]),
    ("ls", ["--format=commas", "--time=ctime"], ["--format=commas", "--time=ctime", "--"]),
    ("ls", ["--", "-name"], ["--", "W/-name"]),
    ("ls", ["./-name"], ["--", "W/-name"]),
    ("cat", ["-n", "notes.txt"], ["--number", "--", "W/notes.txt"]),
    ("cat", ["-vET", "notes.txt"], ["--show-nonprinting", "--show-ends", "--show-tabs", "--", "W/notes.txt"]),
    ("cat", ["-e", "notes.txt"], ["-e", "--", "W/notes.txt"]),
    ("cat", ["notes.txt", "--", "-name"], ["--", "W/notes.txt", "W/-name"]),
    ("cat", ["sub/../notes.txt"], ["--", "W/notes.txt"]),
    ("head", ["-n", "2", "notes.txt"], ["--lines=2", "--", "W/notes.txt"]),
    ("head", ["-n2", "notes.txt"], ["--lines=2", "--", "W/notes.txt"]),
    ("head", ["--lines=2"], ["--lines=2", "--"]),
    ("head", ["--lines", "2"], ["--lines=2", "--"]),
    ("head", ["-5", "notes.txt"], ["--lines=5", "--", "W/notes.txt"]),
    ("head", ["-c", "1K"], ["--bytes=1K", "--"]),
    ("head", ["-n", "-3"], ["--lines=-3", "--"]),
    ("head", ["-qn3"], ["--quiet", "--lines=3", "--"]),
    ("head", ["--silent"], ["--quiet", "--"]),
    ("tail", ["-n", "+2", "notes.txt"], ["--lines=+2", "--", "W/notes.txt"]),
    ("tail", ["-c5"], ["--bytes=5", "--"]),
    ("tail", ["-20"], ["--lines=20", "--"]),
    ("tail", ["-v", "notes.txt"], ["--verbose", "--", "W/notes.txt"]),
    ("wc", ["-l", "notes.txt"], ["--lines", "--", "W/notes.txt"]),
    ("wc", ["-lwc"], ["--lines", "--words", "--bytes", "--"]),
    ("wc", ["--max-line-length"], ["--max-line-length", "--"]),
    ("basename", ["/workspace/sub/a.txt", ".txt"], ["--", "/workspace/sub/a.txt", ".txt"]),  # names, not paths
    ("basename", ["-s", ".txt", "a.txt", "b.txt"], ["--suffix=.txt", "--", "a.txt", "b.txt"]),
    ("basename", ["-a", "--", "-x"], ["--multiple", "--", "-x"]),
    ("dirname", ["/workspace/sub/a.txt"], ["--", "/workspace/sub/a.txt"]),
    ("dirname", ["-z", "a/b"], ["--zero", "--", "a/b"]),
    ("realpath", ["notes.txt"], ["--", "W/notes.txt"]),
    ("realpath", ["--relative-to=sub", "notes.txt"], ["--relative-to=W/sub", "--", "W/notes.txt"]),
    ("realpath", ["--relative-to", "/workspace", "sub"], ["--relative-to=W", "--", "W/sub"]),
    ("realpath", ["-se", "notes.txt"], ["--strip", "--canonicalize-existing", "--", "W/notes.txt"]),
    ("realpath", ["--no-symlinks"], ["--strip", "--"]),
    ("stat", ["-c", "%s %n", "notes.txt"], ["--format=%s %n", "--", "W/notes.txt"]),
    ("stat", ["--printf=%s\\n", "-t"], ["--printf=%s\\n", "--terse", "--"]),
    ("stat", ["-c", "%%m"], ["--format=%%m", "--"]),  # a literal "%m", not the mount point
]


@pytest.mark.parametrize(("command", "args", "expected"), ALLOWED)
def test_allowed_spellings_become_one_canonical_argv(
    guard: PathGuard, command: str, args: list[str], expected: list[str]
) -> None:
    assert _argv(guard, command, args) == expected


REFUSED: list[tuple[str, list[str], str]] = [
    ("head", ["-999999c", "../SECRET.txt"], "-9 (in '-999999c') is not an allowed flag"),  # F1
    ("tail", ["-999999c", "../SECRET.txt"], "-9 (in '-999999c') is not an allowed flag"),
    ("head", ["-5c", "notes.txt"], "-5 (in '-5c') is not an allowed flag"),
    ("wc", ["--files0=../list0"], "use the full name"),  # F2
    ("wc", ["--f=../list0"], "use the full name"),
    ("wc", ["--files0-from=list0"], "is not an allowed flag"),
    ("cat", ["notes.txt", "-x/../../SECRET.txt"], "-x (in '-x/../../SECRET.txt') is not an allowed flag"),  # F3
    ("ls", ["--rec"], "use the full name"),  # F5
    ("ls", ["-R"], "-R (in '-R') is not an allowed flag"),
    ("ls", ["-laR"], "-R (in '-laR') is not an allowed flag"),
    ("ls", ["--recursive"], "is not an allowed flag"),
    ("tail", ["--fo", "notes.txt"], "use the full name"),
    ("tail", ["-cf", "notes.txt"], "'f' is not a valid value for -c"),
    ("tail", ["-f", "notes.txt"], "-f (in '-f') is not an allowed flag"),
    ("tail", ["-F", "notes.txt"], "is not an allowed flag"),
    ("tail", ["--follow=name", "notes.txt"], "is not an allowed flag"),
    ("tail", ["--pid=1"], "is not an allowed flag"),
    ("tail", ["-s", "1"], "is not an allowed flag"),
    ("realpath", ["--relative-t=/", "x"], "use the full name"),
    ("realpath", ["--relative-to=/", "notes.txt"], "outside the mounts"),
    ("realpath", ["--relative-to", "../..", "notes.txt"], "outside the mounts"),
    ("ls", ["--color=sometimes"], "'sometimes' is not a valid value for --color"),
    ("ls", ["--sort=name"], "'name' is not a valid value for --sort"),
    ("ls", ["--format", "json"], "'json' is not a valid value for --format"),
    ("ls", ["-w", "abc"], "'abc' is not a valid value for -w"),
    ("ls", ["--block-size=12Q"], "not a valid value for --block-size"),
    ("ls", ["--hyperlink"], "is not an allowed flag"),
    ("ls", ["-L"], "is not an allowed flag"),
    ("ls", ["--all=yes"], "--all takes no value"),
    ("ls", ["---all"], "is not an allowed flag"),
    ("ls", ["-"], "'-' (standard input) is not allowed"),
    ("head", ["-n", "5x"], "'5x' is not a valid value for -n"),
    ("head", ["-n", "1e3"], "'1e3' is not a valid value for -n"),
    ("head", ["--lines=+5"], "'+5' is not a valid value for --lines"),
    ("head", ["-c", "9" * 19], "is not a valid value for -c"),
    ("head", ["-" + "9" * 19], "is not a valid value for -9999"),
    ("head", ["-n"], "-n needs a value"),
    ("head", ["--lines"], "--lines needs a value"),
    ("stat", ["-c", "%m", "notes.txt"], "'%m' is not a valid value for -c"),
    ("stat", ["--printf=%-5m", "notes.txt"], "is not a valid value for --printf"),
    ("stat", ["-f", "notes.txt"], "is not an allowed flag"),
    ("dirname", ["-x"], "-x (in '-x') is not an allowed flag"),
    ("basename", ["--suffix"], "--suffix needs a value"),
]


@pytest.mark.parametrize(("command", "args", "expected"), REFUSED)
def test_every_other_spelling_is_refused_naming_what_is_allowed(
    guard: PathGuard, command: str, args: list[str], expected: str
) -> None:
    with pytest.raises(ToolError) as refused:
        plan(guard, command, args, "/workspace")
    message = str(refused.value)
    assert expected in message
    if "outside the mounts" not in expected:
        assert f"{command} accepts exactly these flags: {PROGRAMS[command].spellings()};" in message
    if args[0].startswith("-") and "not an allowed flag" in message:
        assert "write ./-name or put it after --" in message


@pytest.mark.parametrize(("command", "args"), [("pwd", ["-P"]), ("env", ["-i"]), ("env", ["sh", "-c", "id"])])
def test_pwd_and_env_take_nothing(guard: PathGuard, command: str, args: list[str]) -> None:
    with pytest.raises(ToolError, match="takes no arguments"):
        plan(guard, command, args, "/workspace")


def test_messages_list_the_allowed_spellings() -> None:
    assert PROGRAMS["head"].spellings() == (
        "-n/--lines=[-]N, -c/--bytes=[-]N, -q/--quiet/--silent, -v/--verbose, -z/--zero-terminated"
    )
    assert "--color[=always|auto|never]" in PROGRAMS["ls"].spellings()
    assert "-F/--classify[=always|auto|never]" in PROGRAMS["ls"].spellings()


# ---- the tables against the real programs --------------------------------------------------------------------

SAMPLES = {"N": "3", "[-]N": "2", "[+-]N": "+2", "PATTERN": "*.x", "SUFFIX": ".txt", "SIZE": "K"}


def _values(flag: Flag, guard: PathGuard) -> list[str | None]:
    if flag.value is None:
        return [None]
    if flag.value.choices:
        return list(flag.value.choices)
    if flag.value.is_path:
        return [str(guard.resolve("/workspace/sub").host)]
    return [SAMPLES.get(flag.value.hint, "%n" if "FORMAT" in flag.value.hint else "iso")]


def _cases(guard: PathGuard) -> Iterator[tuple[str, list[str]]]:
    notes = str(guard.resolve("/workspace/notes.txt").host)
    for command, program in PROGRAMS.items():
        if program.operands == "none":
            yield command, []
            continue
        operand = "sub/notes.txt" if program.operands == "names" else notes
        for flag in program.flags:
            for name in flag.long or (flag.short,):
                prefix = "--" if flag.long else "-"
                for value in _values(flag, guard):
                    yield command, [prefix + name + ("" if value is None else f"={value}"), "--", operand]
            if flag.short and flag.long:
                yield command, [f"-{flag.short}", *([] if flag.value is None or flag.optional else ["3"]), "--",
                                operand]  # fmt: skip


def test_every_allowed_spelling_is_accepted_by_the_real_program(guard: PathGuard) -> None:
    """Each flag of the tables, and `--`, is one the installed program knows (a table typo would fail here)."""
    failures = []
    for command, args in _cases(guard):
        binary = plan(guard, command, [], "/workspace").binary
        done = subprocess.run([binary, *args], env=FIXED_ENV, capture_output=True, text=True, timeout=10, check=False)
        if done.returncode != 0:
            failures.append((command, args, done.stderr))
    assert failures == []


# ---- a property: whatever the arguments, nothing unchecked reaches the program --------------------------------

FLAGS = ["-", "--", "-x", "-n", "-c", "-l", "-9", "--f", "--lines", "--color", "--relative-to", "%m"]
TOKENS = st.sampled_from([*FLAGS, "c", "=", "f", "/", "..", "../SECRET.txt", "sub", "notes.txt", "+", "5", "K", "."])


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(command=st.sampled_from(sorted(PROGRAMS)), pieces=st.lists(st.lists(TOKENS, max_size=4), max_size=6))
def test_no_argv_carries_an_unchecked_argument(guard: PathGuard, command: str, pieces: list[list[str]]) -> None:
    args = ["".join(p) for p in pieces]
    root = str(guard.resolve("/workspace").host)
    try:
        argv = plan(guard, command, args, "/workspace").argv[1:]
    except ToolError:
        return
    if PROGRAMS[command].operands == "none":
        assert argv == []
        return
    flags = {f"--{f.long[0]}" if f.long else f"-{f.short}": f for f in PROGRAMS[command].flags}
    split = argv.index("--")
    for spelling in argv[:split]:
        name, _, value = spelling.partition("=")
        flag = flags[name]  # only canonical spellings come before --
        assert flag.value is not None or not value
        if flag.value is not None and flag.value.is_path:
            assert inside(value, root), spelling
    for operand in argv[split + 1 :]:
        assert PROGRAMS[command].operands == "names" or inside(operand, root), operand
