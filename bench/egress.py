"""What network-on costs per command, and per request through the egress proxy: p50/p95 measured in one run,
interleaved, each against its baseline.

* `spawn`: `tools.shell.runner.start_process` running /bin/true in the writable shell's Landlock domain, alone (the
  baseline) and with the whole egress path (a proxy channel, the network namespace, and the bridge started by the
  server's interpreter); then `sandbox.spawn.spawn` alone with and without the namespace (bwrap --unshare-net),
  which splits the namespace's share from the bridge's;
* `request`: one HTTP GET to a local server on 127.0.0.1: directly (the baseline), and through a proxy channel
  as CONNECT plus the GET in the tunnel (the upstream step mapped to the local server, as in the tests).

It is a benchmark, not a test: the exit status is 0 whatever the figures are.

    PYTHONPATH=$PWD python bench/egress.py [--calls 200] [--warmup 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from confine import compare, interleaved

from managed_tools.sandbox.egress import Egress, Match, NetworkConfig, Streams
from managed_tools.sandbox.spawn import Domain
from managed_tools.sandbox.spawn import spawn as raw_spawn
from managed_tools.server.config import ServeConfig
from managed_tools.server.runtime import open_runtime
from managed_tools.stores.ids import utc_now
from managed_tools.tools.shell.runner import SAFE_PATH, Job, Output, start_process

GET = b"GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n"


def spawn(workspace: Path, confine: Domain, egress: Egress | None) -> Callable[[], Awaitable[None]]:
    async def on_done(_: Job) -> None:
        return None

    async def run() -> None:
        job = Job("0" * 16, "bench", "shell", "true", [], "/workspace", utc_now(), Output(4000), Output(4000))
        await start_process(job, ["/bin/true"], cwd=str(workspace), env={"PATH": SAFE_PATH}, limit_s=10,
                            on_done=on_done, confine=confine, egress=egress)  # fmt: skip
        await job.recorded.wait()
        assert job.exit_code == 0, job.stderr.text()

    return run


def bare(workspace: Path, confine: Domain, outer: tuple[str, ...]) -> Callable[[], Awaitable[None]]:
    """`sandbox.spawn.spawn` alone, waited for: what the namespace adds, without a channel or the bridge."""

    async def run() -> None:
        proc = await raw_spawn(["/bin/true"], domain=confine, env={"PATH": SAFE_PATH}, cwd=str(workspace), outer=outer)
        assert await proc.wait() == 0

    return run


async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    await writer.drain()
    writer.close()


def request(connect: Callable[[], Awaitable[Streams]], preamble: bytes) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        reader, writer = await connect()
        writer.write(preamble + GET)
        answer = await reader.read()
        writer.close()
        assert answer.endswith(b"\r\n\r\nok"), answer

    return run


async def measure(tmp: Path, calls: int, warmup: int) -> dict[str, dict[str, dict[str, float]]]:
    workspace = tmp / "workspace"
    workspace.mkdir()
    config = ServeConfig.build(workspace=workspace, data_dir=tmp / "data")
    server = await asyncio.start_server(respond, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def local(host: str, _port: int, _how: Match) -> Streams:
        return await asyncio.open_connection("127.0.0.1", port)

    async with server, open_runtime(config) as rt:
        shell, egress = rt.confinement.shell, rt.confinement.egress
        if shell is None or egress is None:
            raise SystemExit(f"no egress here: {rt.confinement.egress_reason or rt.confinement.mode}")
        proxy = Egress(NetworkConfig(allowed_domains=["bench.test"]), opener=local)
        channel = await proxy.open_channel()
        try:
            spawns = {
                "landlock": spawn(workspace, shell, None),
                "+ egress (bridge)": spawn(workspace, shell, egress),
                "bare landlock": bare(workspace, shell, ()),
                "bare + namespace": bare(workspace, shell, egress.view),
            }
            tunnel = b"CONNECT bench.test:443 HTTP/1.1\r\n\r\n"
            requests = {
                "direct": request(lambda: asyncio.open_connection("127.0.0.1", port), b""),
                "through the proxy": request(lambda: asyncio.open_unix_connection(str(channel.path)), tunnel),
            }
            return {
                "spawn": await interleaved(spawns, calls, warmup),
                "request": await interleaved(requests, calls, warmup),
            }
        finally:
            await channel.close()
            proxy.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = await measure(Path(tmp), options.calls, options.warmup)
    print(f"{options.calls} calls per series after {options.warmup} warm-up, interleaved")
    for level, out in results.items():
        print(f"\n{level}:")
        for name, f in out.items():
            print(f"  {name:<20} p50 {f['p50_ms']:7.3f} ms   p95 {f['p95_ms']:7.3f} ms   mean {f['mean_ms']:7.3f} ms")
    print("\nadded:")
    print(compare(results["spawn"], "landlock", "+ egress (bridge)"))
    print(compare(results["spawn"], "bare landlock", "bare + namespace"))
    print(compare(results["request"], "direct", "through the proxy"))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
