"""Tool variables (seed 000 §3): resolving a call's declared variables, and asking a person for a missing one.

Resolution order, first value wins:
1. the session: a text value a person gave in this session; a variable that is not `scoped` also takes the
   value of the nearest ancestor session (a scoped one stops at the session that was given it);
2. the agent's vault (encrypted secrets, `managed-tools secret set NAME`);
3. the server's config.json `variables` (a text literal, or `{"env": "VAR"}`).
A secret never resolves from the session: only a person gives one, out of the model's and the form's reach.

A required variable without a value pauses the call before anything runs: the VariableInput port asks a person.
A given text is kept for the session; a given secret goes to the agent's vault, encrypted. Values reach the
handler as `ctx.variables`, never through arguments, and nothing resolved is recorded in events.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import SecretStr

from managed_tools.stores import events, session_variables, vault
from managed_tools.stores.db import Tx
from managed_tools.tools.framework.context.context import Attachment, Runtime
from managed_tools.tools.framework.context.ports import VariableInput, VariableRequest
from managed_tools.tools.framework.context.variable_sources import VariableSources, config_value
from managed_tools.tools.framework.definitions.definition import ToolDefinition, Variable

DEFAULT_AGENT = "default"

MissingKind = Literal["permission", "input_required", "requires_action"]


class Missing(Exception):
    """A required variable has no value and none was given; the message says why and what to do."""

    def __init__(self, kind: MissingKind, message: str, action: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.action = action


def secret_command(name: str, agent_id: str) -> str:
    """The command a person runs to put a secret in this agent's vault (its --data-dir goes to the server log)."""
    return f"managed-tools secret set {name}" + ("" if agent_id == DEFAULT_AGENT else f" --agent {agent_id}")


async def resolve(runtime: Runtime, name: str, session_id: str | None = None, *, secret: bool = False,
                  scoped: bool = False) -> str | None:  # fmt: skip
    """The value of `name`: the session (not for a secret), the agent's vault, then config.json."""
    sources = runtime.variables
    async with runtime.db.read() as tx:
        if session_id is not None and not secret:
            found = await session_variables.lineage_value(tx, session_id, name, inherited=not scoped)
            if found is not None:
                return found
        return await stored_or_configured(tx, sources, runtime.environment.agent_id, name)


async def stored_or_configured(tx: Tx | None, sources: VariableSources, agent_id: str, name: str) -> str | None:
    """Steps 2 and 3: the agent's vault (when there is a state to read it in), then config.json: what an upstream
    server's `${vault:NAME}` reads."""
    if sources.vault is not None and tx is not None:
        stored = await vault.get_secret(tx, sources.vault, agent_id, name)
        if stored is not None:
            return stored.get_secret_value()
    configured = sources.config.get(name)
    return None if configured is None else config_value(configured)


async def gather(
    runtime: Runtime, attachment: Attachment, asker: VariableInput, definition: ToolDefinition
) -> dict[str, str]:
    """The values of the tool's variables that resolve, asking a person for each required one that does not."""
    values: dict[str, str] = {}
    for variable in definition.variables:
        value = await resolve(
            runtime, variable.name, attachment.session_id, secret=variable.type == "secret", scoped=variable.scoped
        )
        if value is None and variable.required:
            value = await _ask(runtime, attachment, asker, definition.name, variable)
        if value is not None:
            values[variable.name] = value
    return values


def secret_values(definition: ToolDefinition, values: dict[str, str]) -> tuple[str, ...]:
    """The resolved secrets of a call: what redaction removes from everything the call shows or records."""
    return tuple(values[v.name] for v in definition.variables if v.type == "secret" and values.get(v.name))


async def _ask(runtime: Runtime, attachment: Attachment, asker: VariableInput, tool: str, variable: Variable) -> str:
    name = variable.name
    request = VariableRequest(tool_name=tool, name=name, type=variable.type, description=variable.description)
    answer = await asker.ask(request)
    if answer.status == "provided" and answer.value is not None and answer.value.get_secret_value():
        await _keep(runtime, attachment, variable, answer.value)
        return answer.value.get_secret_value()
    action: dict[str, Any] = {"kind": "variable_required", "variable": name, "type": variable.type, "toolName": tool}
    if answer.status == "input_required":
        raise Missing("input_required", f"{tool} is waiting for the user's value of {name}.", action)
    if answer.status in ("provided", "declined"):
        raise Missing("permission", f"The user did not give a value for {name}, so {tool} did not run.")
    agent = runtime.environment.agent_id
    if variable.type == "secret":
        command = secret_command(name, agent)
        action["command"] = command
        message = (
            f"{tool} needs the secret {name} ({variable.description or 'no description'}), and this client cannot "
            f"ask the user for it safely. Ask them to run `{command}` in a terminal (with the server's --data-dir, "
            f"if it has one; it reads the value without echo), then call {tool} again."
        )
    else:
        action["configKey"] = f"variables.{name}"
        message = (
            f"{tool} needs the value of {name} ({variable.description or 'no description'}), and this client cannot "
            f"ask the user for it. Ask them to set `variables.{name}` in the server's config.json, or to use a client "
            f"that supports elicitation; then call {tool} again."
        )
    raise Missing("requires_action", answer.note or message, action)


async def _keep(runtime: Runtime, attachment: Attachment, variable: Variable, value: SecretStr) -> None:
    """A given secret goes to the agent's vault, a given text to the session; the event names it, never its value."""
    where = "vault" if variable.type == "secret" else "session"
    async with runtime.db.write() as tx:
        if variable.type == "secret":
            if runtime.variables.vault is None:
                raise Missing("requires_action", f"This server has no vault to keep the secret {variable.name} in.")
            await vault.set_secret(tx, runtime.variables.vault, runtime.environment.agent_id, variable.name, value)
        else:
            await session_variables.set_value(tx, attachment.session_id, variable.name, value.get_secret_value())
        await events.append_event(
            tx,
            attachment.session_id,
            attachment.wake_id,
            "variable.provided",
            {"name": variable.name, "type": variable.type, "keptIn": where},
            summary=f"{variable.name} was given ({where})",
        )
