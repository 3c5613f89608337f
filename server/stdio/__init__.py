"""Serving over stdio (transport.py) until the client closes stdin or a signal stops the server, and the answer to a
frame the SDK could not read (frames.py).

May import: `server.mcp`, `server.runtime`, `server.config` (the request limit it shares with HTTP).
"""
