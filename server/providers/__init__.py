"""The operator's model provider (config.json `models`): spec.py the entry, one module per API (openai_chat.py,
anthropic_messages.py), provider.py the run with its limits and its key."""
