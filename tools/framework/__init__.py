"""The framework every tool family is written against: the definition contract, the registry and its rules, the
executor (the one path of every call), the context and ports a handler gets, errors, models, content blocks,
variables, toolsets, resources and what a person approves. The families (tools/<family>/) use it; it never imports
a family, `server` or `mcp`."""
