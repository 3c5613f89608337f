"""The results of a typical 20-call coding session stay cheap to read (issue 38, item 15): before it they were
about 25,000 characters (bench/session_results.py --before shows both), each setter and preflight answering with a
whole posture; now about 11,000. The budget holds the total and each call, so a result that grows back fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ERAS
from support import typical_session
from test_permissions import answer, client_for

from managed_tools.server.config.serve_config import ServeConfig
from managed_tools.server.runtime.opening import open_runtime

pytestmark = pytest.mark.anyio
MAX_SESSION_CHARS = 12_500
MAX_CALL_CHARS = 2_500


@pytest.mark.parametrize("mode", ERAS)
async def test_a_typical_coding_session_stays_within_its_result_budget(tmp_path: Path, mode: str) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    typical_session.prepare(workspace)
    config = ServeConfig.build(workspace=workspace, data_dir=tmp_path / "data")
    async with (
        open_runtime(config) as runtime,
        client_for(runtime, mode, elicitation_callback=answer("accept", {"approve": True})) as client,
    ):
        rows = await typical_session.run(client)
    assert [name for name, _, failed in rows if failed] == []
    assert [(name, chars) for name, chars, _ in rows if chars > MAX_CALL_CHARS] == []
    assert sum(chars for _, chars, _ in rows) <= MAX_SESSION_CHARS
