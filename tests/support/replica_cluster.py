"""Replicas behind a real nginx, for tests/server/http/test_replicas.py and bench/replicas.py.

`serve --transport http --replica rN` processes on one workspace and data dir, and nginx (Debian's, unprivileged)
running deploy/nginx.conf itself with its addresses rewritten: its own prefix, pid and logs in a temporary directory.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY_CONF = REPO / "deploy" / "nginx.conf"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
TEMPLATE_PORTS = {"r1": 8801, "r2": 8802}  # the replicas' addresses in deploy/nginx.conf
TEMPLATE_LISTEN = "listen 127.0.0.1:8800;"
URL = re.compile(r"Streamable HTTP at http://127\.0\.0\.1:(\d+)/mcp")
STARTS_WITHIN = 30.0


@dataclass(frozen=True)
class Replica:
    name: str
    port: int
    pid: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


@dataclass(frozen=True)
class Cluster:
    url: str  # the balancer's /mcp
    replicas: tuple[Replica, ...]
    access_log: Path

    def replica(self, name: str) -> Replica:
        return next(r for r in self.replicas if r.name == name)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def nginx_config(template: str, listen: int, ports: dict[str, int]) -> str:
    """deploy/nginx.conf with this run's addresses. With one replica, r2's address is r1's: every route leads to
    the one process, and the config is otherwise the same."""
    assert TEMPLATE_LISTEN in template, "deploy/nginx.conf no longer listens where the tests expect"
    text = template.replace(TEMPLATE_LISTEN, f"listen 127.0.0.1:{listen};")
    first = next(iter(ports.values()))
    for name, template_port in TEMPLATE_PORTS.items():
        text = text.replace(f"127.0.0.1:{template_port};", f"127.0.0.1:{ports.get(name, first)};")
    return text


def started_port(proc: subprocess.Popen[bytes], log: Path) -> int:
    deadline = time.monotonic() + STARTS_WITHIN
    while time.monotonic() < deadline:
        found = URL.search(log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
        if proc.poll() is not None:
            raise RuntimeError(f"a replica exited at start-up: {log.read_text(errors='replace')}")
        time.sleep(0.05)
    raise RuntimeError(f"a replica did not start within {STARTS_WITHIN}s: {log.read_text(errors='replace')}")


@contextmanager
def process(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def cluster(
    workspace: Path,
    data_dir: Path,
    scratch: Path,
    *,
    replicas: int = 2,
    serve_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Iterator[Cluster]:
    """`replicas` servers on one data dir behind nginx; everything stops (SIGTERM) when the block ends."""
    with ExitStack() as stack:
        started: list[Replica] = []
        for number in range(1, replicas + 1):
            name, log = f"r{number}", scratch / f"r{number}.log"
            # No token: the replicas and the balancer are what these tests are about (test_http_token.py has the token).
            argv = [sys.executable, "-m", "managed_tools.server", "serve", "--transport", "http", "--port", "0"]
            argv += ["--no-token"]
            argv += ["--workspace", str(workspace), "--data-dir", str(data_dir), "--replica", name, *serve_args]
            proc = stack.enter_context(process(argv, log, env))
            started.append(Replica(name, started_port(proc, log), proc.pid, log))
        prefix = scratch / "nginx"
        (prefix / "tmp").mkdir(parents=True, exist_ok=True)
        listen = free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_config(DEPLOY_CONF.read_text(), listen, {r.name: r.port for r in started}))
        argv = [NGINX, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
        nginx = stack.enter_context(process(argv, prefix / "nginx.out"))
        listening(listen, nginx, prefix)
        yield Cluster(f"http://127.0.0.1:{listen}/mcp", tuple(started), prefix / "access.log")


def listening(port: int, proc: subprocess.Popen[bytes], prefix: Path) -> None:
    deadline = time.monotonic() + STARTS_WITHIN
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited: {(prefix / 'error.log').read_text(errors='replace')}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nginx did not start listening")
