"""Test-only extension (`--tools-module probe_extension`): a rendered tool, a tool that logs to the client, a
custom tool with a multi-select form, and resources and prompts."""

from __future__ import annotations

from managed_tools.server.runtime.extensions import Prompt, PromptArgument, PromptMessage, Resource, ResourceTemplate
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.ports import LogLevel
from managed_tools.tools.framework.definitions.custom import CustomToolSpec, custom_tool
from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.content import ImageBlock, ResourceBlock, TextBlock
from managed_tools.tools.framework.wire.models import NoArguments, WireModel

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="


class Picture(WireModel):
    caption: str
    png: str


async def picture(ctx: ToolContext, _: NoArguments) -> Picture:
    return Picture(caption="one pixel", png=PIXEL)


def show_picture(output: Picture) -> list[ImageBlock | TextBlock | ResourceBlock]:
    return [
        TextBlock(text=output.caption),
        ImageBlock(data=output.png, mime_type="image/png"),
        ResourceBlock(uri="probe://caption", mime_type="text/plain", text=output.caption),
    ]


class Said(WireModel):
    said: int


LOGS: tuple[tuple[LogLevel, str], ...] = (("debug", "looking"), ("info", "working"), ("warning", "careful"))


async def chatty(ctx: ToolContext, _: NoArguments) -> Said:
    for level, message in LOGS:
        await ctx.ports.client_log.log(level, message)
    return Said(said=len(LOGS))


async def static_text() -> str:
    return "Plain text."


async def static_bytes() -> bytes:
    return b"\x00\x01binary"


async def note(variables: dict[str, str]) -> str:
    return f"Note {variables['id']}"


async def broken() -> str:
    raise RuntimeError("secret detail that must stay in the server log")


async def greet(arguments: dict[str, str]) -> list[PromptMessage]:
    return [
        PromptMessage(role="user", content=TextBlock(text=f"Hello {arguments['name']}")),
        PromptMessage(role="user", content=ImageBlock(data=PIXEL, mime_type="image/png")),
    ]


TOOLS = (
    ToolDefinition(
        name="probe_picture",
        title="Probe picture",
        description="Test tool: output rendered as text, an image and an embedded resource.",
        input_model=NoArguments,
        output_model=Picture,
        handler=picture,
        render=show_picture,
    ),
    ToolDefinition(
        name="probe_chatty",
        title="Probe chatty",
        description="Test tool: logs to the client at three levels.",
        input_model=NoArguments,
        output_model=Said,
        handler=chatty,
    ),
    custom_tool(
        CustomToolSpec(
            name="probe_pick",
            description="Test tool: a person picks several colours.",
            input_schema={
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "colours": {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}},
                    "size": {"type": "string", "enum": ["s", "m"], "enumNames": ["Small", "Medium"]},
                    "finish": {
                        "type": "array",
                        "title": "Finish",
                        "items": {"anyOf": [{"const": "matt", "title": "Matt"}, {"const": "gloss", "title": "Gloss"}]},
                    },
                },
                "required": ["colours"],
            },
        )
    ),
)
RESOURCES = (
    Resource(uri="probe://text", name="text", description="A text resource.", read=static_text),
    Resource(
        uri="probe://bytes",
        name="bytes",
        description="A binary one.",
        mime_type="application/octet-stream",
        read=static_bytes,
    ),
    Resource(uri="probe://broken", name="broken", description="Fails when read.", read=broken),
    ResourceTemplate(uri_template="probe://notes/{id}", name="note", description="A note by id.", read=note),
)
PROMPTS = (
    Prompt(
        name="probe_greet",
        description="Greets someone.",
        arguments=(PromptArgument(name="name", description="Who", choices=("Ada", "Alan", "Grace")),),
        render=greet,
    ),
)
