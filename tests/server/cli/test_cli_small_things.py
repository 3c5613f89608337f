"""The small things a new user meets first (issue 40): a typo gets the closest word, a typo in a preset or toolset
is refused before the catalogue loads, a broken config.json leaves the approval commands working, and `where` says
when the workspace does not exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from managed_tools.server.cli.command import main
from managed_tools.tools.catalogue import FAMILIES
from managed_tools.tools.framework.definitions.names import FAMILY_NAMES, PRESET_NAMES
from managed_tools.tools.framework.definitions.toolsets import PRESETS


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(list(argv))
    assert stopped.value.code == 2
    return capsys.readouterr().err


def test_a_mistyped_command_or_flag_gets_the_closest_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert "invalid choice: 'serv'" in (said := refused(capsys, "serv")) and "(did you mean 'serve'?)" in said
    said = refused(capsys, "serve", "--workspce", ".")
    assert "unrecognized arguments: --workspce (did you mean '--workspace'?) ." in said
    assert "(did you mean '--json'?)" in refused(capsys, "where", "--jsn")
    assert "(did you mean 'DEBUG'?)" in refused(capsys, "tools", "--log-level", "debg")
    assert "did you mean" not in refused(capsys, "serve", "--zzzzzzzz")  # nothing close: no guess
    # Only the named argument's own choices: `DEBUG` is --log-level's, never a guess for --transport.
    assert "did you mean" not in refused(capsys, "serve", "--transport", "DEBG")


def test_the_selection_names_are_the_catalogues() -> None:
    assert tuple(PRESETS) == PRESET_NAMES
    assert tuple(FAMILIES) == FAMILY_NAMES


PROBE = """
import sys
from managed_tools.server.cli.command import main
status = main(sys.argv[1:])
print(status, 'managed_tools.tools.catalogue' in sys.modules)
"""


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["tools", "--preset", "codng"], "Unknown preset 'codng' (did you mean 'coding'?)"),
        (["serve", "--toolsets", "files,shel"], "Unknown toolset 'shel' (did you mean 'shell'?)"),
    ],
)
def test_a_mistyped_preset_or_toolset_is_refused_before_the_catalogue_loads(
    tmp_path: Path, argv: list[str], said: str
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv, "--workspace", str(tmp_path / "w"), "--data-dir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.stdout.split() == ["2", "False"], out
    assert said in out.stderr and out.stderr.count("\n") == 1


def test_the_approval_commands_answer_while_config_json_is_broken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, workspace = tmp_path / "data", tmp_path / "project"
    data.mkdir()
    workspace.mkdir()
    (data / "config.json").write_text('{"preset": "coding",', encoding="utf-8")
    args = ["--workspace", str(workspace), "--data-dir", str(data)]
    assert main(["pending", *args]) == 1  # no state yet: the command ran, past the config
    err = capsys.readouterr().err
    assert "config.json is not valid JSON" in err and "It was passed over. Fix it before `serve`." in err
    assert "No state database" in err
    (data / "config.json").write_text('{"preset": "coding", "bogus": 1}', encoding="utf-8")
    assert main(["approve", "0193f2c0-1a2b-7c3d-8e4f-5a6b7c8d9e0f", *args]) == 1
    err = capsys.readouterr().err
    assert "unknown key 'bogus'" in err and "The rest of it was read." in err
    assert main(["tools", *args]) == 2  # serve and tools still check the whole file
    assert "unknown key 'bogus'" in capsys.readouterr().err


def test_where_says_when_the_workspace_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing, data = tmp_path / "no-such-project", tmp_path / "d"
    assert main(["where", "--workspace", str(missing), "--data-dir", str(data)]) == 1
    assert capsys.readouterr().out.splitlines()[0].endswith(f"{missing}  (no such directory)")
    missing.mkdir()
    assert main(["where", "--workspace", str(missing), "--data-dir", str(data), "--json"]) == 0
    assert '"workspaceExists": true' in capsys.readouterr().out
