"""Plumbing every HTTP listener shares: the front door (Host, bearer, JSON errors), serving
on a listening socket, and the limits on connections that are slow to send their headers."""
