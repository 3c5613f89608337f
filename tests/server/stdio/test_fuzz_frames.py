"""Malformed JSON-RPC frames against real server processes, stdio and Streamable HTTP, in both protocol eras:
truncated JSON, wrong types, huge ids and strings, deep nesting, invalid UTF-8, batches, unknown methods. The
server keeps answering (tools/list after every 25 frames), never exits, answers only clear JSON-RPC errors, and
prints no traceback and no host path. A short seeded budget; bench/fuzz.py runs the long one."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fuzz_frames import ERAS, Era, FrameMaker, HttpServer, StdioServer, Tally, fuzz_http, fuzz_stdio

FRAMES = 200
SEEDS: dict[Era, int] = {"modern": 2026, "handshake": 2025}


def report(tally: Tally, problems: list[str]) -> str:
    lines = [f"{where}: {frame!r:.160} -> {why}" for where, frame, why in tally.failures[:20]]
    return "\n".join(lines + problems)


def covered(tally: Tally) -> None:
    assert tally.frames == FRAMES and tally.probes == FRAMES // 25
    assert set(tally.categories) == set(FrameMaker(0, "modern").categories)


@pytest.mark.parametrize("era", ERAS)
def test_stdio_keeps_answering_malformed_frames(tmp_path: Path, workspace: Path, era: Era) -> None:
    server = StdioServer(workspace, tmp_path / "data", era)
    try:
        tally = fuzz_stdio(server, era, FRAMES, SEEDS[era])
    finally:
        problems = server.stop()
    assert not tally.failures and not problems, report(tally, problems)
    covered(tally)
    assert tally.answers["error -32601"] and tally.answers["error -32602"]


def test_http_keeps_answering_malformed_frames_in_both_eras(tmp_path: Path, workspace: Path) -> None:
    server = HttpServer(workspace, tmp_path / "data")
    try:
        tallies = [fuzz_http(server, era, FRAMES, SEEDS[era]) for era in ERAS]
    finally:
        problems = server.stop()
    for tally in tallies:
        assert not tally.failures and not problems, report(tally, problems)
        covered(tally)
        assert tally.answers["error -32700"] and tally.answers["HTTP 400"]
