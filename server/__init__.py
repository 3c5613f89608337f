"""Everything MCP, in rooms named for what they hold (docs/architecture.md draws them): cli/ (the command), http/
and stdio/ (the transports), mcp/ (the SDK server, resources, prompts, tasks), publishing/ (tools/list), runtime/
(the process), upstream/ and providers/, consent/ (a person's answers) with pages/ and dashboard/ above it,
connection/, auth/ (who is calling) and config/. tests/test_layers.py's ROOMS says which room may import which;
this module holds only the server's name and version, and imports nothing of ours.
"""

from importlib.metadata import PackageNotFoundError, version

SERVER_NAME = "managed-tools"

try:
    __version__ = version("managed-tools-mcp")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
