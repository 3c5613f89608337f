"""config.json `mcpServers`, in the format Claude Desktop uses: a `command` (stdio) or a `url` (Streamable HTTP)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

# A name becomes the prefix of its tools (`<name>__<tool>`): letters and digits, single `-` or `_` between them,
# so the first `__` of a published name always ends the prefix; short, so the tool names stay under 64.
UPSTREAM_NAME = re.compile(r"^[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*$")
MAX_NAME_CHARS = 24
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
NO_CONTROL = r"^[^\x00-\x08\x0a-\x1f\x7f]*$"  # no NUL, no line breaks (a header value would split)

UpstreamName = Annotated[str, Field(max_length=MAX_NAME_CHARS, pattern=UPSTREAM_NAME.pattern)]
EnvName = Annotated[str, Field(pattern=ENV_NAME, max_length=128)]
Value = Annotated[str, Field(pattern=NO_CONTROL, max_length=8192)]


class StdioUpstream(BaseModel):
    """A server we start: `command` and `args`, with `env` on top of a minimal base; never our own environment."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: Literal["stdio"] = "stdio"
    command: Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\x00]*$")]
    args: tuple[Annotated[str, Field(max_length=65536, pattern=r"^[^\x00]*$")], ...] = ()
    env: dict[EnvName, Value] = Field(default_factory=dict)
    # Our addition: directories the program is installed in (a virtualenv, a node_modules), read and run under
    # its confinement; the system directories are always readable.
    read_paths: tuple[Path, ...] = Field(default=(), alias="readPaths")


class HttpUpstream(BaseModel):
    """A server already running elsewhere, reached over Streamable HTTP with `headers` on every request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["http", "streamable-http"] = "http"
    url: Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=4096)]
    headers: dict[Annotated[str, Field(pattern=HEADER_NAME, max_length=256)], Value] = Field(default_factory=dict)


def _kind(entry: Any) -> str | None:
    if isinstance(entry, dict):
        return "stdio" if "command" in entry else "http" if "url" in entry else None
    return "stdio" if isinstance(entry, StdioUpstream) else "http" if isinstance(entry, HttpUpstream) else None


UpstreamSpec = Annotated[
    Annotated[StdioUpstream, Tag("stdio")] | Annotated[HttpUpstream, Tag("http")],
    Discriminator(_kind, custom_error_type="upstream", custom_error_message="needs a `command` or a `url`"),
]
UpstreamSpecs = dict[UpstreamName, UpstreamSpec]
