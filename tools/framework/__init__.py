"""The framework every tool family is written against, on four floors: calls/ (the executor, the one path of every
call) over definitions/ (the definition contract, its published form, the registry and its rules, toolsets) over
context/ (what a handler gets: the context, the runtime, ports and the parts they hand out) over wire/ (models,
content blocks, errors, what is masked). The families (tools/<family>/) use it; it never imports a family, `server`
or `mcp`.
"""
