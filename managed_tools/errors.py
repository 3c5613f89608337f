"""The one error every floor below tools/ shares: a refusal the caller can act on, its message shown as is.

It sits below both sandbox/ and stores/ and imports nothing of ours: the sandbox refuses a path or a file operation
with it, the stores build their errors on it (stores/errors.py), and the file tools keep one error type for "this was
refused", whichever layer refused it.
"""


class StoreError(Exception):
    """A store, or the sandbox's path guard and file access, refused an operation for a reason the caller can act
    on."""
