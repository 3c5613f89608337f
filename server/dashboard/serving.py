"""`managed-tools dashboard`: the dashboard on its own loopback port, over the state database alone (stores, no
MCP SDK), beside any servers running on the same state; and the dashboard a `serve` on a terminal adds to its
page server."""

from __future__ import annotations

import signal
import sys

import anyio

from managed_tools.server.consent.board import Pages
from managed_tools.server.consent.human import StateAt, state_database
from managed_tools.server.dashboard.board import Dashboard
from managed_tools.server.dashboard.site import DashboardSite
from managed_tools.server.pages.serving import serving_loopback
from managed_tools.stores.db import Database, redacted


def where(place: StateAt) -> str:
    return redacted(place.database) if place.database else str(place.state_path)


async def run(place: StateAt) -> None:
    """Serve until SIGINT or SIGTERM; the URL (a capability: whoever has it sees and answers) goes to stdout."""
    async with state_database(place) as db:
        board = Dashboard(db, where=where(place))
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with serving_loopback(DashboardSite(board)) as authority:
                board.authority = authority
                print(f"managed-tools dashboard: {board.url}", flush=True)
                print("Open it in a browser on this machine; the link is its key. Ctrl-C stops it.", file=sys.stderr)
                async for _ in signals:
                    break


def beside_pages(pages: Pages, db: Database, place: str) -> Dashboard:
    """The dashboard served by `pages`' server under `/d/`; its URL is valid once the pages are served."""
    board = Dashboard(db, where=place, authority=pages.authority)
    pages.dashboard = DashboardSite(board)
    pages.want()
    return board
