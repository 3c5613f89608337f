"""One-time pages on a loopback port: a permission pause's Approve / Deny, and a secret's entry.

A URL-mode elicitation sends the person here instead of asking through the client's form: the client never sees
the answer, and a secret never travels through MCP (the spec forbids secrets in form elicitation).

- `board.py`: the pages open now, each bound to its request and session, single-use, expiring;
- `site.py`: the HTTP side (Host, Origin, CSRF checks and strict headers) and `html.py` what it shows;
- `serving.py`: the server on 127.0.0.1, a random port, in the event loop of every transport;
- `secret_input.py`: the `VariableInput` that asks for a secret through a page.
"""
