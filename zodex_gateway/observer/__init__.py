"""The observer: what a person watching a Local runtime reads (docs/observer.md).

:mod:`.hub` numbers events and fans them out to subscribers without ever waiting;
:mod:`.feed` turns calls, agents and worker events into those events; :mod:`.timeline`
folds invocations into presentation records; :mod:`.app` serves it all over HTTP and SSE
behind a bearer; :mod:`.steer` is the one route through which a person types into a
session, behind a token of its own. Times are ISO 8601 UTC; cursors are opaque; every response is
``Cache-Control: no-store`` and errors are ``{"schema_version": 1, "error": "…"}``.
"""

from zodex_gateway.observer.app import create_observer_app, file_bearer
from zodex_gateway.observer.steer import Steering, SupervisorSteer

__all__ = ["Steering", "SupervisorSteer", "create_observer_app", "file_bearer"]
