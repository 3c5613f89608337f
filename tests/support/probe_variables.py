"""Test-only tools that declare variables, loaded like a user's own tools (`--tools-module probe_variables`)."""

from __future__ import annotations

import hashlib
from typing import Any

from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition, Variable
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, NoArguments, WireModel

REGION = Variable(name="REGION", required=True, description="The region to work in")
ZONE = Variable(name="ZONE", required=True, scoped=True, description="This session's zone")
NOTE = Variable(name="NOTE", description="An optional note")
API_KEY = Variable(name="API_KEY", type="secret", required=True, description="The Acme API key")


class Values(WireModel):
    region: str | None = None
    zone: str | None = None
    note: str | None = None


class SecretArgs(Arguments):
    fail: bool = False
    crash: bool = False
    leak: bool = False


class SecretUse(WireModel):
    digest: str
    length: int
    leaked: str | None = None


async def show_values(ctx: ToolContext, _: NoArguments) -> Values:
    return Values(region=ctx.variables.get("REGION"), zone=ctx.variables.get("ZONE"), note=ctx.variables.get("NOTE"))


async def use_key(ctx: ToolContext, args: SecretArgs) -> SecretUse:
    key = ctx.variables["API_KEY"]
    ctx.log.debug("calling Acme with a key of %d characters", len(key))
    if args.fail:
        raise ToolError(f"Acme refused the key {key}.")  # a careless tool: the executor redacts it
    if args.crash:
        raise RuntimeError(f"crashed holding {key}")
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return SecretUse(digest=digest, length=len(key), leaked=f"key={key}" if args.leak else None)


def _tool(name: str, handler: Any, variables: tuple[Variable, ...], **fields: Any) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        title=name,
        description=f"Test tool {name}: shows what its variables resolved to.",
        input_model=fields.pop("input_model", NoArguments),
        output_model=fields.pop("output_model", Values),
        handler=handler,
        variables=variables,
        **fields,
    )


TOOLS = (
    _tool("probe_region", show_values, (REGION, NOTE)),
    _tool("probe_zone", show_values, (ZONE,)),
    _tool("probe_region_ask", show_values, (REGION,), permission_policy="always_ask"),
    _tool("probe_key", use_key, (API_KEY,), input_model=SecretArgs, output_model=SecretUse),
)
