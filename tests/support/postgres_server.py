"""A real PostgreSQL server for the tests: Debian's binaries, a throwaway cluster on a free port.

PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user the package creates.
Each test gets its own database, copied from a template the migrations already ran in.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SKIP_REASON = "PostgreSQL is not installed (apt-get install postgresql); the CI installs it and runs these"
TEMPLATE = "managed_tools_template"


def binaries() -> Path | None:
    """The directory of initdb and pg_ctl: on the PATH, else Debian's newest /usr/lib/postgresql/*/bin."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent  # Debian links some of them into /usr/local/bin; the rest are beside
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_owner() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class Cluster:
    """A throwaway cluster that a test may stop and start again (a restart under connected servers)."""

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.root, self.data, self.port = root, root / "data", _free_port()
        self._pg_ctl = [*_as_owner(), str(bin_dir / "pg_ctl"), "-D", str(self.data)]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        subprocess.run(
            [*self._pg_ctl, "-o", options, "-l", str(self.root / "log"), "-w", "start"],
            check=True, capture_output=True, cwd=self.root,
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        subprocess.run([*self._pg_ctl, "-m", mode, "-w", "stop"], check=False, capture_output=True, cwd=self.root)


@contextmanager
def cluster() -> Iterator[Cluster]:
    """Start a cluster of its own (trust auth on loopback only); stopped and removed afterwards."""
    bin_dir = binaries()
    assert bin_dir is not None, SKIP_REASON
    root = Path(tempfile.mkdtemp(prefix="managed-tools-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    server = Cluster(bin_dir, root)
    subprocess.run(
        [*_as_owner(), str(bin_dir / "initdb"), "-D", str(server.data), "-U", "postgres", "--auth=trust",
         "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"],
        check=True, capture_output=True, cwd=root,
    )  # fmt: skip
    server.start()
    try:
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def running_server() -> Iterator[str]:
    """Start a cluster; yields the URL of its `postgres` database."""
    with cluster() as server:
        yield server.url


def database_url(server: str, name: str) -> str:
    return server.rsplit("/", 1)[0] + "/" + name
