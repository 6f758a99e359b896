"""After a Sprite worker exits on its idle timer, its ended sessions still answer their final
result (docs/sessions.md#after-exit): the worker, running as the agent, leaves its
tombstones readable by the agent's group, which the service holds (root only)."""

from __future__ import annotations

import stat

from tests.sprite.serve.sprite_support import agent_processes_but_the_template, sprite_setup, tool_json
from tests.support.accounts import require_root
from tests.support.gate import Gate
from tests.support.waiting import wait_until


async def test_a_finished_session_answers_its_final_result_after_the_worker_exited_idle() -> None:
    require_root()
    with sprite_setup(tables={"worker": {"idle-exit": "1s"}}) as sprite:
        async with sprite.mcp() as mcp:
            gate = Gate.make(sprite.workspace, mode=0o666)  # read by the agent's command
            started = tool_json(
                await mcp.call_tool(
                    "exec_command",
                    {
                        "cmd": f"{gate.wait}; echo finished; exit 7",
                        "workdir": str(sprite.workspace),
                        "yield_time_ms": 100,
                    },
                )
            )
            assert started["status"] == "running", started
            handle = started["session_handle"]
            await gate.release()
            workers = sprite.runtime_dir / "runtime" / "w"
            wait_until(
                lambda: any(workers.glob("*.exit")) and not agent_processes_but_the_template(sprite),
                timeout=20,
                what="the worker to exit on its idle timer and leave its tombstones",
            )
            exit_file = next(workers.glob("*.exit"))
            info = exit_file.lstat()
            assert (info.st_uid, info.st_gid) == (sprite.agent.uid, sprite.agent.gid)
            assert stat.S_IMODE(info.st_mode) == 0o640
            final = tool_json(
                await mcp.call_tool("write_stdin", {"session_handle": handle, "yield_time_ms": 100})
            )
        assert final["status"] == "exited", final
        assert final["exit_code"] == 7, final
        assert "session_handle" not in final or final["session_handle"] == handle
