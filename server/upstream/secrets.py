"""`${vault:NAME}` in an upstream's env or headers, resolved through the vault when the upstream starts.

The lookup is injected (`SecretLookup`), so this package never holds a vault. A value that is missing stops that
upstream from starting, with a message naming the variable and the command that sets it. A resolved value joins
the process's known secrets (tools/framework/wire/redaction.py): it is removed from every result, error and event the
executor records, from the upstream's stderr and from every log line.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping

from managed_tools.tools.framework.wire.redaction import KNOWN

SecretLookup = Callable[[str], Awaitable[str | None]]
REFERENCE = re.compile(r"\$\{vault:([A-Za-z_][A-Za-z0-9_]*)\}")


class MissingSecret(Exception):
    """A `${vault:NAME}` with no value: the message is safe to show the model."""

    def __init__(self, upstream: str, name: str) -> None:
        super().__init__(
            f"upstream '{upstream}' cannot start: its configuration needs the secret {name}, which has no value. "
            f"A person can set it with `managed-tools secret set {name}`."
        )
        self.name = name


async def no_vault(name: str) -> str | None:
    """The lookup when no vault is wired: every reference is missing."""
    return None


async def resolve(upstream: str, values: Mapping[str, str], lookup: SecretLookup) -> tuple[dict[str, str], set[str]]:
    """`values` with every `${vault:NAME}` replaced, and the secrets used (known from now on: never shown)."""
    found: dict[str, str] = {}
    for name in sorted({m for value in values.values() for m in REFERENCE.findall(value)}):
        secret = await lookup(name)
        if secret is None:
            raise MissingSecret(upstream, name)
        found[name] = secret
        KNOWN.add([secret])
    resolved = {key: REFERENCE.sub(lambda m: found[m.group(1)], value) for key, value in values.items()}
    return resolved, set(found.values())
