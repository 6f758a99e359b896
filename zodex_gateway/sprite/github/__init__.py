"""Sprite and GitHub (docs/github.md): the publisher account's service, which alone holds
the Apps' keys and every token, and the agent's side — ``git-remote-zodex`` and
``zodex-agent github`` — which reaches GitHub only through it."""
