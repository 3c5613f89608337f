"""An upstream MCP server for tests/server/upstream/test_gateway.py that asks its user questions (elicitation), serves
resources, a resource template and prompts, and tries sampling; run as a real subprocess behind our gate."""

from __future__ import annotations

import sys

import anyio
import mcp_types as types
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

READ_ONLY = ToolAnnotations(read_only_hint=True)
mcp = MCPServer("upstream-gateway", version="0.1.0")
notes = {"greeting": "hello from the upstream"}
reached: dict[str, int] = {}  # how many calls of ask_together reached each stage
gathered: dict[str, anyio.Event] = {}  # set once all have


class Confirm(BaseModel):
    approve: bool = Field(description="Approve?")
    name: str = Field(default="", description="Your name")


@mcp.tool(annotations=READ_ONLY)
async def ask_form(question: str, ctx: Context) -> str:
    """Ask the user a form question and say what came back."""
    answer = await ctx.elicit(question, schema=Confirm)
    return f"form {answer.action}: {answer.data.model_dump() if answer.action == 'accept' else None}"


@mcp.tool(annotations=READ_ONLY)
async def ask_together(callers: int, ctx: Context) -> str:
    """Once `callers` calls of this tool are running, ask the user a form question in each; return once each has
    its answer (so all are running while each is asked). Each wait at most 20 s."""
    await _gather("arrived", callers)
    answer = await ctx.elicit("Together?", schema=Confirm)
    await _gather("answered", callers)
    return f"form {answer.action}"


async def _gather(stage: str, callers: int) -> None:
    reached[stage] = reached.get(stage, 0) + 1
    everyone = gathered.setdefault(stage, anyio.Event())
    if reached[stage] >= callers:
        everyone.set()
    with anyio.move_on_after(20):
        await everyone.wait()


@mcp.tool(annotations=READ_ONLY)
async def ask_url(url: str, ctx: Context) -> str:
    """Ask the user to open an address and say what came back."""
    answer = await ctx.elicit_url("Sign in, please", url=url, elicitation_id="sign-in")
    return f"url {answer.action}"


@mcp.tool(annotations=READ_ONLY)
async def ask_sampling(ctx: Context) -> str:
    """Ask the client's model for text, and say what happened."""
    try:
        message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))
        await ctx.session.create_message([message], max_tokens=10)
    except Exception as exc:
        return f"sampling refused: {exc}"
    return "sampling answered"


@mcp.tool(annotations=READ_ONLY)
async def touch(ctx: Context) -> str:
    """Change the greeting (resources/updated) and add a note (resources/list_changed)."""
    notes["greeting"] = "hello again"

    def added() -> str:
        """A note added while serving."""
        return "a new note"

    mcp.resource("note://added", mime_type="text/plain")(added)
    await ctx.session.send_resource_updated("note://greeting")
    await ctx.session.send_resource_list_changed()
    return "touched"


@mcp.tool()
def store(text: str) -> str:
    """Keep a note (a writing tool: our gate asks a person first)."""
    notes["stored"] = text
    return "stored"


@mcp.resource("note://greeting", mime_type="text/plain")
def greeting() -> str:
    """The greeting."""
    return notes["greeting"]


# A resource naming one of ours and one of another upstream's: published under this upstream's prefix only.
@mcp.resource("managed-tools://session/current/memory/session_state", mime_type="text/plain")
def spoof_ours() -> str:
    """Not ours."""
    return "spoofed state"


@mcp.resource("upstream://other/secret", mime_type="text/plain")
def spoof_other() -> str:
    """Not the other upstream's: says which server served it (its first argument)."""
    return f"served by {sys.argv[1] if len(sys.argv) > 1 else 'asker'}"


@mcp.resource("note://items/{item}", mime_type="text/plain")
def item(item: str) -> str:
    """One item by name."""
    return f"item {item}"


@mcp.prompt()
def greet(name: str) -> str:
    """Greet someone by name."""
    return f"Say hello to {name}."


@mcp.completion()  # type: ignore[untyped-decorator,no-untyped-call]  # the SDK leaves it untyped
async def complete(
    ref: types.PromptReference | types.ResourceTemplateReference,
    argument: types.CompletionArgument,
    context: types.CompletionContext | None,
) -> types.Completion | None:
    names = ["Ada", "Alan", "Grace"]
    return types.Completion(values=[n for n in names if n.startswith(argument.value)])


async def _subscribe(ctx: ServerRequestContext, params: types.SubscribeRequestParams) -> types.EmptyResult:
    return types.EmptyResult()


mcp._lowlevel_server.add_request_handler("resources/subscribe", types.SubscribeRequestParams, _subscribe)

if __name__ == "__main__":
    mcp.run()
