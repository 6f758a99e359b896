"""The gateway↔worker wire protocol version, kept apart from the package version.

Bump it whenever a message, field or frame layout changes incompatibly; a gateway and a
worker of different versions refuse each other. `docs/protocol.md` states the same number
(a test checks that they agree).
"""

PROTOCOL_VERSION = 1
