"""The environment a Sprite command starts with (docs/modes.md#environment-of-a-command):
built for the agent account, nothing taken from the service's own environment. The worker
adds Local's pager and terminal variables and the session markers to every command."""

from __future__ import annotations

from pathlib import Path
from typing import Final

STANDARD_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AGENT_SHELL: Final = "/bin/bash"
# Every command is a login shell: the agent's profile is read (docs/sprite.md#the-service).
COMMAND_SHELL: Final = [AGENT_SHELL, "-lc"]


def agent_environment(user: str, home: Path, runtime_id: str) -> dict[str, str]:
    return {
        "HOME": str(home),
        "USER": user,
        "LOGNAME": user,
        "SHELL": AGENT_SHELL,
        "PATH": STANDARD_PATH,
        "LANG": "C.UTF-8",
        "ZODEX_RUNTIME_ID": runtime_id,
    }
