"""Extensions: a Python module named on the command line that adds tools, resources and prompts.

    managed-tools serve --tools-module my_extension      # an importable module (e.g. via PYTHONPATH)
    managed-tools serve --tools-module ./my_extension.py # or a file: no PYTHONPATH needed

The module exposes any of:

- `TOOLS`: `tools.framework.definition.ToolDefinition`s. They pass the same registry rules and run through the same
  executor (validation, permission pauses, transactions, events) as the managed catalogue.
- `RESOURCES`: `Resource`s (one fixed URI) and `ResourceTemplate`s (an RFC 6570 level-1 template such as
  `notes://{id}`), read when a client asks.
- `PROMPTS`: `Prompt`s, rendered when a client asks.

Resources and prompts are plain functions of their arguments: they are read on demand and never change on
their own, so nothing is ever pushed to a subscriber.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Annotated, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.framework.wire.content import ContentBlock
from managed_tools.tools.planning.strategies import Strategy

T = TypeVar("T")
NonEmpty = Annotated[str, Field(min_length=1)]
RESERVED_PROMPTS: tuple[str, ...] = get_args(Strategy)  # the server's own prompts
TEMPLATE_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ExtensionError(Exception):
    """An extension module could not be loaded; the message names the module and the problem."""


class _Definition(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class Resource(_Definition):
    """A resource at one URI; `read()` returns its text, or bytes for binary content."""

    uri: NonEmpty
    name: NonEmpty
    title: str | None = None
    description: NonEmpty
    mime_type: str = "text/plain"
    read: Callable[[], Awaitable[str | bytes]]


class ResourceTemplate(_Definition):
    """Resources named by a URI template; `read(variables)` gets the values matched from the URI."""

    uri_template: Annotated[str, Field(pattern=TEMPLATE_VARIABLE.pattern)]
    name: NonEmpty
    title: str | None = None
    description: NonEmpty
    mime_type: str = "text/plain"
    read: Callable[[dict[str, str]], Awaitable[str | bytes]]
    _pattern: re.Pattern[str] = PrivateAttr()

    def model_post_init(self, context: object) -> None:
        # Each `{name}` matches one non-empty path segment; everything else is literal.
        parts = TEMPLATE_VARIABLE.split(self.uri_template)
        regex = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/?#]+)" for i, part in enumerate(parts))
        self._pattern = re.compile(regex)

    def match(self, uri: str) -> dict[str, str] | None:
        found = self._pattern.fullmatch(uri)
        return found.groupdict() if found else None


class PromptArgument(_Definition):
    name: NonEmpty
    description: str = ""
    required: bool = True
    choices: tuple[str, ...] = ()  # offered by completion/complete, filtered by what the user has typed


class PromptMessage(_Definition):
    role: Literal["user", "assistant"]
    content: ContentBlock


class Prompt(_Definition):
    """A prompt template; `render(arguments)` returns its messages (required arguments are checked first)."""

    name: NonEmpty
    title: str | None = None
    description: NonEmpty
    arguments: tuple[PromptArgument, ...] = ()
    render: Callable[[dict[str, str]], Awaitable[Sequence[PromptMessage]]]


@dataclass(frozen=True)
class Extensions:
    tools: tuple[ToolDefinition, ...] = ()
    resources: tuple[Resource | ResourceTemplate, ...] = ()
    prompts: tuple[Prompt, ...] = ()


def load_extensions(modules: Iterable[str]) -> Extensions:
    tools: list[ToolDefinition] = []
    resources: list[Resource | ResourceTemplate] = []
    prompts: list[Prompt] = []
    for name in modules:
        try:
            module = _load_file(Path(name)) if _is_path(name) else importlib.import_module(name)
        except ExtensionError:
            raise
        except Exception as exc:
            raise ExtensionError(f"Cannot import tools module {name!r}: {type(exc).__name__}: {exc}") from exc
        found = {attr: getattr(module, attr, None) for attr in ("TOOLS", "RESOURCES", "PROMPTS")}
        if all(value is None for value in found.values()):
            raise ExtensionError(f"Tools module {name!r} has none of TOOLS, RESOURCES or PROMPTS.")
        tools.extend(_items(name, "TOOLS", found["TOOLS"], (ToolDefinition,)))
        resources.extend(_items(name, "RESOURCES", found["RESOURCES"], (Resource, ResourceTemplate)))
        prompts.extend(_items(name, "PROMPTS", found["PROMPTS"], (Prompt,)))
    _unique("resource", [r.uri if isinstance(r, Resource) else r.uri_template for r in resources])
    _unique("prompt", [*RESERVED_PROMPTS, *(p.name for p in prompts)])
    return Extensions(tuple(tools), tuple(resources), tuple(prompts))


def _is_path(name: str) -> bool:
    """A module name never holds a path separator or ends in .py; a file path does."""
    return name.endswith(".py") or "/" in name or os.sep in name


def _load_file(path: Path) -> ModuleType:
    """Load an extension from its file, as the module named by its stem (so its classes pickle and resolve)."""
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ExtensionError(f"Tools module file {str(path)!r} does not exist or is not a file.")
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        if getattr(loaded, "__file__", None) and Path(str(loaded.__file__)).resolve() == path:
            return loaded
        raise ExtensionError(f"Tools module file {str(path)!r}: a module named {name!r} is already loaded; rename it.")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ExtensionError(f"Tools module file {str(path)!r} is not a Python module.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _items(module: str, attr: str, value: object, kinds: tuple[type[T], ...]) -> list[T]:
    if value is None:
        return []
    items = list(value) if isinstance(value, list | tuple) else None
    if items is None:
        raise ExtensionError(f"{attr} in {module!r} must be a list or tuple.")
    bad = sorted({type(item).__name__ for item in items if not isinstance(item, kinds)})
    if bad:
        wanted = " or ".join(kind.__name__ for kind in kinds)
        raise ExtensionError(f"{attr} in {module!r} must hold {wanted} objects, found {', '.join(bad)}.")
    return items


def _unique(kind: str, keys: list[str]) -> None:
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ExtensionError(f"Each {kind} must be published once; registered twice: {', '.join(twice)}.")
