"""A definition's MCP form and the tools/list a connection sees: ToolDefinition to MCP Tool and CallResult to
CallToolResult (publish.py), the listing built once per registry version, principal and protocol (listing.py), the
search profile's smaller listing (tool_search.py), and the server's instructions.

May import: `server.connection`, `server.auth`, `tools`, `stores`.
"""
