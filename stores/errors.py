"""Errors raised by the stores; each message is meant to be shown to a person or a model as is."""

from typing import Literal

# The base, below stores/ and sandbox/ both (managed_tools/errors.py), re-exported: every store error is one.
from managed_tools.errors import StoreError as StoreError  # noqa: PLC0414

# Why a write was refused, as a result's error kind: another writer held the lock, the state file was replaced,
# PostgreSQL cannot be reached, the disk is full, the file system turned read-only, the state's files were changed
# underneath the server or found damaged.
UnwritableKind = Literal["busy", "state_gone", "state_unavailable", "disk_full", "state_read_only", "state_damaged"]


class NotFoundError(StoreError):
    """The named record does not exist."""


class PendingCapError(StoreError):
    """A session or a principal already has as many permission requests waiting for a person as it may
    (config.json `pendingApprovals`); no new one was made."""


class AccessDeniedError(StoreError):
    """The record exists but belongs to another agent or scope."""


class DatabaseUnwritableError(StoreError):
    """The state database cannot take a write now; nothing was written. `kind` names why, for a result's error kind."""

    kind: UnwritableKind = "busy"


class DatabaseBusyError(DatabaseUnwritableError):
    """Another process held the database write lock longer than the busy timeout."""


class DatabaseGoneError(DatabaseUnwritableError):
    """The state file was deleted or replaced under the running server: a write would land in a file no later
    start opens, so none is taken until a restart."""

    kind: UnwritableKind = "state_gone"


class DatabaseUnavailableError(DatabaseUnwritableError):
    """PostgreSQL cannot be reached (restarting, failing over, the network down): the call did not run or was
    rolled back; the store reconnects on its own, with backoff."""

    kind: UnwritableKind = "state_unavailable"


class DiskFullError(DatabaseUnwritableError):
    """The disk that holds the state is full; nothing was written."""

    kind: UnwritableKind = "disk_full"


class DatabaseReadOnlyError(DatabaseUnwritableError):
    """The file system that holds the state turned read-only while the server ran (a remount); nothing was
    written."""

    kind: UnwritableKind = "state_read_only"


class DatabaseDamagedError(DatabaseUnwritableError):
    """A file of the state (its write-ahead log or shared-memory index) was deleted or replaced under the running
    server, or SQLite found the state damaged: nothing was written; the server reopens its files and serves again
    once they are sane."""

    kind: UnwritableKind = "state_damaged"


class DatabaseOpenError(StoreError):
    """The state file cannot be opened or prepared at start-up; the message names it (a host path: for the person
    who started the server, never for a model) and says what to do."""


class PreconditionError(StoreError):
    """An optimistic-concurrency precondition (expected version or content hash) did not hold; nothing changed."""
