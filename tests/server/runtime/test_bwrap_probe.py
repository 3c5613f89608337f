"""bubblewrap's probe, started early (docs/decisions/lazy-start-up.md): `serve` starts it before importing the
server and `find` reads its answer, the same answer a probe started by `find` gives, and failing the same way
(no bubblewrap, a bubblewrap that cannot make namespaces, one that hangs: no outer layers, and why)."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from managed_tools.sandbox import bwrap, confine


@pytest.fixture(autouse=True)
def fresh_probe() -> Iterator[None]:
    """Each test probes afresh; the process's own answer is put back after."""
    bwrap._probe.cache_clear()
    bwrap._started.cache_clear()
    yield
    bwrap._probe.cache_clear()
    bwrap._started.cache_clear()


def fake_bwrap(directory: Path, script: str) -> None:
    program = directory / "bwrap"
    program.write_text("#!/bin/sh\n" + script + "\n", encoding="utf-8")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)


def outcome(*, early: bool) -> bwrap.Bubblewrap | str:
    bwrap._probe.cache_clear()
    bwrap._started.cache_clear()
    if early:
        bwrap.probe_early()
    try:
        return bwrap.find()
    except bwrap.BwrapUnavailable as exc:
        return str(exc)


@pytest.mark.skipif(shutil.which("bwrap", path=bwrap.BWRAP_PATH) is None, reason="bubblewrap is not installed")
def test_an_early_probe_gives_what_a_late_one_gives() -> None:
    assert outcome(early=True) == outcome(early=False)


def test_an_early_probe_runs_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    fake_bwrap(tmp_path, f"echo run >> {runs}")
    monkeypatch.setattr(bwrap, "BWRAP_PATH", str(tmp_path))
    monkeypatch.delenv(confine.FORCE_ENV, raising=False)
    confine.probe_early()
    confine.probe_early()  # started already: nothing more
    assert bwrap.find() == bwrap.find() == bwrap.Bubblewrap(str(tmp_path / "bwrap"))
    assert runs.read_text(encoding="utf-8") == "run\n"


def test_a_forced_mode_without_bubblewrap_starts_no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(confine.FORCE_ENV, "landlock-only")
    confine.probe_early()
    assert bwrap._started.cache_info().currsize == 0


@pytest.mark.parametrize("early", [True, False])
def test_no_bubblewrap_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early: bool) -> None:
    monkeypatch.setattr(bwrap, "BWRAP_PATH", str(tmp_path))
    assert outcome(early=early) == "bubblewrap is not installed (apt install bubblewrap)"


@pytest.mark.parametrize("early", [True, False])
def test_a_bubblewrap_that_cannot_make_namespaces_is_refused_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early: bool
) -> None:
    fake_bwrap(tmp_path, "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1")
    monkeypatch.setattr(bwrap, "BWRAP_PATH", str(tmp_path))
    why = "bwrap: setting up uid map: Permission denied"
    assert outcome(early=early) == f"bubblewrap cannot make namespaces here: {why}"


@pytest.mark.parametrize("early", [True, False])
def test_a_bubblewrap_that_hangs_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early: bool) -> None:
    fake_bwrap(tmp_path, "exec sleep 30")
    monkeypatch.setattr(bwrap, "BWRAP_PATH", str(tmp_path))
    monkeypatch.setattr(bwrap, "PROBE_TIMEOUT_S", 0.3)
    found = outcome(early=early)
    assert isinstance(found, str) and found.startswith("bubblewrap could not run:") and "timed out" in found


@pytest.mark.skipif(os.geteuid() != 0, reason="only root (or a setuid bwrap) runs bubblewrap without a user namespace")
@pytest.mark.parametrize("early", [True, False])
def test_where_user_namespaces_are_refused_root_probes_again_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early: bool
) -> None:
    refuses = 'echo "bwrap: No permissions to create a new namespace" >&2; exit 1'
    fake_bwrap(tmp_path, f'if [ "$1" = --unshare-user ]; then {refuses}; fi')
    monkeypatch.setattr(bwrap, "BWRAP_PATH", str(tmp_path))
    found = outcome(early=early)
    assert found == bwrap.Bubblewrap(str(tmp_path / "bwrap"), userns=False)
    options = bwrap.namespaces(found)
    # bwrap as root keeps the bounding set without a user namespace: CAP_SETPCAP stays for the launcher to drop it
    assert "--unshare-user" not in options and options[options.index("ALL") + 1 :][:2] == ["--cap-add", "CAP_SETPCAP"]
