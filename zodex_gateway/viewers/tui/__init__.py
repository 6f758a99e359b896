"""``zodex local watch --tui``: Liveboard's model in a terminal (Textual).

:mod:`.client` talks to the observer API, :mod:`.model` holds agents and timeline records,
:mod:`.live` keeps the model current from the event stream, :mod:`.render` draws records
as text, and :mod:`.app` (with :mod:`.widgets`) is the Textual app.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    # Only a type here: the viewer gets the access object from its caller.
    from zodex_gateway.local.observer_access import ObserverAccess

TEXTUAL_REQUIREMENT: Final = "textual>=8.2,<8.3"  # as pyproject.toml's tui extra
NOT_A_TERMINAL: Final = 2  # the CLI's "refused": the request cannot be served here


def missing_textual() -> str:
    install = shlex.join([sys.executable, "-m", "pip", "install", TEXTUAL_REQUIREMENT])
    return (
        "error: zodex local watch --tui needs Textual, which this Zodex was installed without "
        f"(the tui extra); install it with `{install}`, or drop --tui for Liveboard"
    )


def run_tui(access: ObserverAccess, *, agent_id: str | None, show_all: bool) -> int:
    """Run the terminal viewer until the user quits; the exit code for the CLI.

    When the observer stops answering, discovery is read again, so a viewer left open
    follows the runtime across a restart (new port) and a rotated bearer."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("error: zodex local watch --tui needs a terminal (drop --tui for Liveboard)", file=sys.stderr)
        return NOT_A_TERMINAL
    # Imported here so that `zodex` commands that never open the viewer do not load Textual,
    # which is an extra (``zodex[tui]``): a Sprite install and the image go without it.
    if importlib.util.find_spec("textual") is None:
        print(missing_textual(), file=sys.stderr)
        return NOT_A_TERMINAL
    from zodex_gateway.local.observer_access import observer_access
    from zodex_gateway.local.paths import LocalPaths
    from zodex_gateway.viewers.tui.app import WatchApp

    def rediscover() -> ObserverAccess:
        return observer_access(LocalPaths.from_env())

    app = WatchApp(access, agent_id=agent_id, show_all=show_all, rediscover=rediscover)
    app.run()
    return app.return_code or 0


__all__ = ["run_tui"]
