"""`managed-tools where`: where a workspace's state, configuration, caches, vault key and skills live.

Paths only, and whether each exists: nothing is created, no key is read, and neither the catalogue nor the MCP
SDK loads (it answers as fast as the approval commands). A config file that does not parse is reported, not fatal:
this is the command to run when something is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from managed_tools.server.config.config_files import ConfigFiles, user_config_file
from managed_tools.server.config.data_dir import ConfigError, skill_dirs, state_root, vault_key_file
from managed_tools.server.config.rules import VAULT_KEY_ENV
from managed_tools.server.config.state_place import StatePlace


def run(args: argparse.Namespace) -> int:
    """Exits 1 when the workspace is not a directory (a mistyped --workspace), after saying where it would be."""
    report = where(StatePlace.of(args), agent=args.agent)
    print(json.dumps(report, indent=2) if args.json else _text(report))
    return 0 if report["workspaceExists"] else 1


def where(place: StatePlace, *, agent: str) -> dict[str, Any]:
    """Everything as one document (`--json` prints it as is)."""
    problem, config = None, None
    try:
        config = place.config_files()
    except ConfigError as exc:
        problem = str(exc)
    merged = config.merged if config else {}
    configured = merged.get("skills", {}).get("directories") if isinstance(merged.get("skills"), dict) else None
    substrate = place.data_dir / "agents" / agent / "substrate"
    skills = skill_dirs(
        place.workspace,
        substrate,
        tuple((place.data_dir / Path(p).expanduser()).resolve() for p in configured) if configured else None,
        (),
    )
    return {
        "workspace": place.workspace.as_posix(),
        "workspaceExists": place.workspace.is_dir(),
        "dataDir": _path(place.data_dir),
        "dataDirs": state_root().as_posix(),
        "config": _path(config.workspace_file if config else place.data_dir / "config.json"),
        "userConfig": _path(config.user_file if config else user_config_file()),
        "configProblem": problem,
        "state": _state(place),
        "attachments": _path(place.data_dir / "attachments"),
        "caches": _caches(),
        "vaultKey": _vault_key(place, config),
        "skills": [{"kind": kind, **_path(root / below if below else root)} for kind, root, below, _ in skills],
        "sandbox": _sandbox(),
    }


def _sandbox() -> list[dict[str, Any]]:
    """Each layer a spawned program would run under on this system, probed (sandbox/layers.py), and why one is
    missing; never a layer that nothing checked."""
    from managed_tools.sandbox import layers

    return [
        {"layer": layer.name, "inForce": layer.in_force, "blocks": layer.blocks, "detail": layer.detail}
        for layer in layers.describe()
    ]


def _path(path: Path) -> dict[str, Any]:
    return {"path": path.as_posix(), "exists": path.exists()}


def _state(place: StatePlace) -> dict[str, Any]:
    if place.database is not None:
        from managed_tools.stores.db import redacted

        return {"engine": "postgresql", "url": redacted(place.database)}
    return {"engine": "sqlite", **_path(place.state_path)}


def _caches() -> dict[str, Any]:
    """The compiled launcher (sandbox/launcher.py builds it on first need, named by a hash of what it is built from)."""
    from managed_tools.sandbox.launcher import cache_root

    root = cache_root()
    built = sorted(p.as_posix() for p in root.glob("launcher-*")) if root.is_dir() else []
    return {"dir": root.as_posix(), "exists": root.is_dir(), "launchers": built}


def _vault_key(place: StatePlace, config: ConfigFiles | None) -> dict[str, Any]:
    """Which key the vault uses, in the order the server looks (server/config/request_state_keys.py,
    server/runtime/secrets.py)."""
    shared = config.merged.get("vaultKey") if config else None
    if isinstance(shared, dict):
        source = f"${shared['env']}" if "env" in shared else f"the file {shared.get('file')}"
        return {"kind": "shared", "where": f"config.json vaultKey: {source}"}
    if os.environ.get(VAULT_KEY_ENV):
        return {"kind": "shared", "where": f"${VAULT_KEY_ENV}"}
    file = vault_key_file(place.data_dir)
    return {"kind": "own", "keyring": _keyring_backend(), "file": _path(file)}


def _keyring_backend() -> str | None:
    """The OS keyring backend the key is kept in, or None when there is none (then the key file is used)."""
    import keyring
    from keyring.backends import fail

    try:
        backend = keyring.get_keyring()
    except Exception:  # a misconfigured keyring is no keyring, as stores/vault_key.py decides
        return None
    usable = not isinstance(backend, fail.Keyring) and getattr(backend, "priority", 0) > 0
    return f"{type(backend).__module__}.{type(backend).__name__}" if usable else None


def _text(report: dict[str, Any]) -> str:
    def line(label: str, entry: dict[str, Any], note: str = "") -> str:
        notes = [said for said in (note, "" if entry["exists"] else "not there yet") if said]
        return f"{label:<15} {entry['path']}" + (f"  ({'; '.join(notes)})" if notes else "")

    state = report["state"]
    stored = line("state database", state) if state["engine"] == "sqlite" else f"{'state database':<15} {state['url']}"
    key = report["vaultKey"]
    if key["kind"] == "shared":
        vault = f"{'vault key':<15} shared: {key['where']}"
    elif key["keyring"]:
        vault = f"{'vault key':<15} the OS keyring ({key['keyring']}), else {key['file']['path']}"
    else:
        vault = line("vault key", key["file"], "no OS keyring here")
    caches = report["caches"]
    lines = [
        f"{'workspace':<15} {report['workspace']}" + ("" if report["workspaceExists"] else "  (no such directory)"),
        line("data dir", report["dataDir"]),
        line("config", report["config"], "this workspace's, wins"),
        line("user config", report["userConfig"], "every workspace's"),
        *([f"{'':<15} problem: {report['configProblem']}"] if report["configProblem"] else []),
        stored,
        line("attachments", report["attachments"]),
        f"{'launcher cache':<15} {caches['dir']}" + ("" if caches["launchers"] else "  (not built yet)"),
        vault,
        f"{'skills':<15} " + f"\n{'':<15} ".join(
            f"{s['path']}{'' if s['exists'] else '  (none)'}" for s in report["skills"]
        ),
    ]  # fmt: skip
    lines += ["sandbox layers", *(_layer_line(layer) for layer in report["sandbox"])]
    return "\n".join(lines)


def _layer_line(layer: dict[str, Any]) -> str:
    held = "in force" if layer["inForce"] else "MISSING"
    return f"  {layer['layer']}: {held} ({layer['detail']}); blocks {layer['blocks']}"
