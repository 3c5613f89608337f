"""Who is calling: the principal and what its scopes let it use (principal.py), OAuth 2.1 as a resource server
(oauth.py) and the verification of its access tokens (oauth_tokens.py), and each principal's fair share of a limit
the principals hold together (fair_share.py).

May import: `server.config`, `tools`, `stores`.
"""
