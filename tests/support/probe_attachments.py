"""Test-only tools that attach what they are given, loaded like a user's own (--tools-module)."""

import base64

from managed_tools.tools.framework.context.attachments import AttachmentRef
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, WireModel


class File(Arguments):
    name: str
    mime_type: str
    base64: str


class AttachArgs(Arguments):
    files: list[File]
    fail_after: bool = False


class Attached(WireModel):
    attachments: list[AttachmentRef]


async def attach(ctx: ToolContext, args: AttachArgs) -> Attached:
    refs = [await ctx.attach(base64.b64decode(f.base64), name=f.name, mime_type=f.mime_type) for f in args.files]
    if args.fail_after:
        raise ToolError("failed after attaching")
    return Attached(attachments=refs)


TOOLS = (
    ToolDefinition(
        name="make_files",
        title="Make files",
        description="Test tool: attaches the files it is given.",
        input_model=AttachArgs,
        output_model=Attached,
        handler=attach,
        read_only=False,
        effects=("session_write",),
    ),
    ToolDefinition(
        name="show_files",
        title="Show files",
        description="Test tool: a read-only tool that attaches files.",
        input_model=AttachArgs,
        output_model=Attached,
        handler=attach,
    ),
)
