"""The mode a gateway serves (docs/modes.md): what it changes in the MCP surface.

Local lists ``set_agent_alias`` and names the start directory in its instructions; Sprite
and the fleet list the three worker tools and give Sprite's instructions, which name the
workspace (docs/sprite.md#the-service, docs/fleet.md#gateways).
"""

from __future__ import annotations

import enum

from zodex_gateway.mcp.instructions import instructions, sprite_instructions


class Mode(enum.StrEnum):
    LOCAL = "local"
    SPRITE = "sprite"
    FLEET = "fleet"

    @property
    def labels_agents(self) -> bool:
        """Whether the gateway answers ``set_agent_alias`` (Local's only)."""
        return self is Mode.LOCAL

    def instructions(self, start_directory: str | None) -> str:
        """What the server says to the model; ``start_directory``: Local's suggested first
        workdir, or the workspace of a Sprite or fleet host."""
        if self is Mode.LOCAL:
            return instructions(start_directory)
        return sprite_instructions(start_directory)
