"""The operator's model provider (config.json `models`, its entry in server/config/provider_spec.py): one module per
API (openai_chat.py, anthropic_messages.py), provider.py the run with its limits and its key.

May import: `server.upstream`, `server.config`, `tools`.
"""
