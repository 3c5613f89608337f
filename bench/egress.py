"""What network-on costs per command, and per request through the egress proxy: p50/p95 measured in one run,
interleaved, each against its baseline.

* `spawn`: `tools.shell.runner.start_process` running /bin/true in the writable shell's domain of three runtimes in
  this process: Landlock alone (MANAGED_TOOLS_CONFINEMENT=landlock-only, the layers' baseline), the full sandbox
  with the network off (bubblewrap's view and namespaces around Landlock), and the full sandbox with the network on
  (the same, plus a proxy channel per command and the bridge started by the server's interpreter in front of it);
* `request`: one HTTP GET to a local server on 127.0.0.1: directly (the baseline), and through a proxy channel
  as CONNECT plus the GET in the tunnel (the upstream step mapped to the local server, as in the tests).

It is a benchmark, not a test: the exit status is 0 whatever the figures are.

    PYTHONPATH=$PWD python bench/egress.py [--calls 200] [--warmup 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from confine import compare, interleaved, table

from managed_tools.sandbox.confine import FORCE_ENV
from managed_tools.sandbox.egress import Egress, Match, NetworkConfig, Streams
from managed_tools.sandbox.spawn import Domain
from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime
from managed_tools.stores.ids import utc_now
from managed_tools.tools.shell.runner import SAFE_PATH, Job, Output, start_process

GET = b"GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n"


def spawn(workspace: Path, confine: Domain | None, egress: Egress | None) -> Callable[[], Awaitable[None]]:
    async def on_done(_: Job) -> None:
        return None

    async def run() -> None:
        job = Job("0" * 16, "bench", "shell", "true", [], "/workspace", utc_now(), Output(4000), Output(4000))
        await start_process(job, ["/bin/true"], cwd=str(workspace), env={"PATH": SAFE_PATH}, limit_s=10,
                            on_done=on_done, confine=confine, egress=egress)  # fmt: skip
        await job.recorded.wait()
        assert job.exit_code == 0, job.stderr.text()

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

    async with server, contextlib.AsyncExitStack() as stack:
        os.environ[FORCE_ENV] = "landlock-only"
        alone = await stack.enter_async_context(open_runtime(config.model_copy(update={"shell_network": False})))
        os.environ.pop(FORCE_ENV)
        off = await stack.enter_async_context(open_runtime(config.model_copy(update={"shell_network": False})))
        on = await stack.enter_async_context(open_runtime(config))
        egress = on.confinement.egress
        domains = [rt.confinement.shell for rt in (alone, off, on)]
        if egress is None or None in domains:
            raise SystemExit(f"no egress here: {on.confinement.egress_reason or on.confinement.mode}")
        proxy = Egress(NetworkConfig(allowed_domains=["bench.test"]), opener=local)
        channel = await proxy.open_channel()
        stack.callback(proxy.close)
        stack.push_async_callback(channel.close)
        spawns = {
            "landlock alone": spawn(workspace, alone.confinement.shell, None),
            "sandbox, network off": spawn(workspace, off.confinement.shell, None),
            "sandbox, network on": spawn(workspace, on.confinement.shell, egress),
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


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = await measure(Path(tmp), options.calls, options.warmup)
    print(f"{options.calls} calls per series after {options.warmup} warm-up, interleaved")
    table(results)
    print("\nadded:")
    print(compare(results["spawn"], "landlock alone", "sandbox, network off"))
    print(compare(results["spawn"], "sandbox, network off", "sandbox, network on"))
    print(compare(results["request"], "direct", "through the proxy"))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
