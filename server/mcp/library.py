"""The resources and prompts extensions publish, served over MCP: listing, reading, rendering, completion."""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext

from managed_tools.server.publishing.publish import to_mcp_content
from managed_tools.server.runtime.extensions import Extensions, Prompt, Resource, ResourceTemplate
from managed_tools.server.upstream.gateway import MAX_COMPLETIONS, Gateway
from managed_tools.tools.framework.context import telemetry

T = TypeVar("T")
log = logging.getLogger("managed_tools.library")


async def _guarded(what: str, work: Awaitable[T]) -> T:
    """An extension's failure is logged here; the client learns only that it failed (as for tools)."""
    try:
        return await work
    except MCPError:
        raise
    except Exception as exc:
        log.exception("%s failed", what)
        raise MCPError(
            code=types.INTERNAL_ERROR, message=f"{what} failed ({type(exc).__name__}); the server log has the details."
        ) from None


class Library:
    """Handlers for `resources/*`, `prompts/*` and `completion/complete` over the extensions' definitions."""

    def __init__(
        self,
        extensions: Extensions,
        builtin_prompts: tuple[Prompt, ...] = (),
        gateway: Gateway | None = None,
        listed: Callable[[ServerRequestContext[Any]], None] | None = None,
    ) -> None:
        self.gateway = gateway or Gateway()  # the upstream servers' prompts (`<upstream>__<prompt>`) and resources
        self._listed = listed  # who listed prompts hears when an upstream's change (handshake era)
        self._fixed = {r.uri: r for r in extensions.resources if isinstance(r, Resource)}
        self._templates = [r for r in extensions.resources if isinstance(r, ResourceTemplate)]
        self._prompts = {p.name: p for p in (*builtin_prompts, *extensions.prompts)}
        self.has_resources = bool(extensions.resources)
        self._resources = types.ListResourcesResult(
            resources=[
                types.Resource(uri=r.uri, name=r.name, title=r.title, description=r.description, mime_type=r.mime_type)
                for r in self._fixed.values()
            ]
        )
        self._resource_templates = types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=t.uri_template,
                    name=t.name,
                    title=t.title,
                    description=t.description,
                    mime_type=t.mime_type,
                )
                for t in self._templates
            ]
        )
        self._prompt_list = types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name=p.name,
                    title=p.title,
                    description=p.description,
                    arguments=[
                        types.PromptArgument(name=a.name, description=a.description or None, required=a.required)
                        for a in p.arguments
                    ],
                )
                for p in self._prompts.values()
            ]
        )

    # -- resources -----------------------------------------------------------------------------------------

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return self._resources

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return self._resource_templates

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = params.uri
        fixed = self._fixed.get(uri)
        if fixed is not None:
            body, mime_type = await _guarded(f"Reading {fixed.uri}", fixed.read()), fixed.mime_type
        else:
            template, variables = self._template_for(uri)
            body, mime_type = (
                await _guarded(f"Reading {template.uri_template}", template.read(variables)),
                template.mime_type,
            )
        contents: types.TextResourceContents | types.BlobResourceContents
        if isinstance(body, bytes):
            blob = base64.b64encode(body).decode("ascii")
            contents = types.BlobResourceContents(uri=uri, mime_type=mime_type, blob=blob)
        else:
            contents = types.TextResourceContents(uri=uri, mime_type=mime_type, text=body)
        return types.ReadResourceResult(contents=[contents])

    async def subscribe(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        # Published resources never change on their own, so a subscription is accepted and no update is due.
        self._known(params.uri)
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        self._known(params.uri)
        return types.EmptyResult()

    def _known(self, uri: str) -> None:
        if uri not in self._fixed:
            self._template_for(uri)

    def _template_for(self, uri: str) -> tuple[ResourceTemplate, dict[str, str]]:
        for template in self._templates:
            variables = template.match(uri)
            if variables is not None:
                return template, variables
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown resource: {uri[:200]}")

    # -- prompts -------------------------------------------------------------------------------------------

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        if self._listed is not None:
            self._listed(ctx)
        upstream = self.gateway.prompts()
        return types.ListPromptsResult(prompts=self._prompt_list.prompts + upstream) if upstream else self._prompt_list

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name not in self._prompts and self.gateway.owns_prompt(params.name):
            if any(listed.name == params.name for listed in self.gateway.prompts()):
                telemetry.known("gen_ai.prompt.name", params.name)  # an upstream's, listed: not made up
            return await self.gateway.get_prompt(params.name, params.arguments)
        prompt = self._prompt(params.name)
        telemetry.known("gen_ai.prompt.name", prompt.name)
        arguments = dict(params.arguments or {})
        missing = [a.name for a in prompt.arguments if a.required and not arguments.get(a.name)]
        if missing:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"Prompt {prompt.name} needs the argument(s): {', '.join(missing)}.",
            )
        messages = await _guarded(f"Rendering prompt {prompt.name}", prompt.render(arguments))
        return types.GetPromptResult(
            description=prompt.description,
            messages=[types.PromptMessage(role=m.role, content=to_mcp_content(m.content)) for m in messages],
        )

    def _prompt(self, name: str) -> Prompt:
        prompt = self._prompts.get(name)
        if prompt is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {name[:100]}")
        return prompt

    # -- completion ----------------------------------------------------------------------------------------

    async def complete(
        self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        """A prompt argument's `choices` that start with what the user has typed; an upstream's prompt or template
        completed by that upstream; nothing for anything else."""
        ours = isinstance(params.ref, types.PromptReference) and params.ref.name in self._prompts
        if not ours and (forwarded := await self.gateway.complete(params)) is not None:
            return forwarded
        values: list[str] = []
        if isinstance(params.ref, types.PromptReference):
            argument = next(
                (a for a in self._prompt(params.ref.name).arguments if a.name == params.argument.name), None
            )
            typed = params.argument.value.casefold()
            values = [c for c in (argument.choices if argument else ()) if c.casefold().startswith(typed)]
        return types.CompleteResult(
            completion=types.Completion(
                values=values[:MAX_COMPLETIONS], total=len(values), has_more=len(values) > MAX_COMPLETIONS
            )
        )
