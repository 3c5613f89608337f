"""Content blocks: how a tool's output (or a prompt) is shown to a model, beyond the default compact JSON.

These mirror the MCP content kinds without importing mcp; server/publishing/publish.py turns them into MCP types.
Binary data (`data`, `blob`) is base64, as on the wire.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from managed_tools.tools.framework.wire.models import WireModel


class TextBlock(WireModel):
    type: Literal["text"] = "text"
    text: str


class ImageBlock(WireModel):
    type: Literal["image"] = "image"
    data: str
    mime_type: str


class AudioBlock(WireModel):
    type: Literal["audio"] = "audio"
    data: str
    mime_type: str


class ResourceBlock(WireModel):
    """An embedded resource: its URI and exactly one of `text` or `blob`."""

    type: Literal["resource"] = "resource"
    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None

    @model_validator(mode="after")
    def _one_body(self) -> ResourceBlock:
        if (self.text is None) == (self.blob is None):
            raise ValueError("an embedded resource carries exactly one of text or blob")
        return self


class ResourceLinkBlock(WireModel):
    """A link to a resource the client reads when it wants the bytes (an attachment), not the bytes themselves."""

    type: Literal["resource_link"] = "resource_link"
    uri: str
    name: str
    mime_type: str | None = None
    size: int | None = None


Block = TextBlock | ImageBlock | AudioBlock | ResourceBlock | ResourceLinkBlock
ContentBlock = Annotated[Block, Field(discriminator="type")]
