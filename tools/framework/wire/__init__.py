"""The shapes a call's values take on the wire, and what is masked in them: the base models (camelCase on the wire),
content blocks, the errors a handler raises, the compact text of list-shaped results, sections of a heavy read, and
the secrets redacted and scanned for. The framework's lowest floor.

May import: none.
"""
