"""How three clients' schema conversions take the full catalogue (docs/decisions/portable-schemas.md), before and
after in one run: for each checkout, how many tools openai-agents refuses to make strict (`ensure_strict_json_schema`)
and serves non-strict through its MCP path, whether google-genai converts the MCP tool list (and how many tools it
refuses one by one), how many pydantic-ai's OpenAI-strict and Gemini transformers refuse, the model-visible
characters, and whether a strict argument set (null for every optional field) of `read` and
`session_schedule_wake` parses. Each checkout is measured in its own process, importing its own code. Needs the
`test` extra. A benchmark, not a test: it always exits 0.

    python bench/client_schemas.py [--before DIR]    # DIR: e.g. `git archive main | tar -x -C DIR`
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MEASURE = r"""
import copy, logging, sys
sys.path[:0] = [".", "tests"]
logging.disable(logging.CRITICAL)
import mcp_types as types
from agents.mcp import MCPServerStdio, MCPUtil
from agents.strict_schema import ensure_strict_json_schema
from google.genai import _mcp_utils as genai
from pydantic_ai.profiles.google import GoogleJsonSchemaTransformer
from pydantic_ai.profiles.openai import OpenAIJsonSchemaTransformer
from support.snapshot_tools import full_catalogue, listing, visible_chars
from managed_tools.tools.framework.calls.arguments import ArgumentError, parse_call

catalogue = full_catalogue()
tools = [types.Tool(name=t["name"], input_schema=t["inputSchema"]) for t in listing(catalogue)]
server = MCPServerStdio(params={"command": "true"})

def refused(convert):
    count = 0
    for tool in tools:
        try:
            count += convert(tool) is False
        except Exception:
            count += 1
    return count

try:
    genai.mcp_to_gemini_tools(tools)
    whole = "converted"
except Exception as exc:
    whole = f"fails ({type(exc).__name__})"
print(f"  tools {len(tools)}, model-visible characters {sum(visible_chars(d) for d in catalogue):,}")
print("  openai-agents strict refused:", refused(lambda t: ensure_strict_json_schema(copy.deepcopy(t.input_schema))))
print("  openai-agents MCP path non-strict:",
      refused(lambda t: MCPUtil.to_function_tool(t, server, convert_schemas_to_strict=True).strict_json_schema))
print(f"  google-genai MCP list: {whole}; refused one by one:", refused(lambda t: genai.mcp_to_gemini_tools([t])))
print("  pydantic-ai OpenAI strict refused:",
      refused(lambda t: OpenAIJsonSchemaTransformer(copy.deepcopy(t.input_schema), strict=True).walk()))
print("  pydantic-ai Gemini refused:",
      refused(lambda t: GoogleJsonSchemaTransformer(copy.deepcopy(t.input_schema)).walk()))
definitions = {d.name: d for d in catalogue}
for name, arguments in (
    ("read", {"path": "a.txt", "maxChars": None, "startLine": None, "lineCount": None, "tailLines": None}),
    ("session_schedule_wake", {"reason": "r", "dueAt": None, "inSeconds": 60, "priority": None}),
):
    try:
        parse_call(definitions[name], arguments)
        print(f"  {name} with nulls: accepted")
    except ArgumentError as exc:
        print(f"  {name} with nulls: refused ({str(exc)[:90]})")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a checkout of an earlier commit, measured first")
    options = parser.parse_args()
    for label, where in (("before", options.before), ("after", ROOT)):
        if where is None:
            continue
        print(f"{label} ({where}):", flush=True)
        subprocess.run([sys.executable, "-c", MEASURE], cwd=where, check=False)


if __name__ == "__main__":
    main()
