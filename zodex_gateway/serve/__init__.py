"""Serving a gateway: stdio and HTTP transports, the Local features wired into the tools,
and the plumbing every HTTP listener shares (access rules, connection limits, open files)."""
