"""Everything MCP: transports, protocol eras, publishing the catalogue, ports, the CLI and configuration."""

from importlib.metadata import PackageNotFoundError, version

SERVER_NAME = "managed-tools"

try:
    __version__ = version("managed-tools-mcp")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
