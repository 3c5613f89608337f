"""The live local dashboard: what the agents did and are doing, for the person at the machine.

`managed-tools dashboard` serves it on its own, from the state database alone (any number of servers may run on
it in other processes); `serve` on a terminal serves it beside the approval pages and prints its link.

- `board.py`: one dashboard's capabilities (its URL token, CSRF token, the key that binds an answer to its
  request) and how a person's answer to a permission request is taken, once;
- `site.py`: the HTTP side (the page, its JSON, the SSE event stream, answers), with the approval pages'
  checks: the exact Host, the token in the URL, same-origin form POSTs carrying the CSRF token;
- `page.py`: the self-contained page (no external asset; its one script and stylesheet allowed by hash);
- `serving.py`: the standalone command.

May import: `server.pages`, `server.consent`, `stores`.
"""
