"""Plumbing every HTTP listener shares: one access rule (Host, bearer) and the limits on
connections that are slow to send their headers."""
