"""The error of a GitHub call, apart from the client so the hook can catch it without
loading httpx and PyJWT."""

from __future__ import annotations

__all__ = ["GitHubError"]


class GitHubError(Exception):
    """A GitHub call failed; the message is one line for the operator or the agent."""
