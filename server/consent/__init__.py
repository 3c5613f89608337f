"""A person's answers: how a permission question or a missing variable reaches a person for every kind of client
(consent.py, variables.py, secret_input.py for secrets by page), the board of one-time pages those questions open
(board.py), an answer given outside the client taken the one way (bound_answers.py), and the person's side at a
terminal: pending, approve, deny, respond, interrupt (human.py). The page servers that show the board live above,
in server/pages/ and server/dashboard/.

May import: `server.auth`, `tools`, `stores`.
"""
