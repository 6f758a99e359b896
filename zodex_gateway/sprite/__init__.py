"""Sprite mode (docs/sprite.md): Zodex as the remote Linux workspace of a model, its
commands run under a dedicated agent account that cannot touch the service."""
