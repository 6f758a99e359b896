"""What a server says of itself: its name and the instructions clients pass to the model
(docs/modes.md#transports). Plain strings, no MCP SDK: the stdio bridge answers with them too."""

from __future__ import annotations

SERVER_NAME = "zodex"


def instructions(start_directory: str | None) -> str:
    lines = ["Zodex gives you a real machine: run commands with exec_command, continue them with "
             "write_stdin, and edit files with apply_patch. Label this conversation for the person "
             "watching with set_agent_alias (2-7 words)."]  # fmt: skip
    if start_directory:
        lines.append(f"Suggested first workdir: {start_directory}")
    lines.append(
        "Every exec_command and apply_patch call must still give workdir as an absolute path of an "
        "existing directory; none is ever substituted or defaulted."
    )
    return "\n".join(lines)


def sprite_instructions(workspace: str | None) -> str:
    """Sprite's instructions (docs/sprite.md#the-service): remote tools in a Linux workspace."""
    lines = [
        "Zodex Sprite gives you remote execution tools in a Linux workspace on another machine: run "
        "commands with exec_command, continue them with write_stdin, and edit files with apply_patch. "
        "Commands run as the workspace's own account, in a login shell (bash -l)."
    ]
    if workspace:
        lines.append(f"Default workdir: {workspace}")
    lines.append(
        "Every exec_command and apply_patch call must still give workdir as an absolute path of an "
        "existing directory; none is ever substituted or defaulted."
    )
    return "\n".join(lines)
