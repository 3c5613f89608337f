"""The `managed-tools` command: parsing the command line (command.py), carrying out each command (commands.py, and
serving.py for `serve`, `tools` and `migrate`, the ones that load the SDK and the catalogue), and what a person reads
at a terminal: the views of what agents did (views.py), `audit export`, `where`, `wakes`, `adopt`, terminal.py's
columns, colour and pager. The top floor: nothing imports it but server/__main__.py. The commands a person answers a
paused call with load only the stores and the config files (docs/decisions/lazy-start-up.md), so most imports here
happen inside the command that needs them.

May import: `server.dashboard`, `server.pages`, `server.http`, `server.stdio`, `server.mcp`, `server.publishing`,
`server.runtime`, `server.consent`, `server.config`, `server`, `tools`, `stores`, `sandbox`.
"""
