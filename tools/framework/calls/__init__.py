"""The executor's path, the one every call takes (executor.py): the parsed call (call.py) and its arguments, the
permission step, the tool's variables resolved, the span events recorded, the result shaped, tools fulfilled by a
model or a person, and what a call comes to (call_result.py).

May import: `tools.framework.definitions`, `tools.framework.context`, `tools.framework.wire`, `stores`, `sandbox`.
"""
