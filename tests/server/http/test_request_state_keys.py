"""The requestState key ring replicas share: where it comes from, what it refuses, and that it never leaks."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

import pytest

from managed_tools.server.cli.command import main
from managed_tools.server.config.request_state_keys import KEY_ENV, KeyRingError, parse_keys
from managed_tools.server.config.serve_config import ConfigError, ServeConfig

GOOD = secrets.token_hex(32)
OTHER = base64.urlsafe_b64encode(secrets.token_bytes(48)).decode()


def test_hex_and_base64_keys_make_a_ring_whose_first_key_seals() -> None:
    ring = parse_keys(f"# rotated 2026-05\n{GOOD}\n{OTHER}, \n", "the test")
    assert [key.get_secret_value() for key in ring] == [bytes.fromhex(GOOD), base64.urlsafe_b64decode(OTHER)]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "holds no key"),
        ("# only a comment", "holds no key"),
        (secrets.token_hex(16), "too weak"),  # 16 bytes
        ("61" * 40, "too weak"),  # 40 times the same byte
        ("correct-horse-battery-staple-correct-horse-battery!", "neither hex nor base64"),
        (f"{GOOD} {GOOD}", "the same key twice"),
        (" ".join(secrets.token_hex(32) for _ in range(9)), "at most 8"),
    ],
)
def test_weak_or_malformed_rings_are_refused_without_repeating_a_key(text: str, why: str) -> None:
    with pytest.raises(KeyRingError, match=why) as refused:
        parse_keys(text, "the test")
    assert all(word not in str(refused.value) for word in text.split() if len(word) > 8)


def config_with(data_dir: Path, workspace: Path, source: dict[str, str]) -> ServeConfig:
    data_dir.mkdir(exist_ok=True)
    (data_dir / "config.json").write_text(json.dumps({"requestStateKeys": source}))
    return ServeConfig.build(workspace=workspace, data_dir=data_dir)


def test_the_ring_comes_from_a_private_key_file_or_the_environment(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    assert ServeConfig.build(workspace=workspace, data_dir=data_dir).request_state_keys == ()  # per process
    monkeypatch.setenv(KEY_ENV, GOOD)
    from_env = ServeConfig.build(workspace=workspace, data_dir=data_dir).request_state_keys
    key_file = data_dir / "keys"
    key_file.write_text(OTHER + "\n")
    key_file.chmod(0o600)
    from_file = config_with(data_dir, workspace, {"file": "keys"}).request_state_keys
    monkeypatch.setenv("TEAM_KEYS", f"{OTHER},{GOOD}")
    named_env = config_with(data_dir, workspace, {"env": "TEAM_KEYS"}).request_state_keys
    assert [k.get_secret_value() for k in from_env] == [bytes.fromhex(GOOD)]
    assert [k.get_secret_value() for k in from_file] == [base64.urlsafe_b64decode(OTHER)]
    assert len(named_env) == 2
    assert GOOD not in repr(named_env) and GOOD not in repr(config_with(data_dir, workspace, {"env": "TEAM_KEYS"}))


def test_a_key_file_others_can_read_or_a_tool_can_reach_is_refused(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shared = data_dir / "keys"
    shared.write_text(GOOD)
    shared.chmod(0o640)
    in_mount = workspace / "keys"
    in_mount.write_text(GOOD)
    in_mount.chmod(0o600)
    with pytest.raises(ConfigError, match="must be yours alone: chmod 600"):
        config_with(data_dir, workspace, {"file": "keys"})
    with pytest.raises(ConfigError, match="inside a mount"):
        config_with(data_dir, workspace, {"file": str(in_mount)})
    with pytest.raises(ConfigError, match=r"\$UNSET_KEYS .* is not set"):
        config_with(data_dir, workspace, {"env": "UNSET_KEYS"})
    with pytest.raises(ConfigError, match="exactly one of"):
        config_with(data_dir, workspace, {"env": "A", "file": "keys"})


def test_serve_refuses_a_weak_key_with_one_line_and_no_key(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    weak = "ab" * 32
    monkeypatch.setenv(KEY_ENV, weak)
    assert main(["serve", "--workspace", str(workspace), "--transport", "http", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"${KEY_ENV}, key 1 is too weak" in err and weak not in err and "Traceback" not in err
