"""A model provider for tests: a real HTTP server (Starlette on uvicorn, a free loopback port) that speaks the
OpenAI chat-completions API and the Anthropic Messages API, answering from a script. The client under test is
the server's own (server/providers/); nothing of it is replaced."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


@dataclass(frozen=True)
class Step:
    """One scripted answer, in neither API's shape: the text, the tool calls (name, arguments), a refusal, or an
    HTTP error; `delay` seconds before answering."""

    text: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    refusal: bool = False
    status: int = 200
    error: str | None = None
    delay: float = 0.0


def say(text: str) -> Step:
    return Step(text=text)


def call(name: str, arguments: dict[str, Any], text: str = "") -> Step:
    return Step(text=text, calls=((name, arguments),))


@dataclass
class ScriptedModel:
    api: str
    script: list[Step]
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)  # each: {"headers": {...}, "body": {...}}

    async def answer(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append({"headers": dict(request.headers), "body": body})
        step = self.script.pop(0) if self.script else say("(the script ran out)")
        if step.delay:
            await anyio.sleep(step.delay)
        if step.status != 200:
            return JSONResponse({"error": {"type": "scripted", "message": step.error or "failed"}}, step.status)
        n = len(self.requests)
        return JSONResponse(self._openai(step, n) if self.api == "openai" else self._anthropic(step, n))

    @staticmethod
    def _openai(step: Step, n: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
        if step.refusal:
            message["refusal"] = step.text
        if step.calls:
            message["tool_calls"] = [
                {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (name, args) in enumerate(step.calls)
            ]
        usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "choices": [{"index": 0, "message": message}],
                "usage": usage}  # fmt: skip

    @staticmethod
    def _anthropic(step: Step, n: int) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": step.text}] if step.text else []
        content += [
            {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": name, "input": args}
            for i, (name, args) in enumerate(step.calls)
        ]
        stop = "refusal" if step.refusal else "tool_use" if step.calls else "end_turn"
        return {"id": f"msg_{n}", "type": "message", "role": "assistant", "content": content, "stop_reason": stop,
                "usage": {"input_tokens": 100, "output_tokens": 20}}  # fmt: skip


@asynccontextmanager
async def scripted_model(api: str, script: list[Step]) -> AsyncIterator[ScriptedModel]:
    model = ScriptedModel(api, list(script))
    app = Starlette(routes=[Route(PATHS[api], model.answer, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        model.url = f"http://127.0.0.1:{sock.getsockname()[1]}{PATHS[api]}"
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                while not server.started:  # noqa: ASYNC110 (uvicorn offers no event to wait on)
                    await anyio.sleep(0.01)
            try:
                yield model
            finally:
                server.should_exit = True
