"""Serving a gateway: every MCP transport — stdio, and streamable HTTP behind the front of
its mode (Local's here; Sprite's and the fleet's in their packages) — with the Local
features wired into the tools, and stopping everything cleanly afterwards."""
