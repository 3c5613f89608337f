"""One-time pages on a loopback port: a permission pause's Approve / Deny, and a secret's entry.

A URL-mode elicitation sends the person here instead of asking through the client's form: the client never sees
the answer, and a secret never travels through MCP (the spec forbids secrets in form elicitation). The board of
pages open now, each bound to its request and session, and the `VariableInput` that asks for a secret through one,
are the consent's (server/consent/board.py, secret_input.py); this package serves them:

- `site.py`: the HTTP side (Host, Origin, CSRF checks and strict headers) and `html.py` what it shows;
- `serving.py`: the server on 127.0.0.1, a random port, in the event loop of every transport, under the HTTP
  listener's limits (server/http/limits.py).

May import: `server.http`, `server.consent`, `server.config`.
"""
