"""The toolchain managers' installs, found rather than configured (issue 35): where pyenv, asdf, mise, uv, pipx,
conda/mamba, nvm, fnm, volta, rustup and cargo, Go, Homebrew on Linux and SDKMAN keep the programs a project runs.

Read by the server at start-up, never by a confined program, and only from the person's own home and environment
(the workspace only *selects* a version among the installs found, through `.tool-versions`). Each candidate is a
real install checked by its landmarks (a Python prefix holds its standard library, a Node install `bin/node`, a
Go root `src/runtime`, ...); sandbox/grants.py then keeps those that overlap nothing protected or denied, and
grants them read and execute, never write.

A manager's shims dir (pyenv's, asdf's, mise's, volta's) runs a manager program that reads its own state and
config: rather than granting that, the shims dir on the server's PATH is replaced by the real bin/ of the version
it would select (`Shims`), so `python` runs the install itself.
"""

from __future__ import annotations

import glob
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The variables the detection reads, besides HOME and XDG_DATA_HOME/XDG_CONFIG_HOME: where a manager was told to
# keep its installs.
VARIABLES = ("PYENV_ROOT", "PYENV_VERSION", "UV_PYTHON_INSTALL_DIR", "UV_TOOL_DIR", "PIPX_HOME", "CONDA_EXE",
             "MAMBA_EXE", "MAMBA_ROOT_PREFIX", "ASDF_DATA_DIR", "MISE_DATA_DIR", "NVM_DIR", "FNM_DIR", "VOLTA_HOME",
             "RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "CARGO_HOME", "GOROOT", "GOPATH", "GOMODCACHE", "HOMEBREW_PREFIX",
             "SDKMAN_DIR")  # fmt: skip
MAX_INSTALLS = 64  # versions of one manager looked at: start-up stays cheap
MAX_FILE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Shims:
    """A manager's shims dir (its real path), the real bin dirs that stand for it on PATH, and whether the dir is
    kept after them (~/.cargo/bin holds installed programs besides rustup's proxies)."""

    dir: Path
    bins: tuple[Path, ...]
    manager: str
    keep: bool = False


@dataclass
class Found:
    """Installs found (real path, the manager) before they are checked against what is protected; shims dirs;
    the caches shared read-only with the private ones (role, real path)."""

    installs: list[tuple[Path, str]] = field(default_factory=list)
    shims: list[Shims] = field(default_factory=list)
    shared: list[tuple[str, Path]] = field(default_factory=list)

    def add(self, path: Path, manager: str) -> None:
        real = Path(os.path.realpath(path))
        if all(real != known for known, _ in self.installs):
            self.installs.append((real, manager))


def _is_file(path: Path) -> bool:
    """`path.is_file()`, False where a directory on the way may not be searched (a non-root server's PATH may
    name /root/...: pathlib raises PermissionError there, and one unreadable entry must not stop detection)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _is_dir(path: Path) -> bool:
    """`path.is_dir()`, False where a directory on the way may not be searched (as `_is_file`)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _children(root: Path) -> list[Path]:
    try:
        names = sorted(e.name for e in os.scandir(root) if e.is_dir())
    except OSError:
        return []
    return [root / name for name in names[:MAX_INSTALLS]]


def _read(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def python_prefix(path: Path) -> bool:
    """A Python install: an interpreter in bin/ and its standard library (a venv has no os.py of its own)."""
    escaped = glob.escape(str(path))
    return bool(glob.glob(escaped + "/bin/python3*")) and bool(glob.glob(escaped + "/lib/python3*/os.py"))


def _node(path: Path) -> bool:
    return _is_file(path / "bin" / "node")


def _has_bin(path: Path) -> bool:
    return _is_dir(path / "bin")


def _go_root(path: Path) -> bool:
    return _is_file(path / "bin" / "go") and _is_dir(path / "src" / "runtime")


def _best(installs: list[Path], wanted: str) -> Path | None:
    """The install named `wanted`, or the newest whose name starts with `wanted.` (a fuzzy `22` or `3.11`)."""
    wanted = wanted.removeprefix("v")
    exact = [p for p in installs if p.name.removeprefix("v") == wanted]
    if exact:
        return exact[0]
    loose = [p for p in installs if p.name.removeprefix("v").startswith(wanted + ".")]
    return max(loose, key=lambda p: [int(x) if x.isdigit() else 0 for x in p.name.lstrip("v").split(".")], default=None)


def _tool_versions(workspace: Path, home: Path) -> dict[str, str]:
    """`.tool-versions` (asdf's, which mise reads too): the workspace's first, then the home's; first version."""
    chosen: dict[str, str] = {}
    for where in (home, workspace):
        for line in _read(where / ".tool-versions").splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 2:
                chosen[words[0]] = words[1]
    return chosen


def _mise_tools(workspace: Path, home: Path, config: Path) -> dict[str, str]:
    chosen = _tool_versions(workspace, home)
    for path in (config / "mise" / "config.toml", workspace / ".mise.toml", workspace / "mise.toml"):
        try:
            tools = tomllib.loads(_read(path)).get("tools", {})
        except tomllib.TOMLDecodeError:
            continue
        chosen.update({k: v for k, v in tools.items() if isinstance(v, str)} if isinstance(tools, dict) else {})
    return chosen


def _versioned(found: Found, root: Path, manager: str, chosen: Mapping[str, str]) -> None:
    """asdf and mise: `installs/<tool>/<version>`, and the shims replaced by the chosen versions' bins."""
    bins: list[Path] = []
    for tool in _children(root / "installs"):
        versions = [v for v in _children(tool) if _has_bin(v)]
        for version in versions:
            found.add(version, manager)
        pick = _best(versions, chosen[tool.name]) if tool.name in chosen else None
        if pick is not None:
            bins.append(Path(os.path.realpath(pick / "bin")))
    if _is_dir(root / "shims"):
        found.shims.append(Shims(Path(os.path.realpath(root / "shims")), tuple(bins), manager))


def _pyenv(found: Found, home: Path, environ: Mapping[str, str]) -> None:
    root = Path(environ.get("PYENV_ROOT") or home / ".pyenv")
    versions = [v for v in _children(root / "versions") if python_prefix(v)]
    for version in versions:
        found.add(version, "pyenv")
    chosen = (environ.get("PYENV_VERSION") or _read(root / "version")).replace(":", " ").split()
    picks = [_best(versions, name) for name in chosen if name != "system"]
    if _is_dir(root / "shims"):
        bins = tuple(Path(os.path.realpath(p / "bin")) for p in picks if p is not None)
        found.shims.append(Shims(Path(os.path.realpath(root / "shims")), bins, "pyenv"))


def _node_managers(found: Found, home: Path, environ: Mapping[str, str], data: Path) -> None:
    for version in _children(Path(environ.get("NVM_DIR") or home / ".nvm") / "versions" / "node"):
        if _node(version):
            found.add(version, "nvm")
    for root in (Path(environ["FNM_DIR"]) if environ.get("FNM_DIR") else data / "fnm", home / ".fnm"):
        for version in _children(root / "node-versions"):
            if _node(version / "installation"):
                found.add(version / "installation", "fnm")
    volta = Path(environ.get("VOLTA_HOME") or home / ".volta")
    images = {tool.name: [v for v in _children(tool) if _has_bin(v)] for tool in _children(volta / "tools" / "image")}
    for versions in images.values():
        for version in versions:
            found.add(version, "volta")
    if _is_dir(volta / "bin"):
        try:
            platform = json.loads(_read(volta / "tools" / "user" / "platform.json") or "{}").get("node", {})
        except ValueError:
            platform = {}
        picks = [("node", platform.get("runtime")), ("npm", platform.get("npm")), ("yarn", platform.get("yarn"))]
        bins = [_best(images.get(tool, []), str(v)) for tool, v in picks if isinstance(v, str)]
        real = tuple(Path(os.path.realpath(b / "bin")) for b in bins if b is not None)
        found.shims.append(Shims(Path(os.path.realpath(volta / "bin")), real, "volta"))


def _rust(found: Found, home: Path, environ: Mapping[str, str]) -> None:
    rustup = Path(environ.get("RUSTUP_HOME") or home / ".rustup")
    toolchains = [t for t in _children(rustup / "toolchains") if _is_file(t / "bin" / "cargo")]
    for toolchain in toolchains:
        found.add(toolchain, "rustup")
    cargo = Path(environ.get("CARGO_HOME") or home / ".cargo")
    # Never ~/.cargo whole: credentials.toml lives there. Its bin/ (rustup's proxies and installed programs), and
    # the registry and git checkouts a private CARGO_HOME links to, read-only.
    if _is_dir(cargo / "bin"):
        found.add(cargo / "bin", "cargo")
        default = ""
        for line in _read(rustup / "settings.toml").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "default_toolchain":
                default = value.strip().strip('"')
        chosen = environ.get("RUSTUP_TOOLCHAIN") or default
        pick = next((t for t in toolchains if chosen and (t.name == chosen or t.name.startswith(chosen + "-"))), None)
        bins = (Path(os.path.realpath(pick / "bin")),) if pick is not None else ()
        found.shims.append(Shims(Path(os.path.realpath(cargo / "bin")), bins, "rustup", keep=True))
    for role in ("registry", "git"):
        if _is_dir(cargo / role):
            found.add(cargo / role, "cargo")
            found.shared.append((f"cargo-{role}", Path(os.path.realpath(cargo / role))))


def _go(found: Found, home: Path, environ: Mapping[str, str], server_path: str) -> None:
    roots = [Path(environ["GOROOT"])] if environ.get("GOROOT") else []
    roots += _children(home / "sdk") + [Path(os.path.realpath(e)).parent for e in server_path.split(os.pathsep) if e]
    for root in roots:
        if _go_root(root):
            found.add(root, "go")
    gopath = Path(environ.get("GOPATH", "").split(os.pathsep)[0] or home / "go")
    if _is_dir(gopath / "bin"):
        found.add(gopath / "bin", "go")
    modcache = Path(environ.get("GOMODCACHE") or gopath / "pkg" / "mod")
    if _is_dir(modcache / "cache" / "download"):
        found.add(modcache, "go")
        found.shared.append(("go-modcache", Path(os.path.realpath(modcache))))


def _python_managers(found: Found, home: Path, environ: Mapping[str, str], data: Path, own: Path | None) -> None:
    uv = Path(environ.get("UV_PYTHON_INSTALL_DIR") or data / "uv" / "python")
    for install in _children(uv):
        if python_prefix(install):
            found.add(install, "uv")
    pipx = Path(environ.get("PIPX_HOME") or data / "pipx")
    tools = Path(environ.get("UV_TOOL_DIR") or data / "uv" / "tools")
    for venv in [*_children(pipx / "venvs"), *_children(tools)]:
        if _is_file(venv / "pyvenv.cfg") and (own is None or os.path.realpath(venv) != str(own)):
            found.add(venv, "pipx" if venv.parent.parent == pipx else "uv")
    roots = [Path(exe).parent.parent for exe in (environ.get("CONDA_EXE"), environ.get("MAMBA_EXE")) if exe]
    roots += [Path(environ["MAMBA_ROOT_PREFIX"])] if environ.get("MAMBA_ROOT_PREFIX") else []
    roots += [home / name for name in ("miniconda3", "anaconda3", "miniforge3", "mambaforge", "micromamba")]
    roots += [Path("/opt/conda"), Path("/opt/miniconda3"), Path("/opt/miniforge3")]
    for root in roots:
        if _is_dir(root / "conda-meta"):
            found.add(root, "conda")


def _elsewhere(found: Found, home: Path, environ: Mapping[str, str]) -> None:
    prefixes = [environ.get("HOMEBREW_PREFIX", ""), "/home/linuxbrew/.linuxbrew", str(home / ".linuxbrew")]
    for prefix in (Path(p) for p in prefixes if p):
        if _is_file(prefix / "bin" / "brew") and _is_dir(prefix / "Cellar"):
            found.add(prefix, "homebrew")
    sdkman = Path(environ.get("SDKMAN_DIR") or home / ".sdkman")
    if _is_dir(sdkman / "candidates") and _is_file(sdkman / "bin" / "sdkman-init.sh"):
        found.add(sdkman / "candidates", "sdkman")
    if _is_dir(home / ".local" / "bin"):
        found.add(home / ".local" / "bin", "~/.local/bin")  # pipx's, uv's and pip --user's entry points


def detect(
    home: Path, environ: Mapping[str, str], workspace: Path, server_path: str, *, own: Path | None = None
) -> Found:
    """Every install of the usual managers under `home` (and where their variables point), unchecked. `own` is
    the server's own virtualenv, which is never among them."""
    found = Found()
    data = Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    config = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    _pyenv(found, home, environ)
    _python_managers(found, home, environ, data, own)
    asdf = Path(environ.get("ASDF_DATA_DIR") or home / ".asdf")
    _versioned(found, asdf, "asdf", _tool_versions(workspace, home))
    _versioned(found, Path(environ.get("MISE_DATA_DIR") or data / "mise"), "mise", _mise_tools(workspace, home, config))
    _node_managers(found, home, environ, data)
    _rust(found, home, environ)
    _go(found, home, environ, server_path)
    _elsewhere(found, home, environ)
    return found
