"""The bridge inside a command's network namespace: 127.0.0.1:PORT there, forwarded to the proxy's unix socket.

Run as `python -I -S -c <this file's text> PORT -- ARGV...` by the server's own interpreter (standard library
only, nothing of the server imported), with the spawn's own proxy socket in $MANAGED_TOOLS_EGRESS_SOCKET (taken
out of the environment before the command runs; without it the command runs with no way out at all). It binds
and listens first, then forks: the parent execs the
command (which keeps the pid the server watches, and its exit status), the child forwards. So the listener is up
before the command's first byte runs, and the forwarder ends with the command: when the command exits, the
forwarder's parent changes and it stops (and the command's process group or PID namespace is killed anyway).
Bounded: MAX_PAIRS connections at once, BUFFER bytes held each way per connection.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys

MAX_PAIRS = 64
BUFFER = 65536
POLL_MS = 500
READ = select.POLLIN | select.POLLHUP | select.POLLERR


class Way:
    """One direction of a connection: bytes read from `src` and not yet written to `dst`."""

    def __init__(self, src: socket.socket, dst: socket.socket) -> None:
        self.src, self.dst = src, dst
        self.buf = bytearray()
        self.eof = False
        self.shut = False


class Forwarder:
    def __init__(self, listener: socket.socket, target: str) -> None:
        self.listener, self.target = listener, target
        self.poll = select.poll()
        self.poll.register(listener, select.POLLIN)
        self.ways: dict[int, tuple[Way, Way]] = {}  # a socket's fd: (the way it reads into, the way it writes out)

    def accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:  # out of fds, or the client already left
            return
        if len(self.ways) >= 2 * MAX_PAIRS:
            client.close()
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.target)
        except OSError:
            client.close()
            upstream.close()
            return
        out, back = Way(client, upstream), Way(upstream, client)
        for sock, ways in ((client, (out, back)), (upstream, (back, out))):
            sock.setblocking(False)
            self.ways[sock.fileno()] = ways
            self.poll.register(sock, select.POLLIN)

    def close(self, fd: int) -> None:
        reads, _ = self.ways[fd]
        for sock in (reads.src, reads.dst):
            self.ways.pop(sock.fileno(), None)
            self.poll.unregister(sock)
            sock.close()

    def step(self, fd: int, events: int) -> None:
        reads, writes = self.ways[fd]
        if events & READ and not reads.eof and len(reads.buf) < BUFFER:
            data = reads.src.recv(BUFFER - len(reads.buf))
            reads.buf += data
            reads.eof = not data
        if writes.buf and events & select.POLLOUT:
            del writes.buf[: writes.dst.send(writes.buf)]
        for way in (reads, writes):
            if way.eof and not way.buf and not way.shut:
                way.dst.shutdown(socket.SHUT_WR)  # pass the half-close on
                way.shut = True
        if reads.shut and writes.shut:
            self.close(fd)
            return
        for way in (reads, writes):  # what each end waits for now
            self.poll.modify(way.src, (select.POLLIN if not way.eof and len(way.buf) < BUFFER else 0)
                             | (select.POLLOUT if self.ways[way.src.fileno()][1].buf else 0))  # fmt: skip

    def run(self, parent: int) -> None:
        while os.getppid() == parent:
            for fd, events in self.poll.poll(POLL_MS):
                if fd == self.listener.fileno():
                    self.accept()
                elif fd in self.ways:
                    try:
                        self.step(fd, events)
                    except OSError:
                        self.close(fd)


SOCKET_ENV = "MANAGED_TOOLS_EGRESS_SOCKET"


def main(argv: list[str]) -> None:
    port, separator, command = int(argv[0]), argv[1], argv[2:]
    if separator != "--" or not command:
        sys.exit("usage: netbridge PORT -- ARGV...")
    target = os.environ.pop(SOCKET_ENV, "")
    if target:
        serve(target, port)
    for number in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these, and an exec would pass that on
        signal.signal(number, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"{command[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def serve(target: str, port: int) -> None:
    """Listen on 127.0.0.1:`port`, then fork the forwarder to `target` and return in the parent."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(MAX_PAIRS)
    parent = os.getpid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # never hold the command's pipes open after it ends
            os.dup2(null, fd)
        try:
            Forwarder(listener, target).run(parent)
        finally:
            os._exit(0)
    listener.close()


if __name__ == "__main__":
    main(sys.argv[1:])
