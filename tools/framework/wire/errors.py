"""Errors a handler raises to give the model an actionable message (turned into an isError result)."""


class ToolError(Exception):
    """The call cannot be done as asked; the message says why and what to do instead."""


class Refused(ToolError):
    """A refusal by design: the call was checked and declined before it did any work (the outcome gate, a
    precondition). It is not failed work, so an outcome evaluation never counts it against the session."""


class RegistryError(Exception):
    """A tool definition breaks a registry rule; raised at start-up so a broken catalogue never serves."""
