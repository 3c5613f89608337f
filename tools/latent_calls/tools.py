"""`latent_submit`: the calling model hands back its answer to a latent call (seed 003).

Published only when some latent tool is served. The answer is checked against that tool's output schema and
recorded once as the call's result; a call id is bound to the session that made the call, and another session's
id reads as unknown.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from managed_tools.stores import latent_calls
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions import latent
from managed_tools.tools.framework.definitions.custom import OutputMismatch, check_output
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, JsonObject, WireModel


class SubmitArgs(Arguments):
    call_id: Annotated[str, Field(min_length=1, max_length=64)]
    output: Annotated[JsonObject, Field(description="The tool's output as JSON.")]


class SubmitOutput(WireModel):
    call_id: str
    tool_name: str
    output: dict[str, Any]


async def latent_submit(ctx: ToolContext, args: SubmitArgs) -> SubmitOutput:
    waiting = await latent_calls.waiting(ctx.tx, ctx.session_id, args.call_id)
    definition = ctx.runtime.registry.get(waiting.tool_name)
    if definition is None or definition.ownership != "latent":
        raise ToolError(f"{waiting.tool_name} is no longer served as a latent tool; its call cannot be answered.")
    try:
        output = check_output(definition, args.output)
    except OutputMismatch as exc:
        raise ToolError(
            f"The output for {definition.name} does not match its output schema: {exc}. Nothing was recorded; the "
            f"call still waits for a valid answer."
        ) from None
    await latent_calls.answer(ctx.tx, args.call_id, output)
    return SubmitOutput(call_id=args.call_id, tool_name=definition.name, output=output)


DEFINITIONS = (
    ToolDefinition(
        name=latent.SUBMIT_TOOL,
        title="Answer a latent call",
        description="Hand back your result for a latent tool call (its callId); checked against its output schema.",
        input_model=SubmitArgs,
        output_model=SubmitOutput,
        handler=latent_submit,
        read_only=False,
        effects=("session_write",),
        examples=(
            ToolExample(
                description="Answer a handed-back call",
                input={"callId": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "output": '{"summary": "Three risks."}'},
            ),
        ),
    ),
)
