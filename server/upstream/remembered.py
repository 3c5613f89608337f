"""Each upstream's last listed tools, kept in the data dir so that start-up can publish them at once.

Start-up no longer waits for a slow upstream (one that hung at initialize held every start-up 21 s): its
remembered tools are published at start and answer that it is starting until it lists them itself. One file per
upstream, `<data dir>/upstreams/<name>.json`, 0600 in a 0700 directory, written atomically after each listing that
changed it. It holds a hash of the spec (command, args, env NAMES, readPaths; url, header NAMES; never a value, so
a rotated secret keeps the cache and no secret is in the file) and is used only while the spec hashes the same.
The data dir is in no mount: neither the upstream nor the tools can write it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

import mcp_types as types
from pydantic import BaseModel, ValidationError

from managed_tools.server.config.upstream_spec import HttpUpstream, StdioUpstream
from managed_tools.server.upstream.log_repeats import limited
from managed_tools.tools.framework.wire.redaction import scrub

log = limited("managed_tools.upstream")
MAX_FILE_BYTES = 8 << 20


def upstream_cache(data_dir: Path) -> Path:
    """Where the upstreams' last listed tools are kept."""
    return data_dir / "upstreams"


class Remembered(BaseModel):
    """What one file holds: the spec's hash and the tools the upstream listed."""

    spec: str
    tools: list[types.Tool]


def spec_hash(spec: StdioUpstream | HttpUpstream) -> str:
    """What identifies the upstream, without a value that may be secret: env and header values are left out."""
    if isinstance(spec, StdioUpstream):
        named: dict[str, object] = {"command": spec.command, "args": list(spec.args), "env": sorted(spec.env),
                                    "readPaths": [str(p) for p in spec.read_paths]}  # fmt: skip
    else:
        named = {"url": spec.url, "headers": sorted(spec.headers)}
    return hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()


class ToolMemory:
    """One upstream's file: read once at start, written after a listing that differs from what it holds."""

    def __init__(self, directory: Path, name: str, spec: StdioUpstream | HttpUpstream) -> None:
        self._directory = directory
        self._path = directory / f"{name}.json"
        self._hash = spec_hash(spec)
        self._held: list[types.Tool] | None = None

    def recall(self) -> list[types.Tool] | None:
        """The tools last listed under this spec, or None (no file, another spec, unreadable: said in the log)."""
        try:
            with self._path.open("rb") as file:
                raw = file.read(MAX_FILE_BYTES + 1)
            if len(raw) > MAX_FILE_BYTES:
                raise ValueError(f"over {MAX_FILE_BYTES} bytes")
            remembered = Remembered.model_validate_json(raw)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, ValidationError) as exc:
            log.warning("upstream tools cache %s is not used: %s", self._path.name, str(exc).splitlines()[0][:200])
            return None
        if remembered.spec != self._hash:
            return None
        self._held = remembered.tools
        return remembered.tools

    def keep(self, tools: list[types.Tool]) -> None:
        """Write `tools` (scrubbed of every known secret) in place of the file, atomically; a failure is logged."""
        if tools == self._held:
            return
        listed = scrub([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools])
        text = json.dumps({"spec": self._hash, "tools": listed}, separators=(",", ":"))
        try:
            self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(prefix=f".{self._path.name}.", suffix=".tmp", dir=self._directory)
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as file:  # mkstemp makes it 0600
                    file.write(text)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temp, self._path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise
        except OSError as exc:
            log.warning("upstream tools cache %s not written: %s", self._path.name, exc.strerror or exc)
            return
        self._held = tools
