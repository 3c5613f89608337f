"""The MCP server itself: the SDK's low-level Server publishing the catalogue (app.py, where every request handler is
wired), and what it serves beside tools/list: resources and their "updated" notifications (resources.py), the
resources and prompts extensions publish (library.py), the planning prompts, long calls as tasks (tasks.py), approval
cards for MCP Apps hosts, and the work a serving process does in the background that ends in a notification: the
relay from other processes (relay.py), the workspace watcher (watch.py) and the wake scheduler.

May import: `server.publishing`, `server.runtime`, `server.upstream`, `server.consent`, `server.connection`,
`server.auth`, `server.config`, `server`, `tools`, `stores`.
"""
