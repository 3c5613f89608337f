"""The configured model (config.json `models`) as the catalogue's ports: one run's model for a child or a wake,
with the run's limits, and a sampler for latent tools.

The key is read from the vault when a request is made (so `managed-tools secret set` takes effect at once) and
joins the process's known secrets, so no result, event, error or log line carries it. What the provider answers
on failure is shown only after those secrets are removed from it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import anyio
import httpx2

from managed_tools.server.config.provider_spec import VAULT_REFERENCE, ModelProviderSpec
from managed_tools.server.providers import anthropic_messages, openai_chat
from managed_tools.server.upstream.secrets import SecretLookup
from managed_tools.tools.framework.context.ports import (
    ChildMode,
    Consent,
    ModelTurn,
    SamplingUnavailableError,
    ToolSpec,
)
from managed_tools.tools.framework.wire.redaction import KNOWN, scrub

APIS: dict[str, ModuleType] = {"openai": openai_chat, "anthropic": anthropic_messages}
SAMPLING_SYSTEM = "Answer exactly as the user's message asks."
MAX_ERROR_CHARS = 300


class ProviderError(SamplingUnavailableError):
    """The provider did not give a usable answer; the message names why and never carries the key."""


class LimitReached(SamplingUnavailableError):
    """The run spent what config.json `models.*.limits` allows it."""


class ConfiguredProvider:
    """The `ModelProvider` port over one `models` entry."""

    def __init__(self, spec: ModelProviderSpec, lookup: SecretLookup) -> None:
        self.spec = spec
        self._lookup = lookup
        self._api = APIS[spec.api]

    def child_model(self, consent_in: Callable[[str, str], Consent]) -> ProviderRun:
        return ProviderRun(self, consent_in)

    def sampler(self) -> ProviderSampler:
        return ProviderSampler(self)

    async def _key(self) -> str | None:
        found = re.fullmatch(VAULT_REFERENCE, self.spec.key or "")
        if found is None:
            return None
        value = await self._lookup(found.group(1))
        if not value:
            raise ProviderError(
                f"the model provider's key {found.group(1)} has no value: a person sets it with "
                f"`managed-tools secret set {found.group(1)}`"
            )
        KNOWN.add([value])
        return value

    async def ask(
        self, system: str, conversation: list[ModelTurn], tools: list[ToolSpec], max_tokens: int, seconds: float
    ) -> tuple[ModelTurn, int]:
        """One request, bounded by `seconds` in all (connecting, waiting, reading)."""
        request = self._api.body(self.spec.model, system, conversation, tools, max_tokens)
        headers = self._api.headers(await self._key())
        response: httpx2.Response | None = None
        with anyio.move_on_after(seconds):
            try:
                async with httpx2.AsyncClient(timeout=seconds, follow_redirects=False) as client:
                    response = await client.post(self.spec.url, json=request, headers=headers)
            except httpx2.TimeoutException:
                pass
            except httpx2.HTTPError as exc:
                raise ProviderError(f"the model provider could not be reached ({type(exc).__name__})") from None
        if response is None:
            raise ProviderError(f"the model provider did not answer within {seconds:.0f} s")
        try:
            reply: Any = response.json()
        except ValueError:
            reply = None
        if response.status_code != 200:
            said = self._api.error_text(reply)
            detail = f": {scrub(said)[:MAX_ERROR_CHARS]}" if said else ""
            raise ProviderError(f"the model provider answered HTTP {response.status_code}{detail}")
        try:
            turn, tokens = self._api.parse(reply)
        except openai_chat.ReplyError as exc:
            raise ProviderError(f"the model provider's answer is unusable: {exc}") from None
        except ValueError:  # a call of the wrong shape (pydantic's error would quote the reply)
            raise ProviderError("the model provider's answer is unusable: a malformed tool call") from None
        return turn.model_copy(update={"text": scrub(turn.text)}), tokens


class ProviderRun:
    """The `ChildModel` port for one run: at most `limits.turns` turns and `limits.tokens` tokens, within
    `limits.wallSeconds` of its start (each request gets what is left)."""

    mode: ChildMode = "model"

    def __init__(self, provider: ConfiguredProvider, consent_in: Callable[[str, str], Consent]) -> None:
        self._provider = provider
        self._consent_in = consent_in
        self._limits = provider.spec.limits
        self._turns = 0
        self._tokens = 0
        self._ends = anyio.current_time() + self._limits.wall_seconds

    def available(self) -> bool:
        return True

    async def turn(
        self, system: str, conversation: list[ModelTurn], tools: list[ToolSpec], *, max_tokens: int
    ) -> ModelTurn:
        limits, left = self._limits, self._ends - anyio.current_time()
        if self._turns >= limits.turns:
            raise LimitReached(f"the run reached its limit of {limits.turns} model turns")
        if self._tokens >= limits.tokens:
            raise LimitReached(f"the run spent its {limits.tokens} tokens ({self._tokens} counted)")
        if left <= 0:
            raise LimitReached(f"the run reached its wall time of {limits.wall_seconds:.0f} s")
        output = min(max_tokens, limits.output_tokens)
        turn, tokens = await self._provider.ask(system, conversation, tools, output, left)
        self._turns += 1
        self._tokens += tokens
        return turn.model_copy(update={"tokens": tokens})

    def consent_in(self, session_id: str, wake_id: str) -> Consent:
        return self._consent_in(session_id, wake_id)


class ProviderSampler:
    """The `Sampler` port (latent tools): each request a run of its own, one turn without tools."""

    def __init__(self, provider: ConfiguredProvider) -> None:
        self._provider = provider

    async def sample(self, prompt: str, *, max_tokens: int) -> str:
        run = ProviderRun(self._provider, _no_consent)
        turn = await run.turn(SAMPLING_SYSTEM, [ModelTurn(role="user", text=prompt)], [], max_tokens=max_tokens)
        if turn.refused:
            raise ProviderError(f"the model declined: {turn.text[:MAX_ERROR_CHARS]}")
        return turn.text


def _no_consent(session_id: str, wake_id: str) -> Consent:
    raise SamplingUnavailableError("a latent tool's model makes no tool calls")
