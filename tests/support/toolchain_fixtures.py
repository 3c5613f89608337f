"""A Python install outside the system directories, and virtualenvs made from it (issue 23, item 2).

This machine's own interpreter is such an install when it comes from pyenv, uv or a build of its own; where it is
the system's (/usr/bin/python3, as on CI), a private copy of it is made outside /usr: its binary copied, its
standard library linked, which Python accepts as an install of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import metadata
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


SYSTEM_PYTHON = Path("/usr/bin") / VERSION  # Debian's: no `python` beside it
PYTEST = ("pytest", "pluggy", "iniconfig", "packaging")  # pytest and what it imports


def pyenv_home(home: Path, version: str = "3.11.99") -> Path:
    """A pyenv layout under `home` as pyenv leaves it: ~/.pyenv/versions/<version> a real install (the system's
    binary copied, its standard library and dist-packages linked: Python takes that prefix as its own), the global
    version file, and a shim that runs pyenv's libexec, which is not there: only the real install can run."""
    root = home / ".pyenv"
    prefix = root / "versions" / version
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    shutil.copy2(SYSTEM_PYTHON, prefix / "bin" / VERSION)
    os.symlink(VERSION, prefix / "bin" / "python3")
    os.symlink(VERSION, prefix / "bin" / "python")
    os.symlink(f"/usr/lib/{VERSION}", prefix / "lib" / VERSION)
    os.symlink("/usr/lib/python3", prefix / "lib" / "python3")  # Debian's dist-packages: pip, setuptools
    (root / "shims").mkdir()
    for name in ("python", "python3"):
        (root / "shims" / name).write_text(f'#!/bin/sh\nexec "{root}/libexec/pyenv" exec "{name}" "$@"\n')
        (root / "shims" / name).chmod(0o755)
    (root / "version").write_text(version + "\n")
    return prefix


def project_venv(python: Path, where: Path) -> Path:
    """A virtualenv at `where` from `python`, seeing the system's site-packages (pip and setuptools, offline),
    with a `pip` of its own and pytest copied in from this test run's own environment."""
    subprocess.run([str(python), "-m", "venv", "--without-pip", "--system-site-packages", str(where)], check=True,
                   timeout=60)  # fmt: skip
    pip = where / "bin" / "pip"  # the entry point a venv made with pip has; pip itself is the system's
    pip.write_text(f"#!{where}/bin/python\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n")
    pip.chmod(0o755)
    site = next((where / "lib").glob("python3*/site-packages"))
    for name in PYTEST:
        dist = metadata.distribution(name)
        for file in dist.files or ():
            source = Path(str(dist.locate_file(file)))
            if ".." not in file.parts and source.is_file():
                (site / file).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, site / file)
    return where
