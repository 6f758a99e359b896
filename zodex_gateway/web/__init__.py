"""Plumbing every HTTP listener shares, MCP or not: the Host rule and the bearer (with JSON
errors) a front door is made of, serving on a listening socket, and the limits on
connections that are slow to send their headers or send too much."""
