"""Attachments as a tool result carries them (seed 001 §5): AttachmentRef, the blocks a result shows, the one
store function, and the owner-checked way back to an attachment's file.

A handler attaches with `await ctx.attach(data, name=..., mime_type=...)` (tools/framework/context/context.py); code
outside a tool call (an upstream server's image) with
`await store(runtime, session_id, data, name=..., mime_type=...)`. Either
way the result shows an image as image content and every attachment as a resource link to
`attachments://<session id>/<attachment id>`, readable by the session's own agent only; `read` takes the
AttachmentRef's path, `/attachments/<session id>/<attachment id>`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import anyio

from managed_tools.sandbox.files import read_limited
from managed_tools.sandbox.paths import ATTACHMENTS, Resolved
from managed_tools.stores import attachments
from managed_tools.stores.attachments import AttachmentRecord
from managed_tools.stores.db import Tx
from managed_tools.stores.errors import NotFoundError
from managed_tools.stores.ids import sha256_hex
from managed_tools.stores.images import IMAGE_TYPES
from managed_tools.tools.framework.context.uris import attachment_uri
from managed_tools.tools.framework.wire.content import Block, ImageBlock, ResourceLinkBlock
from managed_tools.tools.framework.wire.models import WireModel

if TYPE_CHECKING:
    from managed_tools.tools.framework.context.context import Runtime

# An image up to this size also travels inline as image content; a larger one only as its link.
INLINE_IMAGE_BYTES = 5 << 20


class AttachmentRef(WireModel):
    """A stored attachment (seed 001 §5.3): `path` is what `read` takes, `uri` the resource to read it by."""

    id: str
    type: Literal["file"] = "file"
    path: str
    uri: str
    name: str
    mime_type: str
    size: int
    width: int | None = None
    height: int | None = None


def ref(record: AttachmentRecord) -> AttachmentRef:
    return AttachmentRef(
        id=record.id, path=f"{ATTACHMENTS}/{record.session_id}/{record.id}",
        uri=attachment_uri(record.session_id, record.id), name=record.name, mime_type=record.mime_type,
        size=record.size, width=record.width, height=record.height,
    )  # fmt: skip


def image_block(data: bytes, mime_type: str) -> ImageBlock:
    return ImageBlock(data=base64.b64encode(data).decode(), mime_type=mime_type)


@dataclass(frozen=True)
class ResultFile:
    """What a result shows after its JSON text: a stored attachment (`ref`), an image inline, or both."""

    ref: AttachmentRef | None = None
    image: ImageBlock | None = None

    def blocks(self) -> list[Block]:
        shown: list[Block] = [] if self.image is None else [self.image]
        if self.ref is not None:
            link = self.ref
            shown.append(ResourceLinkBlock(uri=link.uri, name=link.name, mime_type=link.mime_type, size=link.size))
        return shown


def attached(record: AttachmentRecord, data: bytes) -> ResultFile:
    """A just-stored attachment as a result shows it: an image small enough inline too."""
    inline = record.mime_type in IMAGE_TYPES and record.size <= INLINE_IMAGE_BYTES
    return ResultFile(ref=ref(record), image=image_block(data, record.mime_type) if inline else None)


async def save(runtime: Runtime, tx: Tx, session_id: str, data: bytes, *, name: str, mime_type: str) -> ResultFile:
    """Store in `tx` when it is the write transaction (so undone with it), else in a short write of its own."""
    if not tx.writing:
        return await store(runtime, session_id, data, name=name, mime_type=mime_type)
    record = await attachments.save(tx, runtime.environment.data_dir, session_id, data, name=name,
                                    mime_type=mime_type, limits=runtime.attachment_limits)  # fmt: skip
    return attached(record, data)


async def store(runtime: Runtime, session_id: str, data: bytes, *, name: str, mime_type: str) -> ResultFile:
    """Store an attachment of `session_id` from outside a tool call (an upstream server's image), in its own write
    transaction. `.ref` is its AttachmentRef, `.blocks()` what a result shows. Raises AttachmentError (a StoreError)
    with a message fit for the model when a cap or a check refuses it."""
    async with runtime.db.write() as tx:
        return await save(runtime, tx, session_id, data, name=name, mime_type=mime_type)


async def owned(
    runtime: Runtime, tx: Tx, session_id: str, attachment_id: str, *, owner: str
) -> tuple[AttachmentRecord, Resolved]:
    """An attachment of one of this agent's and principal's sessions and its file, through the path guard;
    anything else is not found (StoreError)."""
    record = await attachments.get(tx, runtime.environment.agent_id, session_id, attachment_id, owner=owner)
    return record, runtime.guard.attachment(session_id, attachment_id)


async def read_owned(
    runtime: Runtime, tx: Tx, session_id: str, attachment_id: str, *, owner: str
) -> tuple[AttachmentRecord, bytes]:
    """An attachment and its bytes, which must still be what was stored (NotFoundError otherwise)."""
    record, resolved = await owned(runtime, tx, session_id, attachment_id, owner=owner)
    data, more = await anyio.to_thread.run_sync(read_limited, resolved, record.size)
    if more or sha256_hex(data) != record.sha256:
        raise NotFoundError(f"Attachment {attachment_id} changed on disk since it was stored; refused.")
    return record, data


async def copy(
    runtime: Runtime, tx: Tx, attachment_id: str, *, from_session: str, to_session: str, owner: str
) -> AttachmentRef:
    """A copy of another session's attachment in `to_session`, so the reference is valid there (seed 000 §7)."""
    record, data = await read_owned(runtime, tx, from_session, attachment_id, owner=owner)
    stored = await save(runtime, tx, to_session, data, name=record.name, mime_type=record.mime_type)
    assert stored.ref is not None
    return stored.ref
