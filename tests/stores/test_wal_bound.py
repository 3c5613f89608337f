"""The WAL stays bounded with several server processes on one data dir (issue 39 F9: 8 stdio servers peaked at
20 MB): each checkpoint waits briefly for the readers of every process, so the WAL starts over instead of growing
while some reader is always on it. Real `managed-tools serve` processes over stdio, writing and reading at once."""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path

import anyio
import pytest
from conftest import data
from mcp import Client, StdioServerParameters

from managed_tools.stores.db.sqlite_file import WAL_SIZE_LIMIT

pytestmark = pytest.mark.anyio

SERVERS = 8
SECONDS = 8.0


async def test_f9_the_wal_stays_bounded_with_eight_servers_on_one_data_dir(workspace: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    wal = data_dir / "state.db-wal"
    args = ["-m", "managed_tools.server", "serve", "--workspace", str(workspace), "--data-dir", str(data_dir)]
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
    sizes: list[int] = []
    writes = 0

    async def work(n: int, until: float) -> None:
        nonlocal writes
        async with Client(params) as client:
            while time.monotonic() < until:
                content = f"{n} " + os.urandom(4_000).hex()
                data(await client.call_tool("memory_write", {"target": "working_buffer", "content": content}))
                data(await client.call_tool("memory_read", {"target": "working_buffer"}))
                writes += 1

    async def watch(until: float) -> None:
        while time.monotonic() < until:
            sizes.append(wal.stat().st_size if wal.exists() else 0)
            await anyio.sleep(0.02)

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            until = time.monotonic() + SECONDS + 10  # the processes' start-up included
            for n in range(SERVERS):
                tg.start_soon(work, n, until)
            tg.start_soon(watch, until)
    assert writes > SERVERS * 10
    # The WAL starts over again and again (back under the limit after it went past it), and its peak between two
    # restarts stays a few limits' worth: 2.1-5.6 MB here on a loaded machine and 6.7 MB once in CI, where 8 servers
    # write about 6 MB a second and a restart waits on readers the machine has descheduled. Before issue 39 F9 the
    # WAL never started over while the servers ran and peaked at 56 and 146 MB in this test.
    restarts = sum(1 for before, after in itertools.pairwise(sizes) if before > WAL_SIZE_LIMIT >= after)
    print(f"{writes} writes by {SERVERS} servers; WAL peak {max(sizes) / 2**20:.2f} MB, {restarts} restarts")
    assert restarts >= 3, sizes
    assert max(sizes) <= 4 * WAL_SIZE_LIMIT, max(sizes)
