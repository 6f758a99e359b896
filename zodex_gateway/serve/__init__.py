"""Serving a gateway: every MCP transport — stdio, and streamable HTTP behind the front its
mode passes in (Local's, Sprite's, the fleet's: each in its mode's package) — with the
Local features wired into the tools, and running it all until it is stopped."""
