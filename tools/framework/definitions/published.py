"""The built-in tools' schemas as published, generated into the package so that start-up builds no tool model.

Every tool input and output is a `WireModel` with `defer_build=True` (tools/framework/wire/models.py): importing a tool
family creates its classes without pydantic's validators and serializers, which are built when a call first uses
them. What tools/list and the setup contract need of the models, their JSON schemas, is read from `published.json`
beside this module: each built-in model's input or output schema as `definition.py` builds it, keyed by the
model's `module:qualname`. docs/decisions/published-catalogue.md says why.

The file is only ever read from the installed package, never from a workspace or mount, and only while it is
current: it records a digest of the sources a schema can depend on (every module of `tools/` and `stores/` but the
database engines, and the pydantic version). After an edit that was not regenerated, the digest differs and every
schema is built live, as before; tests/tools/framework/test_published_catalogue.py fails in CI until it is regenerated
with

    PYTHONPATH=. python -m tests.support.snapshot_tools --update
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import pydantic

from managed_tools.tools.framework.definitions.schemas import built_input_schema, built_output_schema
from managed_tools.tools.framework.wire.models import Arguments, WireModel

PUBLISHED = Path(__file__).with_name("published.json")
PACKAGE = Path(__file__).resolve().parents[3]  # the directory holding tools/ and stores/
SOURCES = ("tools", "stores")
# Not the database engines: tools import only Tx, Database and NoTransaction from them, no type a schema can hold;
# left out, a change to them (frequent) does not stale the file.
NOT_SOURCES = frozenset({"stores/db"})
Kind = Literal["input", "output"]


class Published(Protocol):
    """What the file records of a tool (definition.py's `ToolDefinition`, which reads the file back)."""

    @property
    def input_model(self) -> type[Arguments]: ...

    @property
    def output_model(self) -> type[WireModel]: ...


def model_key(model: type) -> str:
    return f"{model.__module__}:{model.__qualname__}"


def sources_digest() -> str:
    """sha256 over the sources a built-in schema depends on, and the pydantic version that builds it (~4 ms). Named
    `sha256:`: a bare 64-digit hex string in a JSON file is what a secret scanner takes for a key."""
    digest = hashlib.sha256(pydantic.VERSION.encode())
    for source in SOURCES:
        for root, dirs, files in os.walk(PACKAGE / source):
            dirs[:] = sorted(d for d in dirs if Path(root, d).relative_to(PACKAGE).as_posix() not in NOT_SOURCES)
            for name in sorted(files):
                if name.endswith(".py"):
                    path = Path(root, name)
                    digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0")
                    digest.update(path.read_bytes())
    return f"sha256:{digest.hexdigest()}"


@functools.cache
def _published() -> dict[str, Any] | None:
    """The published file, or None when it is missing, damaged or not built from these sources."""
    try:
        published = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(published, dict) or published.get("digest") != sources_digest():
        return None
    schemas, tools = published.get("schemas"), published.get("tools")
    if not isinstance(schemas, dict) or not all(isinstance(schemas.get(kind), dict) for kind in ("input", "output")):
        return None
    if not isinstance(tools, list) or not all(isinstance(entry, dict) for entry in tools):
        return None
    return published


def _schemas() -> dict[str, dict[str, Any]] | None:
    published = _published()
    return None if published is None else published["schemas"]


def tools() -> list[dict[str, Any]] | None:
    """The families' tools as recorded (tools/framework/definitions/described.py), in publishing order, or None
    when the file is not current."""
    published = _published()
    return None if published is None else published["tools"]


def schema_of(kind: Kind, key: str) -> dict[str, Any] | None:
    """The published schema of the model named `key` (`module:qualname`), for a tool the file itself describes;
    None when the file is not current (any more: a test replaces it) or lacks it."""
    schemas = _schemas()
    found: dict[str, Any] | None = None if schemas is None else schemas[kind].get(key)
    return found


def current() -> bool:
    """Is the published file there and built from these sources?"""
    return _schemas() is not None


def schema(kind: Kind, model: type) -> dict[str, Any] | None:
    """The published schema of this model, or None: not a built-in model (a custom tool's, a test's), or the file
    is not current. A model is the published one only if it is the class its module defines under that name."""
    schemas = _schemas()
    found = None if schemas is None else schemas[kind].get(model_key(model))
    if found is None:
        return None
    owner: Any = sys.modules.get(model.__module__)
    for part in model.__qualname__.split("."):
        owner = getattr(owner, part, None)
    return found if owner is model else None


def build(definitions: Sequence[Published], tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The file's content for these definitions, every schema built live from its model, and the families' `tools`
    as described.py records them."""
    inputs = {model_key(d.input_model): built_input_schema(d.input_model) for d in definitions}
    outputs = {model_key(d.output_model): built_output_schema(d.output_model) for d in definitions}
    return {
        "digest": sources_digest(),
        "schemas": {"input": dict(sorted(inputs.items())), "output": dict(sorted(outputs.items()))},
        "tools": list(tools),
    }


def render(definitions: Sequence[Published], tools: Sequence[dict[str, Any]]) -> str:
    """The file as written: one key a line, so a regenerated file diffs by what changed."""
    return json.dumps(build(definitions, tools), indent=1, ensure_ascii=False) + "\n"
