"""Regressions for the bugs issue 13's audit found, each reproduced the way a user met it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from conftest import Connect, data, error_text

from managed_tools.server.config import ServeConfig
from managed_tools.server.runtime import open_runtime
from managed_tools.tools.context import Runtime

pytestmark = pytest.mark.anyio

BAD_NAME_MODULE = '''
from managed_tools.tools.definition import ToolDefinition
from managed_tools.tools.models import Arguments, WireModel


class Args(Arguments):
    x: int = 1


class Out(WireModel):
    y: int


async def echo(ctx, args):
    return Out(y=args.x)


TOOLS = (
    ToolDefinition(
        name="Bad.Name", title="Bad", description="A user tool with a dotted name.",
        input_model=Args, output_model=Out, handler=echo,
    ),
)
'''


async def test_a_user_tool_with_an_off_pattern_name_only_warns(
    workspace: Path, tmp_path: Path, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    module = tmp_path / "bad_name_tools.py"
    module.write_text(BAD_NAME_MODULE)
    config = ServeConfig.build(workspace=workspace, data_dir=None, tool_modules=(str(module),))
    with caplog.at_level(logging.WARNING):
        async with open_runtime(config) as runtime, connect(runtime) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            result = data(await client.call_tool("Bad.Name", {"x": 3}))
    assert "Bad.Name" in names and result == {"y": 3}
    assert "published anyway because it is a user tool" in caplog.text
