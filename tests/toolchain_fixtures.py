"""A Python install outside the system directories, and virtualenvs made from it (issue 23, item 2).

This machine's own interpreter is such an install when it comes from pyenv, uv or a build of its own; where it is
the system's (/usr/bin/python3, as on CI), a private copy of it is made outside /usr: its binary copied, its
standard library linked, which Python accepts as an install of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from managed_tools.sandbox.grants import SYSTEM_PREFIXES
from managed_tools.sandbox.paths import inside

VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _base_interpreter() -> Path:
    return Path(os.path.realpath(Path(sys.base_prefix) / "bin" / VERSION))


def outside_install(scratch: Path) -> Path:
    """The prefix of a working Python install that lies outside every system directory."""
    base = _base_interpreter()
    prefix = base.parent.parent
    if not any(inside(prefix, system) for system in SYSTEM_PREFIXES):
        return prefix
    own = scratch / "python-install"
    if not (own / "bin" / VERSION).exists():
        (own / "bin").mkdir(parents=True)
        (own / "lib").mkdir()
        shutil.copy2(base, own / "bin" / VERSION)
        os.symlink(prefix / "lib" / VERSION, own / "lib" / VERSION)
        os.symlink(VERSION, own / "bin" / "python3")
    return own


def make_venv(prefix: Path, where: Path) -> Path:
    """A virtualenv at `where` from the install at `prefix` (no pip: quick), returned as its python."""
    subprocess.run([str(prefix / "bin" / VERSION), "-m", "venv", "--without-pip", str(where)], check=True, timeout=60)
    return where / "bin" / "python"
