"""Zodex's own version, as installed (the ``version`` of ``serverInfo``, ``/health`` and
``status.json``); ``0`` when run from a tree that was never installed."""

from __future__ import annotations


def zodex_version() -> str:
    # importlib.metadata here, not at the top: the stdio bridge needs it only with Local down.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zodex")
    except PackageNotFoundError:
        return "0"
