"""The file hand (reference §2h): read, write, edit, glob, grep, through the one path guard.

Every path goes through `runtime.guard` (sandbox/paths.py); blocking file work runs on a worker thread; outputs
are bounded (line windows, character caps, match limits) and say what they left out.
"""

from __future__ import annotations

import codecs
import difflib
import hashlib
import os
import re
import stat
from collections import deque
from typing import Annotated, BinaryIO, Literal

import anyio
from pydantic import AfterValidator, Field, model_validator

from managed_tools.sandbox import files, ripgrep
from managed_tools.sandbox.files import BINARY_SNIFF_BYTES, atomic_write, open_read
from managed_tools.sandbox.fsaccess import kind_name
from managed_tools.sandbox.paths import Resolved, attachment_parts
from managed_tools.stores import images
from managed_tools.tools.framework.context.attachments import INLINE_IMAGE_BYTES, ResultFile, image_block, owned
from managed_tools.tools.framework.context.context import ToolContext
from managed_tools.tools.framework.context.uris import file_uri
from managed_tools.tools.framework.definitions.definition import ToolDefinition, ToolExample
from managed_tools.tools.framework.wire.content import Block, TextBlock
from managed_tools.tools.framework.wire.errors import ToolError
from managed_tools.tools.framework.wire.models import Arguments, Formatted, NonEmptyStr, NoNul, WireModel

PathArg = Annotated[str, Field(min_length=1, max_length=4096, description="Relative to /workspace, or virtual.")]
DEFAULT_READ_CHARS = 12_000
MAX_READ_CHARS = 200_000
# Up to this size a file is read on the event loop's thread (as the path guard already resolves it there): its
# read takes microseconds, a worker thread's round trip ~0.1 ms; a larger file is read on a worker thread.
READ_HERE_BYTES = 64 * 1024
MAX_WRITE_CHARS = 5_000_000
BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _resolve(ctx: ToolContext, path: str, access: Literal["read", "list", "write", "modify"]) -> Resolved:
    return ctx.runtime.guard.resolve(path, access)


def _decode(raw: bytes) -> tuple[str, str, bool]:
    """(text, encoding, whether invalid bytes were replaced). A BOM names the encoding; otherwise UTF-8."""
    for bom, encoding in BOMS:
        if raw.startswith(bom):
            return raw.decode(encoding, errors="replace"), encoding, False
    try:
        return raw.decode("utf-8"), "utf-8", False
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), "utf-8", True


# ---- read -----------------------------------------------------------------------------------------------


class ReadArgs(Arguments):
    path: PathArg
    max_chars: Annotated[int, Field(ge=1, le=MAX_READ_CHARS)] = DEFAULT_READ_CHARS
    start_line: Annotated[int | None, Field(ge=1, description="First line to show (1-based).")] = None
    line_count: Annotated[int | None, Field(ge=1, le=100_000, description="How many lines to show.")] = None
    tail_lines: Annotated[int | None, Field(ge=1, le=100_000, description="Show the last N lines.")] = None

    @model_validator(mode="after")
    def _one_window(self) -> ReadArgs:
        if self.tail_lines is not None and (self.line_count is not None or self.start_line is not None):
            raise ValueError("tailLines cannot be combined with startLine or lineCount")
        return self


class LineWindow(WireModel):
    start_line: int
    end_line: int


class ImageInfo(WireModel):
    mime_type: str
    bytes: int


class ReadOutput(WireModel):
    path: str
    mount_path: str
    content: str
    truncated: bool
    char_count: int
    total_line_count: int
    selected_line_count: int
    line_window: LineWindow | None
    showing: str
    encoding: str
    invalid_utf8_replaced: bool
    image: ImageInfo | None = None


def _read_window(handle: BinaryIO, args: ReadArgs) -> tuple[list[str], int, int]:
    """(selected lines, first line number, total lines) streaming the file once; memory is bounded by the window."""
    total = 0
    first = args.start_line or 1
    wanted = args.line_count
    selected: deque[str] | list[str] = deque(maxlen=args.tail_lines) if args.tail_lines else []
    budget = args.max_chars + 1
    for raw in handle:
        total += 1
        if args.tail_lines:
            selected.append(raw.decode("utf-8", errors="replace"))
        elif total >= first and (wanted is None or total < first + wanted) and budget > 0:
            line = raw.decode("utf-8", errors="replace")
            selected.append(line)
            budget -= len(line)
    if args.tail_lines:
        first = max(1, total - len(selected) + 1)
    return list(selected), first, total


def _read_open(resolved: Resolved, handle: BinaryIO, size: int, args: ReadArgs) -> tuple[ReadOutput, bytes | None]:
    """The output, and an image's bytes to attach; the one descriptor, opened beneath the mount, serves every read."""
    head = handle.read(BINARY_SNIFF_BYTES)
    image = images.sniff(head)
    if image is not None:
        picture = head + handle.read(INLINE_IMAGE_BYTES + 1 - len(head))
        if len(picture) > INLINE_IMAGE_BYTES:
            raise ToolError(
                f"{resolved.virtual} is a {size}-byte image; images over {INLINE_IMAGE_BYTES} bytes are not sent."
            )
        return ReadOutput(
            path=resolved.virtual, mount_path=resolved.mount.mount_path, content="", truncated=False,
            char_count=0, total_line_count=0, selected_line_count=0, line_window=None,
            showing=f"image {image}, {len(picture)} bytes (sent as image content)", encoding="binary",
            invalid_utf8_replaced=False, image=ImageInfo(mime_type=image, bytes=len(picture)),
        ), picture  # fmt: skip
    if b"\x00" in head:
        raise ToolError(
            f"{resolved.virtual} looks binary ({size} bytes, NUL bytes in its start); read shows text only. "
            "grep skips binary files too."
        )
    handle.seek(0)
    whole = args.start_line is None and args.line_count is None and args.tail_lines is None
    if whole:
        raw = handle.read(args.max_chars * 4 + 4)
        text, encoding, replaced = _decode(raw)
        lines = text.splitlines(keepends=True)
        handle.seek(0)
        total = _count_lines(handle)
        first = 1
    else:
        lines, first, total = _read_window(handle, args)
        encoding, replaced = "utf-8", any("\ufffd" in line for line in lines)
    content = "".join(lines)
    truncated = len(content) > args.max_chars or (whole and sum(1 for _ in lines) < total)
    content = content[: args.max_chars]
    shown = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    last = first + shown - 1 if shown else first - 1
    showing = f"showing lines {first}-{last} of {total}" if shown else f"no lines selected ({total} in file)"
    if truncated:
        showing += f" (cut at {args.max_chars} characters; use startLine/lineCount for more)"
    output = ReadOutput(
        path=resolved.virtual,
        mount_path=resolved.mount.mount_path,
        content=content,
        truncated=truncated,
        char_count=len(content),
        total_line_count=total,
        selected_line_count=shown,
        line_window=None if whole and not truncated else LineWindow(start_line=first, end_line=max(first, last)),
        showing=showing,
        encoding=encoding,
        invalid_utf8_replaced=replaced,
    )
    return output, None


def _count_lines(handle: BinaryIO) -> int:
    count = 0
    last = b"\n"
    while chunk := handle.read(1 << 20):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (0 if last == b"\n" else 1)


async def _readable(ctx: ToolContext, path: str) -> Resolved:
    """What `read` opens: a mount path, or an attachment of one of this agent's sessions (its AttachmentRef's
    path), both through the path guard."""
    parts = attachment_parts(path)
    if parts is None:
        return _resolve(ctx, path, "read")
    _, resolved = await owned(ctx.runtime, ctx.tx, *parts, owner=ctx.owner)
    return resolved


async def read(ctx: ToolContext, args: ReadArgs) -> ReadOutput:
    resolved = await _readable(ctx, args.path)
    if not resolved.exists:
        raise ToolError(f"{resolved.virtual} does not exist; glob lists what there is.")
    with open_read(resolved) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= READ_HERE_BYTES:  # a small file is read sooner than a hop to a worker thread and back takes
            output, picture = _read_open(resolved, handle, size, args)
        else:
            output, picture = await anyio.to_thread.run_sync(_read_open, resolved, handle, size, args)
    if output.image is not None and picture is not None:
        ctx.attachments.append(ResultFile(image=image_block(picture, output.image.mime_type)))
    return output


def shown_text(output: ReadOutput) -> list[Block]:
    """What a model reads of a `read`: the file's text itself under one line saying what it is, not the same text
    again as an escaped JSON string (the fields travel once, as structuredContent; docs/decisions/lean-results.md)."""
    notes = [output.showing] + (["invalid UTF-8 replaced"] if output.invalid_utf8_replaced else [])
    header = f"{output.path}: {'; '.join(notes)}"
    return [TextBlock(text=f"{header}\n{output.content}" if output.content else header)]


# ---- write and edit -------------------------------------------------------------------------------------


class WriteArgs(Arguments):
    path: PathArg
    content: Annotated[str, Field(max_length=MAX_WRITE_CHARS)]


class WriteOutput(WireModel):
    path: str
    bytes: int
    sha256: str
    created: bool


async def write(ctx: ToolContext, args: WriteArgs) -> WriteOutput:
    resolved = _resolve(ctx, args.path, "write")
    data = args.content.encode()
    await anyio.to_thread.run_sync(atomic_write, resolved, data)
    touch(ctx, resolved)
    digest = hashlib.sha256(data).hexdigest()
    return WriteOutput(path=resolved.virtual, bytes=len(data), sha256=digest, created=not resolved.exists)


def touch(ctx: ToolContext, resolved: Resolved) -> None:
    """Tell resource subscribers the file changed (the watcher would too, but later)."""
    if (uri := file_uri(resolved.mount.mount_path, resolved.relative)) is not None:
        ctx.touched.add(uri)


MAX_EDITS = 100
DIFF_CHARS = 20_000  # a diff longer than this is cut at a line and says so
DIFF_CONTEXT = 3


class Edit(Arguments):  # one of `edits`: the reference edit_file's {oldText, newText}; the first occurrence is replaced
    old_text: Annotated[str, Field(min_length=1)]
    new_text: str


# One replacement (oldText/newText), or a list of them (`edits`) applied in order, all or none. The texts carry no
# maxLength of their own: the argument cap (max_argument_bytes) bounds them, and the edited file's size is checked
# before any replacement is made. No docstring: it would be the schema's description, read by every model.
class EditArgs(Arguments):
    path: PathArg
    old_text: Annotated[str | None, Field(min_length=1)] = None
    new_text: str | None = None
    replace_all: bool = False
    expected_replacements: Annotated[
        int | None, Field(ge=1, description="Refuse unless oldText occurs exactly this many times.")
    ] = None
    edits: Annotated[list[Edit] | None, Field(min_length=1, max_length=MAX_EDITS)] = None
    dry_run: bool = False

    @model_validator(mode="after")
    def _one_form(self) -> EditArgs:
        single = self.old_text is not None or self.new_text is not None
        if self.edits is not None and (single or self.replace_all or self.expected_replacements is not None):
            raise ValueError("give either edits or oldText/newText (with replaceAll, expectedEdits), not both")
        if self.edits is None and (self.old_text is None or self.new_text is None):
            raise ValueError("oldText and newText are required unless edits is given")
        return self


class EditOutput(WireModel):
    path: str
    occurrences: int
    replacements: int
    bytes: int
    sha256: str
    line_ending: Literal["lf", "crlf"]
    encoding: str
    dry_run: bool
    diff: str
    diff_truncated: bool


def _nearest(text: str, old: str) -> str:
    """Where the text most resembles oldText, so the model can correct itself."""
    lines = text.splitlines()
    target = old.strip().splitlines()[0] if old.strip() else old
    scored = sorted(
        (
            (difflib.SequenceMatcher(None, target.strip(), line.strip()).ratio(), n, line)
            for n, line in enumerate(lines, 1)
        ),
        key=lambda item: (-item[0], item[1]),
    )[:3]
    shown = [f"line {n} ({ratio:.0%} similar): {line.strip()[:160]}" for ratio, n, line in scored if ratio >= 0.5]
    return "; nearest: " + " | ".join(shown) if shown else "; nothing in the file is close to it"


def _replace(
    text: str, crlf: bool, edit: Edit, virtual: str, *, which: str = "", counted: EditArgs | None = None
) -> tuple[str, int, int]:
    """(the text after one replacement, occurrences, replacements), or a ToolError naming the edit. `counted`:
    the single form, whose replaceAll and expectedEdits say how many to replace (one of edits replaces
    the first occurrence, as the reference's edit_file)."""
    expected = None if counted is None else counted.expected_replacements
    every = counted is not None and counted.replace_all
    old, new = edit.old_text, edit.new_text
    if crlf and "\r\n" not in old:  # the model writes \n; the file keeps its own line endings
        old, new = old.replace("\n", "\r\n"), new.replace("\r\n", "\n").replace("\n", "\r\n")
    occurrences = text.count(old)
    if occurrences == 0:
        raise ToolError(
            f"{which}oldText was not found in {virtual}{_nearest(text, edit.old_text)}; nothing was changed."
        )
    if expected is not None and occurrences != expected:
        raise ToolError(f"{which}oldText occurs {occurrences} times in {virtual}, not {expected}; nothing was changed.")
    count = occurrences if every or expected else 1
    # Checked before replacing: a short oldText replaced everywhere by a long newText must not build a huge string.
    if len(text) + count * (len(new) - len(old)) > MAX_WRITE_CHARS:
        raise ToolError(f"{which}the edit would make {virtual} over {MAX_WRITE_CHARS} characters; nothing was changed.")
    return text.replace(old, new, count), occurrences, count


def unified_diff(before: str, after: str, virtual: str) -> tuple[str, bool]:
    """The change as `git diff` shows it (a/ and b/ virtual paths, 3 lines of context), cut at a line past
    DIFF_CHARS. Both sides are the file as read and as it would be written: nothing else is ever diffed."""
    name = virtual.lstrip("/")
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{name}", f"b/{name}", n=DIFF_CONTEXT
    )
    shown: list[str] = []
    size = 0
    for line in lines:
        whole = line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        if size + len(whole) > DIFF_CHARS:
            return "".join(shown), True
        shown.append(whole)
        size += len(whole)
    return "".join(shown), False


def _edit_file(resolved: Resolved, args: EditArgs) -> EditOutput:
    """Every replacement is made in memory first; the file is written once, atomically, only if all applied."""
    if not resolved.exists:
        raise ToolError(f"{resolved.virtual} is not an existing file; write creates files.")
    with open_read(resolved) as handle:
        raw = handle.read()
    if b"\x00" in raw[:8192] and not raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise ToolError(f"{resolved.virtual} looks binary; edit changes text files only.")
    text, encoding, replaced = _decode(raw)
    if replaced:
        raise ToolError(f"{resolved.virtual} is not valid UTF-8; edit refuses to guess its encoding.")
    crlf = "\r\n" in text
    if args.edits is None:
        assert args.old_text is not None and args.new_text is not None  # the model validator's rule
        single = Edit.model_construct(old_text=args.old_text, new_text=args.new_text)
        updated, occurrences, count = _replace(text, crlf, single, resolved.virtual, counted=args)
    else:
        updated, occurrences, count = text, 0, 0
        for number, one in enumerate(args.edits, 1):
            updated, found, made = _replace(updated, crlf, one, resolved.virtual, which=f"edit {number}: ")
            occurrences, count = occurrences + found, count + made
    data = updated.encode(encoding)
    if not args.dry_run:
        atomic_write(resolved, data)
    diff, cut = unified_diff(text, updated, resolved.virtual)
    return EditOutput(
        path=resolved.virtual,
        occurrences=occurrences,
        replacements=count,
        bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        line_ending="crlf" if crlf else "lf",
        encoding=encoding,
        dry_run=args.dry_run,
        diff=diff,
        diff_truncated=cut,
    )


def shown_diff(output: EditOutput) -> list[Block]:
    """What a model reads of an `edit`: one line saying what changed, then the diff as a diff (not an escaped JSON
    string), as the reference filesystem server shows it; the fields travel as structuredContent."""
    done = "dry run, nothing written" if output.dry_run else f"{output.bytes} bytes written, sha256 {output.sha256}"
    cut = "\n(diff cut at a line; the file holds the rest)" if output.diff_truncated else ""
    header = f"{output.path}: {output.replacements} replacement(s), {done}"
    return [TextBlock(text=f"{header}\n```diff\n{output.diff}```{cut}")]


async def edit(ctx: ToolContext, args: EditArgs) -> EditOutput:
    resolved = _resolve(ctx, args.path, "modify")
    output = await anyio.to_thread.run_sync(_edit_file, resolved, args)
    if not args.dry_run:
        touch(ctx, resolved)
    return output


# ---- glob and grep --------------------------------------------------------------------------------------


def glob_regex(pattern: str) -> re.Pattern[str]:
    """The reference's glob: `**` any characters, `*` no slash, `?` one non-slash character; `**/` also
    matches no directory at all, so `**/*.py` finds a top-level `setup.py` too."""
    out = ""
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out += "(?:.*/)?"
            index += 3
        elif pattern.startswith("**", index):
            out += ".*"
            index += 2
        else:
            char = pattern[index]
            out += "[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char)
            index += 1
    return re.compile(out + r"\Z")


class GlobArgs(Formatted):
    pattern: Annotated[NonEmptyStr, Field(max_length=1000, description="`*`, `**`, `?`; no `/` = basename.")]
    path: PathArg = "/workspace"
    kind: Literal["file", "directory"] | None = None
    limit: Annotated[int, Field(ge=1, le=5000)] = 40


class GlobOutput(WireModel):
    path: str
    pattern: str
    count: int
    truncated: bool
    matches: list[str]


MAX_SCAN = 2_000_000


def _directories(files: list[str]) -> set[str]:
    """Every directory that holds a listed file.

    rg lists files in path order, so a directory's ancestors only need walking when the parent changes.
    """
    found: set[str] = set()
    last = ""
    for name in files:
        parent = name.rpartition("/")[0]
        if parent == last:
            continue
        last = parent
        while parent and parent not in found:
            found.add(parent)
            parent = parent.rpartition("/")[0]
    return found


async def glob(ctx: ToolContext, args: GlobArgs) -> GlobOutput:
    resolved = _resolve(ctx, args.path, "list")
    if not await anyio.to_thread.run_sync(files.is_dir, resolved):
        raise ToolError(f"{resolved.virtual} is not a directory.")
    found, cut = await ripgrep.list_files(
        resolved.host, ctx.runtime.guard.private, MAX_SCAN, confine=ctx.runtime.confinement.read_only
    )
    if cut:
        raise ToolError(f"{resolved.virtual} holds over {MAX_SCAN} files; glob a smaller directory.")
    if args.kind == "file":
        entries = found
    else:
        holding = _directories(found)
        # A file listing cannot show an empty directory: walk for those (fully ignored ones stay hidden).
        empty, cut = await anyio.to_thread.run_sync(
            files.empty_directories, resolved, holding, [str(p) for p in ctx.runtime.guard.private], MAX_SCAN
        )
        if cut:
            raise ToolError(f"{resolved.virtual} holds over {MAX_SCAN} entries; glob a smaller directory.")
        directories = sorted(holding.union(empty))
        entries = directories if args.kind == "directory" else sorted(found + directories)
    matcher = glob_regex(args.pattern)
    by_name = "/" not in args.pattern
    hits = [e for e in entries if matcher.match(e.rsplit("/", 1)[-1] if by_name else e)]
    base = resolved.virtual.rstrip("/")
    shown = [f"{base}/{hit}" for hit in hits[: args.limit]]
    return GlobOutput(
        path=resolved.virtual, pattern=args.pattern, count=len(hits), truncated=len(hits) > args.limit, matches=shown
    )


def _one_line(text: str) -> str:
    if "\n" in text:  # rg refuses it, and a refusal on rg's stderr would read as "no matches"
        raise ValueError("holds a line break; grep matches within one line, so search for one line of it")
    return text


class GrepArgs(Arguments):
    query: Annotated[NonEmptyStr, Field(max_length=1000), NoNul, AfterValidator(_one_line)]
    path: PathArg = "/workspace"
    regex: bool = False
    case_sensitive: bool = False
    glob: Annotated[str | None, Field(max_length=500, description="Only files matching this glob."), NoNul] = None
    max_per_file: Annotated[int, Field(ge=1, le=100)] = 1
    limit: Annotated[int, Field(ge=1, le=1000)] = 20


class GrepHit(WireModel):
    path: str
    line: int
    column: int
    preview: str


class GrepOutput(WireModel):
    path: str
    query: str
    count: int
    truncated: bool
    hits: list[GrepHit]


def _preview(text: str, column: int) -> str:
    start = max(0, column - 1 - 80)
    snippet = text[start : start + ripgrep.MAX_PREVIEW_CHARS]
    return ("…" if start else "") + snippet + ("…" if start + ripgrep.MAX_PREVIEW_CHARS < len(text) else "")


async def grep(ctx: ToolContext, args: GrepArgs) -> GrepOutput:
    resolved = _resolve(ctx, args.path, "read")
    info = await anyio.to_thread.run_sync(files.lstat, resolved)
    if info is None:
        raise ToolError(f"{resolved.virtual} does not exist.")
    folder = stat.S_ISDIR(info.st_mode)
    if not folder and not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{resolved.virtual} is {kind_name(info.st_mode)}; grep searches files and directories.")
    if args.regex and (problem := await ripgrep.check_pattern(args.query, confine=ctx.runtime.confinement.read_only)):
        raise ToolError(f"query is not a valid regular expression: {problem}")
    root, target = (resolved.host, ".") if folder else (resolved.host.parent, resolved.host.name)
    matches, cut = await ripgrep.search(
        root, target, args.query, regex=args.regex, case_sensitive=args.case_sensitive, glob=args.glob,
        per_file=args.max_per_file, limit=args.limit, excluded=ctx.runtime.guard.private,
        confine=ctx.runtime.confinement.read_only,
    )  # fmt: skip
    base = resolved.virtual if folder else os.path.dirname(resolved.virtual)
    hits = [
        GrepHit(path=f"{base.rstrip('/')}/{m.path}", line=m.line, column=m.column, preview=_preview(m.text, m.column))
        for m in matches
    ]
    return GrepOutput(path=resolved.virtual, query=args.query, count=len(hits), truncated=cut, hits=hits)


DEFINITIONS = (
    ToolDefinition(
        name="read",
        title="Read a file",
        description="Read a text file (or show an image) in line windows capped by maxChars; says 'showing lines "
        "X-Y of N'.",
        input_model=ReadArgs,
        output_model=ReadOutput,
        handler=read,
        render=shown_text,
        effects=("resource_read",),
        examples=(
            ToolExample(description="Lines 10-29", input={"path": "src/app.py", "startLine": 10, "lineCount": 20}),
        ),
    ),
    ToolDefinition(
        name="write",
        title="Write a file",
        description="Create or replace a file in /workspace atomically (parents created); reports bytes and sha256.",
        input_model=WriteArgs,
        output_model=WriteOutput,
        handler=write,
        read_only=False,
        effects=("resource_write",),
        max_argument_bytes=4 * MAX_WRITE_CHARS + 4096,
    ),
    ToolDefinition(
        name="edit",
        title="Edit a file",
        description="Replace exact text in a file, or apply `edits` all or none; dryRun previews; returns a diff; "
        "keeps line endings and encoding.",
        input_model=EditArgs,
        output_model=EditOutput,
        handler=edit,
        render=shown_diff,
        read_only=False,
        effects=("resource_write",),
        max_argument_bytes=8 * MAX_WRITE_CHARS + 4096,
        examples=(
            ToolExample(
                description="Two edits previewed, all or none",
                input={
                    "path": "src/app.py",
                    "edits": [
                        {"oldText": "DEBUG = True", "newText": "DEBUG = False"},
                        {"oldText": "8000", "newText": "8080"},
                    ],
                    "dryRun": True,
                },
            ),
        ),
    ),
    ToolDefinition(
        name="glob",
        title="Find files",
        description="List files or directories (empty ones too) matching a glob (`*`, `**`, `?`), sorted, "
        "honouring .gitignore.",
        input_model=GlobArgs,
        output_model=GlobOutput,
        handler=glob,
        effects=("resource_read",),
        examples=(ToolExample(description="Every Python file", input={"pattern": "**/*.py"}),),
    ),
    ToolDefinition(
        name="grep",
        title="Search file contents",
        description="Search files for text or a regex (ripgrep: honours .gitignore, skips binary files); line "
        "numbers and previews.",
        input_model=GrepArgs,
        output_model=GrepOutput,
        handler=grep,
        effects=("resource_read",),
        timeout_seconds=60,
    ),
)
