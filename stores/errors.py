"""Errors raised by the stores; each message is meant to be shown to a person or a model as is."""


class StoreError(Exception):
    """A store refused an operation for a reason the caller can act on."""


class NotFoundError(StoreError):
    """The named record does not exist."""


class AccessDeniedError(StoreError):
    """The record exists but belongs to another agent or scope."""


class DatabaseBusyError(StoreError):
    """Another process held the database write lock longer than the busy timeout."""


class DatabaseOpenError(StoreError):
    """The state file cannot be opened or prepared at start-up; the message names it (a host path: for the person
    who started the server, never for a model) and says what to do."""


class PreconditionError(StoreError):
    """An optimistic-concurrency precondition (expected version or content hash) did not hold; nothing changed."""
