"""``zodex local watch``: a loopback host that serves Liveboard and proxies the observer API.

The browser reaches the host at ``http://127.0.0.1:<port>/<secret>/`` (a per-run
capability URL); the host adds the observer's bearer to an allowlist of requests and
never hands it to the browser. See docs/observer.md.
"""

from zodex_gateway.viewers.watch.app import create_watch_app
from zodex_gateway.viewers.watch.host import WatchHost, run_watch
from zodex_gateway.viewers.watch.proxy import ObserverProxy, ObserverUnavailable

__all__ = ["ObserverProxy", "ObserverUnavailable", "WatchHost", "create_watch_app", "run_watch"]
