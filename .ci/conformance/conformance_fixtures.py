"""The fixtures the MCP conformance suite's server scenarios call, published through the public extension point
exactly as a user's own module would be (`managed-tools serve --tools-module conformance_fixtures`).

Not part of the managed catalogue: .ci/run loads it for the conformance run only. Names, arguments and
answers follow the suite's scenario descriptions (`conformance list --server`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

import anyio

from managed_tools.server.runtime.extensions import Prompt, PromptArgument, PromptMessage, Resource, ResourceTemplate
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.definitions.custom import CustomToolSpec, custom_tool
from managed_tools.tools.framework.definitions.definition import Handler, Render, ToolDefinition
from managed_tools.tools.framework.wire.content import AudioBlock, Block, ImageBlock, ResourceBlock, TextBlock
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, NoArguments, WireModel

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
STEP_SECONDS = 0.05


class Text(WireModel):
    text: str


def as_text(output: Text) -> Sequence[Block]:
    return [TextBlock(text=output.text)]


def fixed(name: str, description: str, text: str, render: Render = as_text) -> ToolDefinition:
    """A tool without arguments whose output is always `text`, shown to the model through `render`."""

    async def handler(ctx: ToolContext, _: NoArguments) -> Text:
        return Text(text=text)

    return tool(name, description, handler, NoArguments, render)


def tool(
    name: str, description: str, handler: Handler, input_model: type[Arguments], render: Render = as_text
) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        title=name.replace("_", " ").capitalize(),
        description=description,
        input_model=input_model,
        output_model=Text,
        handler=handler,
        render=render,
    )


def image(_: Text) -> Sequence[Block]:
    return [ImageBlock(data=PNG, mime_type="image/png")]


def audio(_: Text) -> Sequence[Block]:
    return [AudioBlock(data=WAV, mime_type="audio/wav")]


def embedded(output: Text) -> Sequence[Block]:
    return [ResourceBlock(uri="test://embedded-resource", mime_type="text/plain", text=output.text)]


def mixed(output: Text) -> Sequence[Block]:
    return [
        TextBlock(text=output.text),
        ImageBlock(data=PNG, mime_type="image/png"),
        ResourceBlock(
            uri="test://mixed-content-resource", mime_type="application/json", text='{"test":"data","value":123}'
        ),
    ]


async def with_logging(ctx: ToolContext, _: NoArguments) -> Text:
    for step, message in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
        if step:
            await anyio.sleep(STEP_SECONDS)
        await ctx.ports.client_log.log("info", message)
    return Text(text="Tool with logging executed successfully")


async def with_progress(ctx: ToolContext, _: NoArguments) -> Text:
    for step, done in enumerate((0, 50, 100)):
        if step:
            await anyio.sleep(STEP_SECONDS)
        await ctx.ports.progress.report(done, 100, f"Completed step {done} of 100")
    return Text(text="Tool with progress executed successfully")


async def failing(ctx: ToolContext, _: NoArguments) -> Text:
    raise ToolError("This tool intentionally returns an error for testing")


class SamplingArgs(Arguments):
    prompt: str


async def sampling(ctx: ToolContext, args: SamplingArgs) -> Text:
    return Text(text="LLM response: " + await ctx.ports.sampler.sample(args.prompt, max_tokens=100))


def answered(name: str, description: str, output_schema: dict[str, object], **input_schema: object) -> ToolDefinition:
    """A custom tool: calling it asks the person (elicitation, shaped by `output_schema`) for its result."""
    spec = CustomToolSpec(
        name=name,
        description=description,
        input_schema={"type": "object", **input_schema},
        output_schema={"type": "object", **output_schema},
    )
    return custom_tool(spec)


# Listed only: the scenario checks that 2020-12 keywords survive publication (a custom tool's schema is
# published as written).
JSON_SCHEMA_2020_12 = custom_tool(
    CustomToolSpec(
        name="json_schema_2020_12_tool",
        description="Tool with JSON Schema 2020-12 features",
        input_schema={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}
            },
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": False,
        },
        output_schema={"type": "object", "properties": {"accepted": {"type": "boolean"}}},
    )
)

TOOLS = (
    JSON_SCHEMA_2020_12,
    fixed("test_simple_text", "Tests simple text content response", "This is a simple text response for testing."),
    fixed("test_image_content", "Tests image content response", "a 1x1 PNG", image),
    fixed("test_audio_content", "Tests audio content response", "a short WAV", audio),
    fixed(
        "test_embedded_resource",
        "Tests embedded resource content response",
        "This is an embedded resource content.",
        embedded,
    ),
    fixed(
        "test_multiple_content_types",
        "Tests response with multiple content types",
        "Multiple content types test:",
        mixed,
    ),
    tool("test_tool_with_logging", "Tests tool that emits log messages during execution", with_logging, NoArguments),
    tool("test_tool_with_progress", "Tests tool that reports progress notifications", with_progress, NoArguments),
    tool("test_error_handling", "Tests error response handling", failing, NoArguments),
    tool("test_sampling", "Tests server-initiated sampling (LLM completion request)", sampling, SamplingArgs),
    answered(
        "test_elicitation",
        "Tests server-initiated elicitation (user input request)",
        {
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        },
        properties={"message": {"type": "string"}},
        required=["message"],
    ),
    answered(
        "test_elicitation_sep1034_defaults",
        "Tests elicitation with default values for all primitive types (SEP-1034)",
        {
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {
                    "type": "string",
                    "description": "User status",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active",
                },
                "verified": {"type": "boolean", "description": "Verification status", "default": True},
            },
        },
    ),
    answered(
        "test_elicitation_sep1330_enums",
        "Tests elicitation with enum schema variations (SEP-1330)",
        {
            "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {
                    "type": "string",
                    "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"},
                    ],
                },
                "legacyEnum": {
                    "type": "string",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"],
                },
                "untitledMulti": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
                },
                "titledMulti": {
                    "type": "array",
                    "items": {
                        "anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"},
                        ]
                    },
                },
            },
        },
    ),
)


async def static_text() -> str:
    return "This is the content of the static text resource."


async def static_binary() -> bytes:
    return base64.b64decode(PNG)


async def watched() -> str:
    return "Watched resource content"


async def template_data(variables: dict[str, str]) -> str:
    item = variables["id"]
    return json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"})


RESOURCES = (
    Resource(uri="test://static-text", name="static-text", description="A static text resource", read=static_text),
    Resource(
        uri="test://static-binary",
        name="static-binary",
        description="A static binary resource (image)",
        mime_type="image/png",
        read=static_binary,
    ),
    Resource(
        uri="test://watched-resource",
        name="watched-resource",
        description="A resource that can be subscribed to",
        read=watched,
    ),
    ResourceTemplate(
        uri_template="test://template/{id}/data",
        name="template",
        description="A resource template with parameter substitution",
        mime_type="application/json",
        read=template_data,
    ),
)


def user(block: Block) -> PromptMessage:
    return PromptMessage(role="user", content=block)


async def simple_prompt(arguments: dict[str, str]) -> list[PromptMessage]:
    return [user(TextBlock(text="This is a simple prompt for testing."))]


async def prompt_with_arguments(arguments: dict[str, str]) -> list[PromptMessage]:
    return [user(TextBlock(text=f"Prompt with arguments: arg1='{arguments['arg1']}', arg2='{arguments['arg2']}'"))]


async def prompt_with_resource(arguments: dict[str, str]) -> list[PromptMessage]:
    resource = ResourceBlock(
        uri=arguments["resourceUri"], mime_type="text/plain", text="Embedded resource content for testing."
    )
    return [user(resource), user(TextBlock(text="Please process the embedded resource above."))]


async def prompt_with_image(arguments: dict[str, str]) -> list[PromptMessage]:
    return [user(ImageBlock(data=PNG, mime_type="image/png")), user(TextBlock(text="Please analyze the image above."))]


PROMPTS = (
    Prompt(name="test_simple_prompt", description="A simple prompt without arguments", render=simple_prompt),
    Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with required arguments",
        arguments=(
            PromptArgument(name="arg1", description="First test argument"),
            PromptArgument(name="arg2", description="Second test argument"),
        ),
        render=prompt_with_arguments,
    ),
    Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt that includes an embedded resource",
        arguments=(PromptArgument(name="resourceUri", description="URI of the resource to embed"),),
        render=prompt_with_resource,
    ),
    Prompt(name="test_prompt_with_image", description="A prompt that includes image content", render=prompt_with_image),
)
