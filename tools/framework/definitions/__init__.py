"""The definition and its published form: the ToolDefinition contract (definition.py), the JSON Schemas its models
are published as (schemas.py) and the generated file of them (published.py, published.json), the registry and its
rules (registry.py), toolsets and overrides, and the kinds of tool without a handler of ours: custom, latent, prompt
tools.

May import: `tools.framework.context`, `tools.framework.wire`.
"""
