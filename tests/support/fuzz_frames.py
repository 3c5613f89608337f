"""Malformed JSON-RPC frames, and the real server processes that must keep answering them.

Shared by tests/server/stdio/test_fuzz_frames.py (a short budget) and bench/fuzz.py (a long one). Frames come from a
seeded generator, so a failing frame is reproduced by its seed and index. The servers are real subprocesses: stdio
spoken to line by line (no SDK client, since the frames are malformed) and Streamable HTTP spoken to with raw
POSTs, each in both protocol eras.
"""

from __future__ import annotations

import json
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx2

from managed_tools.server.publishing.publish import ERROR_META_KEY

Era = Literal["modern", "handshake"]
ERAS: tuple[Era, ...] = ("modern", "handshake")
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
INITIALIZE = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "0"}}
SERVE = [sys.executable, "-m", "managed_tools.server", "serve"]
# What a malformed frame may be answered with: parse error, invalid request, method not found, invalid params,
# resource not found (-32002), a 2026-07-28 header that contradicts the body (-32020), and the other era's
# request on a connection (-32022, unsupported version).
CLEAR_CODES = {-32700, -32600, -32601, -32602, -32002, -32020, -32022}
METHODS = [
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "initialize",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
]
TOOL_NAMES = ["environment_describe", "read", "write", "grep", "memory_write", "shell_run", "bash", "session_list"]


def _request(era: Era, method: str, params: Any, ident: Any = 1) -> dict[str, Any]:
    if era == "modern" and isinstance(params, dict):
        params = {**params, "_meta": {**MODERN_META, **params.get("_meta", {})}}
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        frame["params"] = params
    return frame


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class FrameMaker:
    """Malformed frames by category, reproducible from a seed."""

    def __init__(self, seed: int, era: Era) -> None:
        self.rng = random.Random(seed)
        self.era = era
        self.categories: dict[str, Callable[[], bytes]] = {
            "truncated": self.truncated,
            "wrong_type": self.wrong_type,
            "huge_id": self.huge_id,
            "huge_string": self.huge_string,
            "deep_nesting": self.deep_nesting,
            "invalid_utf8": self.invalid_utf8,
            "batch": self.batch,
            "unknown_method": self.unknown_method,
            "bad_params": self.bad_params,
            "not_a_request": self.not_a_request,
        }

    def frames(self, count: int) -> Iterator[tuple[str, bytes]]:
        names = sorted(self.categories)
        for _ in range(count):
            category = self.rng.choice(names)
            yield category, self.categories[category]()

    # ---- building blocks -------------------------------------------------------------------------------------

    def ident(self) -> Any:
        return self.rng.choice([self.rng.randrange(1, 10**6), f"id-{self.rng.randrange(10**6)}"])

    def value(self, depth: int = 0) -> Any:
        """Any JSON value, shallow."""
        rng = self.rng
        makers: list[Callable[[], Any]] = [
            lambda: None,
            lambda: rng.random() < 0.5,
            lambda: rng.randrange(-(2**64), 2**64),
            lambda: rng.uniform(-1e308, 1e308),
            lambda: "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(rng.randrange(8))),
            lambda: "\ud800" + "x" * rng.randrange(4),  # a lone surrogate: valid JSON, not valid Unicode
            lambda: rng.choice(["", "null", "\x00", "../../etc/passwd", "\u202e", "\ufeff"]),
        ]
        if depth < 2:
            makers.append(lambda: [self.value(depth + 1) for _ in range(rng.randrange(3))])
            makers.append(lambda: {f"k{i}": self.value(depth + 1) for i in range(rng.randrange(3))})
        return rng.choice(makers)()

    def valid(self) -> dict[str, Any]:
        method = self.rng.choice(METHODS)
        params: dict[str, Any] = {}
        if method == "tools/call":
            params = {"name": self.rng.choice(TOOL_NAMES), "arguments": {"path": "/workspace/x", "limit": 1}}
        elif method == "resources/read":
            params = {"uri": self.rng.choice(["file:///workspace/x", "memory://nope", "x"])}
        elif method == "initialize":
            params = dict(INITIALIZE)
        return _request(self.era, method, params, self.ident())

    # ---- categories ------------------------------------------------------------------------------------------

    def truncated(self) -> bytes:
        whole = _dump(self.valid())
        return whole[: self.rng.randrange(1, len(whole))]

    def wrong_type(self) -> bytes:
        frame = self.valid()
        key = self.rng.choice(["jsonrpc", "id", "method", "params", "params.name", "params.arguments", "params._meta"])
        if key.startswith("params."):
            params = frame.setdefault("params", {})
            if isinstance(params, dict):
                params[key.split(".", 1)[1]] = self.value()
        else:
            frame[key] = self.value()
        return _dump(frame)

    def huge_id(self) -> bytes:
        ident = self.rng.choice(
            [
                10 ** self.rng.randrange(19, 400),
                -(10 ** self.rng.randrange(19, 400)),
                1e308,
                -0.0,
                "i" * self.rng.choice([1000, 100_000]),
                2**63,
            ]
        )
        return _dump(_request(self.era, "ping", {}, ident))

    def huge_string(self) -> bytes:
        size = self.rng.choice([10_000, 200_000, 1_000_000])
        where = self.rng.randrange(3)
        if where == 0:
            return _dump(_request(self.era, "x" * size, {}, self.ident()))
        if where == 1:
            return _dump(_request(self.era, "tools/call", {"name": "n" * size}, self.ident()))
        args = {"path": "/workspace/" + "p" * size, "content": "c" * size, "query": "q" * size}
        return _dump(_request(self.era, "tools/call", {"name": self.rng.choice(TOOL_NAMES), "arguments": args}))

    def deep_nesting(self) -> bytes:
        depth = self.rng.choice([100, 1000, 10_000, 100_000])
        nested = b"[" * depth + b"]" * depth if self.rng.random() < 0.5 else b'{"a":' * depth + b"1" + b"}" * depth
        head = _dump(_request(self.era, "tools/call", {"name": "environment_describe"}, self.ident()))
        return head[:-2] + b',"arguments":{"x":' + nested + b"}}}"

    def invalid_utf8(self) -> bytes:
        whole = bytearray(_dump(self.valid()))
        for _ in range(self.rng.randrange(1, 4)):
            bad = self.rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf", b"\x80"])
            at = self.rng.randrange(len(whole))
            whole[at:at] = bad
        return bytes(whole)

    def batch(self) -> bytes:
        size = self.rng.choice([0, 1, 2, 5, 50])
        return _dump([self.rng.choice([self.valid(), self.value(), [self.valid()]]) for _ in range(size)])

    def unknown_method(self) -> bytes:
        method = self.rng.choice(
            ["", "rpc.discover", "tools/", "TOOLS/LIST", "tools/list/", "notifications/x", "x\ud800", "\x00", "a" * 300]
        )
        return _dump(_request(self.era, method, {}, self.rng.choice([self.ident(), None])))

    def bad_params(self) -> bytes:
        frame = self.valid()
        frame["params"] = self.rng.choice([self.value(), [1, 2], "params", 7, {"_meta": self.value()}])
        return _dump(frame)

    def not_a_request(self) -> bytes:
        return self.rng.choice(
            [
                b"",
                b"   ",
                b"null",
                b"42",
                b'"a string"',
                b"{}",
                b"NaN",
                b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',  # a duplicate key
                _dump({"jsonrpc": "2.0", "id": self.ident(), "result": {}}),  # a response nobody asked for
                _dump({"jsonrpc": "2.0", "id": self.ident(), "error": {"code": 1, "message": "x"}}),
                _dump({"jsonrpc": "1.0", "id": 1, "method": "ping"}),
                bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 64))),
            ]
        )


@dataclass
class Tally:
    """What a run sent and saw, and every rule broken (where, the frame's start, why)."""

    frames: int = 0
    probes: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    categories: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[str, bytes, str]] = field(default_factory=list)


def check_reply(body: str, secrets: list[str]) -> str | None:
    """Why a reply breaks the rules, or None: a JSON-RPC response whose error has a clear code and whose tool
    result is no internal error, with no traceback and no host path anywhere."""
    if "Traceback" in body:
        return f"a traceback: {body[:300]!r}"
    for secret in secrets:
        if secret in body:
            return f"a host path: {body[:300]!r}"
    try:
        replies = json.loads(body)
    except ValueError:
        return f"a reply that is not JSON: {body[:200]!r}"
    for reply in replies if isinstance(replies, list) else [replies]:
        if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0" or ("result" in reply) == ("error" in reply):
            return f"not a JSON-RPC response: {body[:200]!r}"
        error, result = reply.get("error"), reply.get("result")
        if "error" in reply and (not isinstance(error, dict) or error.get("code") not in CLEAR_CODES):
            return f"an unclear error: {json.dumps(error)[:300]}"
        if isinstance(result, dict) and (result.get("_meta") or {}).get(ERROR_META_KEY, {}).get("kind") == "internal":
            return f"a tool's internal error: {body[:300]!r}"
    return None


def outcome(body: str) -> str:
    try:
        reply = json.loads(body)
    except ValueError:
        return "garbled"
    if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
        return f"error {reply['error'].get('code')}"
    return "result" if isinstance(reply, dict) else "batch"


# ---- stdio ---------------------------------------------------------------------------------------------------


class StdioServer:
    """`managed-tools serve` on stdio; a thread reads its stdout so neither side's pipe ever fills."""

    def __init__(self, workspace: Path, data_dir: Path, era: Era) -> None:
        self.stderr = data_dir.parent / f"stdio-{era}.log"
        self.secrets = [str(workspace), str(data_dir)]
        with self.stderr.open("wb") as errors:
            self.proc = subprocess.Popen(
                [*SERVE, "--workspace", str(workspace), "--data-dir", str(data_dir)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
            )
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        if era == "handshake":
            self.send(_dump(_request(era, "initialize", INITIALIZE, "init")))
            self.until("init")
            self.send(_dump({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, frame: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(frame.replace(b"\n", b" ") + b"\n")
        self.proc.stdin.flush()

    def until(self, ident: str, seconds: float = 30.0) -> tuple[dict[str, Any] | None, list[str]]:
        """Every line up to the reply to `ident`, and that reply (None if the server closed or went quiet)."""
        seen: list[str] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if not line:
                break
            text = line.decode("utf-8", "replace")
            if _reply_id(text) == ident:
                return json.loads(text), seen
            seen.append(text)
        return None, seen

    def stop(self) -> list[str]:
        """Close stdin as a client does when it is done; what went wrong, if anything."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return ([] if code == 0 else [f"exit status {code} after stdin closed"]) + _tracebacks(self.stderr)


def _reply_id(text: str) -> Any:
    try:
        reply = json.loads(text)
    except ValueError:
        return None
    return reply.get("id") if isinstance(reply, dict) else None


def _probe_ok(reply: dict[str, Any] | None) -> bool:
    result = (reply or {}).get("result")
    return isinstance(result, dict) and len(result.get("tools", [])) > 10


def fuzz_stdio(server: StdioServer, era: Era, frames: int, seed: int, batch: int = 25) -> Tally:
    """Send `frames` malformed frames on one stdio connection; after each `batch`, tools/list must answer."""
    tally = Tally()
    sent: list[tuple[str, bytes]] = []
    for index, (category, frame) in enumerate(FrameMaker(seed, era).frames(frames)):
        server.send(frame)
        sent.append((category, frame))
        tally.frames += 1
        tally.categories[category] += 1
        if len(sent) < batch and index < frames - 1:
            continue
        probe = f"probe-{tally.probes}"
        server.send(_dump(_request(era, "tools/list", {}, probe)))
        tally.probes += 1
        reply, seen = server.until(probe)
        where = f"stdio/{era} batch ending at frame {index}"
        for line in seen:
            tally.answers[outcome(line)] += 1
            if (why := check_reply(line, server.secrets)) is not None:
                tally.failures.append((where, b"", why))
        if not _probe_ok(reply):
            exited = "" if server.proc.poll() is None else f"; exited {server.proc.returncode}"
            tally.failures.append((where, b"", f"tools/list got {reply!r:.200}{exited}"))
            # The batch that broke it, for the report.
            tally.failures.extend((f"{where}: {kind}", suspect[:200], "suspect") for kind, suspect in sent)
            break
        sent = []
    return tally


# ---- Streamable HTTP -----------------------------------------------------------------------------------------


class HttpServer:
    """`managed-tools serve --transport http` on a free loopback port; one serves both eras."""

    def __init__(self, workspace: Path, data_dir: Path) -> None:
        self.stderr = data_dir.parent / "http.log"
        self.secrets = [str(workspace), str(data_dir)]
        with self.stderr.open("wb") as errors:
            # No token: the frames must reach the transports, not stop at the 401 (test_http_token.py covers it).
            argv = [*SERVE, "--workspace", str(workspace), "--data-dir", str(data_dir), "--transport", "http"]
            argv += ["--no-token"]
            self.proc = subprocess.Popen([*argv, "--port", "0"], stdin=subprocess.DEVNULL, stderr=errors)
        deadline = time.monotonic() + 60
        while "serving" not in (log := self.stderr.read_text(errors="replace")):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"the HTTP server did not start: {log}")
            time.sleep(0.05)
        self.url = log.split("Streamable HTTP at ")[1].split(",")[0]

    def stop(self) -> list[str]:
        """Stop it as a service manager would; what went wrong, if anything."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        problems = [] if code in (0, -signal.SIGTERM, 143) else [f"exit status {code} on SIGTERM"]
        return problems + _tracebacks(self.stderr)


def _tracebacks(log: Path) -> list[str]:
    text = log.read_text(errors="replace")
    return ["a traceback on stderr: " + text[text.index("Traceback") :][:800]] if "Traceback" in text else []


POST = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def _bodies(response: httpx2.Response) -> list[str]:
    """The JSON-RPC messages in a response: its JSON body, or each SSE `data:` line."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = (line.removeprefix("data:").strip() for line in response.text.splitlines() if line.startswith("data:"))
        return [line for line in data if line]
    return [response.text] if response.text.strip() else []


def _method_header(frame: bytes) -> str:
    """The `mcp-method` header a 2026-07-28 client would send for this body (it must match the body's method)."""
    try:
        method = json.loads(frame).get("method")
    except (ValueError, AttributeError, RecursionError):
        return "tools/call"
    # A header is text of bounded size (a 1 MB header is refused by the HTTP layer before the server sees it).
    fits = isinstance(method, str) and 0 < len(method) <= 200 and method.isascii() and method.isprintable()
    return method if fits else "x"


def fuzz_http(server: HttpServer, era: Era, frames: int, seed: int, batch: int = 25) -> Tally:
    """POST `frames` malformed frames to /mcp; after each `batch`, tools/list must answer on the same footing."""
    tally = Tally()
    with httpx2.Client(timeout=30) as http:
        headers = dict(POST)
        if era == "handshake":
            opened = http.post(server.url, json=_request(era, "initialize", INITIALIZE, 0), headers=headers)
            headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": HANDSHAKE}
            http.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        else:
            headers["mcp-protocol-version"] = MODERN

        def post(body: bytes) -> httpx2.Response:
            extra = {"mcp-method": _method_header(body)} if era == "modern" else {}
            return http.post(server.url, content=body, headers=headers | extra)

        for index, (category, frame) in enumerate(FrameMaker(seed, era).frames(frames)):
            tally.frames += 1
            tally.categories[category] += 1
            try:
                response = post(frame)
            except httpx2.TransportError as exc:
                tally.failures.append((f"http/{era} frame {index} ({category})", frame[:200], f"no answer: {exc!r}"))
                continue
            tally.answers[f"HTTP {response.status_code}"] += 1
            where = f"http/{era} frame {index} ({category})"
            if response.status_code >= 500:
                tally.failures.append((where, frame[:200], f"HTTP {response.status_code}: {response.text[:300]}"))
            for body in _bodies(response):
                tally.answers[outcome(body)] += 1
                if (why := check_reply(body, server.secrets)) is not None:
                    tally.failures.append((where, frame[:200], why))
            if (index + 1) % batch and index < frames - 1:
                continue
            tally.probes += 1
            probe = post(_dump(_request(era, "tools/list", {}, "probe")))
            if not any(_probe_ok(json.loads(body)) for body in _bodies(probe)):
                tally.failures.append((f"http/{era} probe after frame {index}", b"", probe.text[:300]))
                break
    return tally
