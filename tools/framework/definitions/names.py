"""The names a tool selection may use, importing nothing, so that a typo in `--preset` or `--toolsets` is refused
before the catalogue loads (seconds on a slow machine). tests/tools/framework/test_selection_names.py keeps them
equal to toolsets.PRESETS and catalogue.FAMILIES."""

from __future__ import annotations

from collections.abc import Sequence
from difflib import get_close_matches

PRESET_NAMES = ("coding", "memory", "full")
FAMILY_NAMES = (
    "environment", "sessions", "outcomes", "memory", "recall", "planning", "skills", "files", "sandbox", "substrate",
    "shell", "permissions",
)  # fmt: skip
USER_TOOLSETS = ("custom", "extensions", "mcp")
ALL = "all"


def did_you_mean(name: str, valid: Sequence[str]) -> str:
    """` (did you mean 'x'?)` for the closest valid name, or nothing when none is close."""
    near = get_close_matches(name, valid, n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def unknown(kind: str, given: Sequence[str], valid: Sequence[str]) -> str | None:
    """The sentence refusing the names of `given` that are not `valid`, or None when all are."""
    missing = [name for name in dict.fromkeys(given) if name not in valid]
    if not missing:
        return None
    named = ", ".join(f"{name!r}{did_you_mean(name, valid)}" for name in missing)
    return f"Unknown {kind} {named}; the {kind}s are: {', '.join(valid)}."


def unknown_selection(preset: str | None, toolsets: Sequence[str]) -> str | None:
    """A preset or built-in toolset name that no catalogue has (checked again, with upstreams, once it loads)."""
    return unknown("preset", (preset,) if preset else (), PRESET_NAMES) or unknown(
        "toolset", toolsets, (*FAMILY_NAMES, *USER_TOOLSETS, ALL)
    )
