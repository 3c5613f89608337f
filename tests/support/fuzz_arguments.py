"""Schema-driven arguments for every published tool, and a judge of what comes back.

Shared by tests/tools/framework/test_fuzz_tools.py (a short, derandomized budget) and bench/fuzz.py (a long one). Valid
arguments come from `hypothesis-jsonschema` off each tool's input schema; mutations start from such a valid
value and step off the schema: a wrong type, a missing required field, an extra field, a huge string, deep
nesting, a NUL byte, a lone surrogate, and path escapes (`../`, absolute host paths, the data dir itself).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from mcp import Client, MCPError

from managed_tools.server.publishing.publish import ERROR_META_KEY

Args = dict[str, Any]

# A JSON value of every type, for a property's wrong type or an extra field's value.
JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
HUGE_CHARS = (10_000, 300_000, 1_100_000)
NESTING = (50, 200)  # deeper cannot leave the SDK client (pydantic stops at ~250); the frame fuzz goes deeper


def path_escapes(*host_paths: Path) -> list[str]:
    """Path spellings that must never reach past the mounts: the model may type them, nothing may follow them."""
    hosts = [str(path) for path in host_paths]
    return [
        "../../etc/passwd",
        "/etc/passwd",
        "/workspace/../../etc/passwd",
        "/workspace/agent/../../../etc/shadow",
        "/vaults/../etc/passwd",
        "/vaults/nope/x",
        "~/.ssh/id_rsa",
        "/proc/self/environ",
        "file:///etc/passwd",
        "..\\..\\windows\\win.ini",
        "/workspace/a\x00b",
        "/workspace/" + "a/" * 200,
        "/workspace/" + "x" * 300,
        *hosts,
        *(f"{host}/../../etc/passwd" for host in hosts),
        *(f"{host}/state.db" for host in hosts),
    ]


def _drop(value: Args, key: str) -> Args:
    return {k: v for k, v in value.items() if k != key}


def _nest(depth: int) -> Any:
    nested: Any = "deep"
    for level in range(depth):
        nested = [nested] if level % 2 else {"n": nested}
    return nested


@st.composite
def _mutated(draw: st.DrawFn, schema: dict[str, Any], escapes: list[str]) -> Args:
    drawn = draw(from_schema(schema))
    base: Args = dict(drawn) if isinstance(drawn, dict) else {}  # every input schema is an object
    properties = sorted(schema.get("properties", {}))
    key = draw(st.sampled_from(properties)) if properties else draw(st.text(min_size=1, max_size=8))
    kind = draw(
        st.sampled_from(["wrong_type", "missing", "extra", "huge", "nested", "nul", "surrogate", "path", "null"])
    )
    if kind == "wrong_type":
        return {**base, key: draw(JSON_VALUES)}
    if kind == "missing":
        required = schema.get("required", [])
        return _drop(base, draw(st.sampled_from(required))) if required else {}
    if kind == "extra":
        return {**base, draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in properties)): draw(JSON_VALUES)}
    if kind == "huge":
        return {**base, key: "y" * draw(st.sampled_from(HUGE_CHARS))}
    if kind == "nested":
        return {**base, key: _nest(draw(st.sampled_from(NESTING)))}
    if kind == "nul":
        return {**base, key: "a\x00b"}
    if kind == "surrogate":
        return {**base, key: "x\ud800y"}
    if kind == "path":
        return {**base, key: draw(st.sampled_from(escapes))}
    return {**base, key: None}


def strategies(schema: dict[str, Any], escapes: list[str]) -> st.SearchStrategy[Args]:
    """Valid arguments and arguments stepped off the schema, in equal parts."""
    valid = from_schema(schema).map(lambda value: dict(value) if isinstance(value, dict) else {})
    return st.one_of(valid, _mutated(schema, escapes))


def draw_examples(strategy: st.SearchStrategy[Args], count: int, seed: int | None = None) -> list[Args]:
    """`count` values drawn by hypothesis (derandomized without a seed, so CI sees the same ones every run).

    They are collected first and called afterwards: the calls are async, and a failure is reported with its
    exact arguments rather than shrunk."""
    drawn: list[Args] = []

    @settings(
        max_examples=count,
        derandomize=seed is None,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Args) -> None:
        drawn.append(value)

    if seed is not None:
        collect._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]  # hypothesis.seed(), untyped
    collect()
    return drawn


@dataclass
class Verdicts:
    """What a run saw: calls made per outcome, and every call that broke a rule (tool, arguments, why)."""

    calls: int = 0
    successes: int = 0
    errors: int = 0
    failures: list[tuple[str, Args, str]] = field(default_factory=list)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def judge(result: types.CallToolResult, typed: Iterable[str], host_paths: Iterable[Path], data_dir: Path) -> str | None:
    """Why a result breaks the rules, or None: a success, or an isError with a message that names the problem,
    never an internal error, a traceback, or a host path. `typed` holds what the caller itself typed in this
    session (an event log or an error may quote it back)."""
    text = "".join(block.text for block in result.content if isinstance(block, types.TextContent))
    whole = text + json.dumps(result.structured_content or {})
    # The one host path a model is shown: the command a person runs to approve (docs/decisions/permission-pauses.md).
    whole = whole.replace(f"--data-dir {shlex.quote(str(data_dir))}", "--data-dir DATA")
    for quoted in sorted(typed, key=len, reverse=True):
        whole = whole.replace(quoted, "TYPED")
    for path in host_paths:
        if str(path) in whole:
            return f"a host path in the result: {whole[max(0, whole.index(str(path)) - 200) :][:400]!r}"
    if "Traceback" in whole:
        return f"a traceback in the result: {whole[:300]!r}"
    if not result.is_error:
        return None
    kind = (result.meta or {}).get(ERROR_META_KEY, {}).get("kind")
    if kind == "internal" or "failed unexpectedly" in text:
        return f"an internal error: {text[:300]!r}"
    if len(text.strip()) < 10:
        return f"an error that says nothing: {text!r}"
    return None


async def fuzz_catalogue(
    client: Client,
    examples: int,
    *,
    host_paths: list[Path],
    data_dir: Path,
    seed: int | None = None,
    call_seconds: float = 60.0,
    skip: Iterable[str] = (),
) -> Verdicts:
    """Call every published tool with `examples` drawn argument sets; a call that hangs is a failure too."""
    verdicts = Verdicts()
    escapes = path_escapes(*host_paths)
    typed: set[str] = set()
    for tool in (await client.list_tools()).tools:
        if tool.name in skip:
            continue
        for args in draw_examples(strategies(tool.input_schema, escapes), examples, seed):
            verdicts.calls += 1
            typed.update(s for s in _strings(args) if any(str(path) in s for path in host_paths))
            why: str | None
            try:
                with anyio.fail_after(call_seconds):
                    result = await client.call_tool(tool.name, args)
            except TimeoutError:
                why = f"no answer within {call_seconds:g} s"
            except MCPError as exc:
                why = f"a JSON-RPC error instead of a result: {exc}"
            else:
                why = judge(result, typed, host_paths, data_dir)
                verdicts.errors += result.is_error
                verdicts.successes += not result.is_error
            if why is not None:
                verdicts.failures.append((tool.name, args, why))
    return verdicts
