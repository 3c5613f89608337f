"""Errors raised by the stores; each message is meant to be shown to a person or a model as is."""

from typing import Literal


class StoreError(Exception):
    """A store refused an operation for a reason the caller can act on."""


class NotFoundError(StoreError):
    """The named record does not exist."""


class AccessDeniedError(StoreError):
    """The record exists but belongs to another agent or scope."""


class DatabaseUnwritableError(StoreError):
    """The state database cannot take a write now; nothing was written. `kind` names why, for a result's error kind."""

    kind: Literal["busy", "state_gone"] = "busy"


class DatabaseBusyError(DatabaseUnwritableError):
    """Another process held the database write lock longer than the busy timeout."""


class DatabaseGoneError(DatabaseUnwritableError):
    """The state file was deleted or replaced under the running server: a write would land in a file no later
    start opens, so none is taken until a restart."""

    kind: Literal["busy", "state_gone"] = "state_gone"


class DatabaseOpenError(StoreError):
    """The state file cannot be opened or prepared at start-up; the message names it (a host path: for the person
    who started the server, never for a model) and says what to do."""


class PreconditionError(StoreError):
    """An optimistic-concurrency precondition (expected version or content hash) did not hold; nothing changed."""
